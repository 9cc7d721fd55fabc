"""What a worker that is not idle yet waits for, said in one line."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from eventsourcing.persistence import PersistenceError

from contextledger.application.facade.ledger import Ledger
from contextledger.application.following.follower import LogFollower
from contextledger.application.following.notifications import committed_top
from contextledger.application.summaries.summarization import SummarizationRunner
from contextledger.domain.values.errors import ContextLedgerError

__all__ = ["waiting_for"]


def waiting_for(ledger: Ledger, followers: Sequence[LogFollower]) -> str:
    """Why ``followers`` of ``ledger``'s log are not idle: the log not final up to what
    is committed (and which open transactions hold it), a follower behind or failing,
    or summaries still due or in flight."""
    reasons: list[str] = []
    committed: int | None = None
    with contextlib.suppress(ContextLedgerError, PersistenceError):
        recorder = ledger.recorder
        committed = committed_top(recorder)
        final = recorder.max_notification_id() or 0
        if final < committed:
            said = f"the log is final through notification {final} of {committed} committed"
            writers: list[int] = list(getattr(recorder, "writers_in_flight", list)())
            if writers:
                pids = ", ".join(map(str, writers))
                said += (f", held by {len(writers)} open transaction{'s' if len(writers) > 1 else ''} "
                         f"writing to the event table (server pid {pids})")
            reasons.append(said)
    for follower in followers:
        health = follower.health()
        head = committed if committed is not None else health.head
        if health.last_error is not None:
            reasons.append(f"{health.name} failing ({health.failures} in a row): {health.last_error}")
        elif health.position < head:
            reasons.append(f"{health.name} has read through notification {health.position} of {head}")
        elif isinstance(follower, SummarizationRunner):
            reasons.append(f"{health.name}: summaries still due or in flight")
    return "; ".join(reasons) or "followers not caught up"
