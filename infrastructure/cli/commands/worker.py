"""``contextledger worker``: run the summarization policy, the read models and retention."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import TYPE_CHECKING

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, add_command, shard
from contextledger.infrastructure.cli.connect import databases, open_ledger
from contextledger.infrastructure.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.following.follower import LogFollower

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``worker``."""
    worker = add_command(
        subparsers,
        "worker",
        "run the summarization policy and the read models",
        "Follows the log: runs the summarization policy (bounded concurrency, retries with "
        "backoff) and keeps the read models up to date, until SIGTERM or SIGINT. For "
        "PostgreSQL deployments, run several with --shard I/N: shard I summarizes the "
        "conversations whose id modulo N is I; shard 0 also runs the read models. With "
        "several stores it follows each store's log (its own tracking and read models), "
        "or only store J with --follow-store J; --shard I/N then applies inside each "
        "followed store. With retention set (CONTEXTLEDGER_RETENTION_IDLE_DAYS=N), the "
        "worker that runs the read models of the first store also erases, every "
        "--retention-interval seconds, each data subject whose conversations are all idle "
        "for N days (docs/privacy.md).",
    )
    worker.add_argument("--shard", type=shard, metavar="I/N", help="run shard I of N")
    worker.add_argument(
        "--follow-store",
        type=int,
        metavar="J",
        dest="follow_store",
        help="with several stores (--store): follow only store J (0 is the first); default: every store",
    )
    worker.add_argument("--once", action="store_true", help="process until idle, then exit")
    worker.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="with --once: give up (exit 1) if not idle after this long (default 300)",
    )
    worker.add_argument(
        "--retention-interval",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        dest="retention_interval",
        help="with retention set: seconds between two passes (default 3600)",
    )
    worker.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``worker``: until SIGTERM/SIGINT, or idle with ``--once``."""
    stop = threading.Event()
    # Handlers first: a SIGTERM that arrives while starting up still stops cleanly.
    restore = stop_on_signals(stop) if not args.once else (lambda: None)
    try:
        with open_ledger(args) as ledger:
            return _follow(ledger, args, stop)
    finally:
        restore()


def _follow(ledger: Ledger, args: argparse.Namespace, stop: threading.Event) -> int:
    from contextledger.application.shared.observability import traced
    from contextledger.application.summaries.summarization import SummarizationRunner
    from contextledger.infrastructure.cli.waiting import waiting_for
    from contextledger.infrastructure.readmodels import SQLReadModels

    shard_: tuple[int, int] | None = args.shard
    only: int | None = getattr(args, "follow_store", None)
    several = len(ledger.shards) > 1
    if only is not None and not 0 <= only < len(ledger.shards):
        raise Failure(
            f"--follow-store {only}: there are {len(ledger.shards)} stores (0 to {len(ledger.shards) - 1})",
            code=2,
        )
    followed = [only] if only is not None else list(range(len(ledger.shards)))
    with_read_models = shard_ is None or shard_[0] == 0
    runners: dict[int, list[LogFollower]] = {}
    for index in followed:  # each store's log: its own policy, tracking and read models
        store = ledger.shards[index]
        # Traced as the in-process policy is: each summarizer call a span (with tracing on).
        runners[index] = [SummarizationRunner(store, traced(ledger.summarizer, ledger.tracer), shard=shard_)]
        if with_read_models:
            models = SQLReadModels.for_ledger(store)
            runners[index].append(models.runner(store))
        for runner in runners[index]:
            store.attach(runner)
    retention = _retention(ledger, args) if with_read_models and 0 in followed else None
    where = f"shard {shard_[0]}/{shard_[1]}" if shard_ else "all conversations"
    if several:
        where += f" of store{'s' if len(followed) > 1 else ''} " + ", ".join(map(str, followed))
    shown = ", ".join(db.masked for db in databases(args))
    render.out(
        f"contextledger worker: {where}, read models {'on' if with_read_models else 'off'}, "
        f"summarizer {type(ledger.summarizer).__name__}, database {shown}"
        + (f", retention {retention:g} days" if retention is not None else ""),
        stream=sys.stderr,
    )
    sys.stderr.flush()
    if args.once:
        for index in followed:
            if not ledger.shards[index].wait_idle(args.timeout):
                where = f" (store {index})" if several else ""
                raise Failure(
                    f"not idle after {args.timeout:g} s{where}: "
                    + waiting_for(ledger.shards[index], runners[index])
                )
        tops = [ledger.shards[i].recorder.max_notification_id() or 0 for i in followed]
        if several:
            render.out(
                "worker: idle at notification "
                + ", ".join(f"{top} of store {i}" for i, top in zip(followed, tops, strict=True))
            )
        else:
            render.out(f"worker: idle at notification {tops[0]}")
        return 0
    while not stop.wait(0.2):
        pass
    render.out("contextledger worker: stopping", stream=sys.stderr)
    return 0


def _retention(ledger: Ledger, args: argparse.Namespace) -> float | None:
    """Attach retention to ``ledger`` when it is set; the days (None: off)."""
    days = ledger.settings.retention_idle_days
    if days is None:
        return None
    interval = args.retention_interval
    if not interval > 0:
        raise Failure(f"--retention-interval {interval:g}: give a number of seconds above 0", code=2)
    erase = getattr(ledger, "erase", None)
    if erase is None:
        raise Failure(
            "retention is set (retention_idle_days) but this version of contextledger "
            "cannot erase (no Ledger.erase)"
        )
    from contextledger.application.privacy.retention import RetentionEnforcer

    ledger.attach(RetentionEnforcer(ledger, erase, days, interval=interval))
    return float(days)
