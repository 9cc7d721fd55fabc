"""What a call waiting for a conversation's lock says when the store is away.

Calls of one conversation queue for its lock in a process. While the store is down,
each call ahead fails with ``StoreError`` after up to ``connect_timeout``, so a call far
back in the queue would wait past ``write_deadline`` and give up with a
``ConcurrencyError`` ("waiting for other writers") that names no outage, with no
other writer present. ``Outages`` keeps the last failure that says the store is away
and the calls on the store now (holding their conversation's lock). A wait that runs
out raises the outage's ``StoreError`` when one was seen since the wait began, or when
a call that was on the store at the deadline fails on one within ``grace`` seconds
(``connect_timeout`` and a second: no call waits longer for a connection). Plain
contention still ends in ``ConcurrencyError``, a moment later at most: the calls
ahead end in milliseconds when the store answers.
"""

from __future__ import annotations

import threading
import time
from uuid import UUID

from contextledger.domain.values.errors import StoreError

__all__ = ["OUTAGE_CAUSES", "Outages"]

#: ``StoreError.cause`` values that say the store cannot be reached.
OUTAGE_CAUSES = frozenset({"connection_lost", "server_unreachable", "connect_timeout"})


class Outages:
    """The last failure of a store that says it is away, and the calls on it now."""

    def __init__(self, grace: float) -> None:
        #: The longest a call on the store waits for a connection, and a margin.
        self.grace = grace
        # A plain lock around the per-call bookkeeping (entered by every command); the
        # condition on it only for waits that ran out.
        self._mutex = threading.Lock()
        self._changed = threading.Condition(self._mutex)
        self._last: tuple[float, StoreError] | None = None
        #: Tokens of the calls on the store now; threads waiting in ``gave_up``.
        self._calls: set[int] = set()
        self._next = 0
        self._waiting = 0

    def begin(self) -> int:
        """A call goes to the store (holding its conversation's lock); its token."""
        with self._mutex:
            self._next += 1
            self._calls.add(self._next)
            return self._next

    def end(self, token: int, error: BaseException | None = None) -> None:
        """The call of ``token`` is done (``error``: how it failed)."""
        with self._mutex:
            self._calls.discard(token)
            if isinstance(error, StoreError) and error.cause in OUTAGE_CAUSES:
                self._last = (time.monotonic(), error)
            if self._waiting:
                self._changed.notify_all()

    def gave_up(self, started: float, conversation_id: UUID | None) -> StoreError | None:
        """For a wait for a conversation's lock that began at ``started`` (monotonic)
        and ran out now: the outage's ``StoreError`` (None: no outage, contention)."""
        with self._changed:
            ahead = set(self._calls)
            until = time.monotonic() + self.grace
            self._waiting += 1
            try:
                while self._seen(started) is None and ahead & self._calls:
                    remaining = until - time.monotonic()
                    if remaining <= 0:
                        break
                    self._changed.wait(remaining)
            finally:
                self._waiting -= 1
            seen = self._seen(started)
        if seen is None:
            return None
        spent = time.monotonic() - started
        return StoreError(
            f"the event store is unavailable ({seen.cause}): gave up after {spent:.2f} s waiting "
            f"behind calls that failed on it ({seen})",
            conversation_id=conversation_id,
            cause=seen.cause,
        )

    def _seen(self, started: float) -> StoreError | None:
        last = self._last
        return last[1] if last is not None and last[0] >= started else None
