"""``contextledger rebuild``: recreate read models from the log."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import add_command
from contextledger.infrastructure.cli.connect import open_ledger
from contextledger.infrastructure.cli.render import Progress
from contextledger.infrastructure.cli.signals import interruptible
from contextledger.infrastructure.readmodel_names import READ_MODEL_NAMES

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``rebuild``."""
    rebuild = add_command(
        subparsers,
        "rebuild",
        "rebuild read models from the log",
        "Drops and recreates read model NAME (or all of them: "
        + ", ".join(READ_MODEL_NAMES)
        + ", in one pass over the log) and replays the whole log into it in batches "
        "(one transaction per batch), with progress, events/s and the time left on "
        "stderr (with several stores: each store's read models from its own log). Safe "
        "while writers and workers keep running. Ctrl-C stops after the batch being "
        "applied (exit 130); the read model keeps every committed batch, and "
        "`rebuild --resume` (or a worker) carries on from there.",
    )
    rebuild.add_argument("--resume", action="store_true",
                         help="carry on from where an interrupted rebuild stopped, without starting over")
    rebuild.add_argument("name", metavar="NAME", nargs="?", choices=READ_MODEL_NAMES,
                         help="one read model (default: all)")
    rebuild.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``rebuild [NAME]``."""
    from contextledger.infrastructure.readmodels import SQLReadModels

    names: Sequence[str] = [args.name] if args.name else list(READ_MODEL_NAMES)
    applied_by_name: dict[str, int] = {}
    with open_ledger(args) as ledger, interruptible() as asked:
        several = len(ledger.shards) > 1
        for index, shard in enumerate(ledger.shards):  # each store's own read models
            where = f" (store {index})" if several else ""
            models = SQLReadModels.for_ledger(shard)
            try:
                runner = models.runner(shard, close_with_runner=False)
                began = time.perf_counter()
                label = f"rebuild {names[0] if len(names) == 1 else 'all':<13}"
                with Progress(label, should_stop=asked, unit="event") as progress:
                    applied = runner.rebuild_many(names, progress=progress, resume=args.resume)
                took = time.perf_counter() - began
                for name in names:
                    applied_by_name[name] = applied_by_name.get(name, 0) + applied[name]
                    if not args.json:
                        render.out(f"rebuilt {name}{where}: {applied[name]} events applied in "
                                   f"{took:.1f} s")
            finally:
                models.close()
    if args.json:
        print(render.dump({"rebuilt": applied_by_name}))
    return 0
