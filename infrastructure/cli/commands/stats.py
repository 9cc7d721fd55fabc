"""``contextledger stats``: token accounting for one conversation or all."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from typing import Any

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.catchup import current_read_models
from contextledger.infrastructure.cli.common import add_command, conversation_id
from contextledger.infrastructure.cli.connect import open_ledger

__all__ = ["register"]


def _shown() -> tuple[str, ...]:
    """The totals shown for every conversation, whichever the source (the read model's)."""
    from contextledger.application.projections.base import TokenTotalsRecord

    return tuple(k for k in TokenTotalsRecord.__dataclass_fields__ if k not in ("key", "conversation_id"))


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``stats``."""
    stats = add_command(
        subparsers,
        "stats",
        "print token accounting for one conversation or all",
        "With CID: the conversation's token totals (what the next prompt costs, what the "
        "full history would cost, summaries and summarizer usage, edits, and the drift of "
        "the estimate from the provider's reported prompt tokens: estimate_error). Without: "
        "the totals of every conversation, a fork's shared history counted once: from the "
        "token_totals read model when it has applied the whole log, else from the log itself "
        "(stats only reads: it never brings the read models up to date; the worker does).",
    )
    stats.add_argument("cid", metavar="CID", type=conversation_id, nargs="?", help="conversation id")
    stats.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``stats [CID]``."""
    record: dict[str, Any]
    with open_ledger(args, read_only=True) as ledger:
        if args.cid is not None:
            totals = ledger.totals(args.cid)
            record = {
                "conversation_id": str(args.cid),
                **{k: v for k, v in vars(totals).items() if k != "conversations"},
                "estimate_error": totals.estimate_error,
            }
        else:
            record = {}
            with ExitStack() as stack:
                models = [
                    stack.enter_context(current_read_models(shard, "token_totals")) for shard in ledger.shards
                ]
                current = [m for m in models if m is not None]
                if len(current) == len(models):  # each store's read models, summed
                    found: list[Any] = [m.token_totals.global_totals() for m in current]
                    source = "token_totals read model"
                else:  # missing or behind: the log, which they are made from
                    found = [ledger.totals()]
                    source = "log"
            for part in found:
                for key in _shown():
                    record[key] = record.get(key, 0) + getattr(part, key)
            record["estimate_error"] = record.get("estimated_prompt_tokens", 0) - record.get(
                "provider_prompt_tokens", 0
            )
            record["source"] = source
        from contextledger.infrastructure.persistence.pgstandby import standby_report

        standby = standby_report(shard.recorder for shard in ledger.shards)
        if standby is not None:  # read on a hot standby: how far behind the primary
            record.update(standby)
    if args.json:
        print(render.dump(record))
        return 0
    width = max(len(k) for k in record) + 2
    for key, value in record.items():
        if value is None:
            continue
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
        if key == "saved_tokens" and record.get("full_history_tokens"):
            shown = f"{shown} ({value / record['full_history_tokens']:.1%} of the full history)"
        render.out(f"{key.replace('_', ' '):<{width}}{shown}")
    return 0
