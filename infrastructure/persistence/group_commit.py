"""Group commit: concurrent saves of one process share one statement and one commit.

``GroupCommit`` is given a ``write`` function (events in, their notification ids out,
one statement) and lets the saves of a process's threads share its calls: the save
that finds it idle is written at once; saves arriving while a write runs queue up and
the oldest of them then writes them all in one call (up to ``MAX_BATCH_EVENTS``
events). All of a batch commits or none of it does; if it fails on a conflict, each
save of the batch is run again alone, so only the conflicting one gets the error.
The PostgreSQL recorder (``pgrecorder``) writes through one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent

__all__ = ["MAX_BATCH_EVENTS", "GroupCommit"]

#: Most events one group commit writes in one statement.
MAX_BATCH_EVENTS = 1000


class _Save:
    """One save waiting in a ``GroupCommit``."""

    __slots__ = ("done", "error", "events", "lead", "result")

    def __init__(self, events: Sequence[StoredEvent]) -> None:
        self.events = events
        #: Set when the save is written or is to lead (a save that finds the group
        #: commit idle is written at once and is never queued as a ``_Save``).
        self.done: threading.Event | None = None
        self.lead = False
        self.result: list[int] = []
        self.error: BaseException | None = None


class GroupCommit:
    """Concurrent saves of one process share one statement and one commit.

    The first save to arrive leads: it writes every save queued by then in one call of
    ``write`` and hands each its notification ids (or the error). Saves arriving
    meanwhile queue up; when the leader is done the oldest of them leads the next
    batch. A lone save is written at once, with no thread switch. The batch is one
    statement, so nothing of it is half-written: if it fails on the server (a conflict,
    one bad save) each save is written again alone, so the others still commit and only
    the failing one gets the error; if the connection fails, every save of the batch
    gets the error.
    """

    def __init__(self, write: Callable[[Sequence[StoredEvent]], list[int]]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._queue: list[_Save] = []
        self._busy = False
        #: Batches led, saves they carried and the most saves in one batch.
        self.batches = 0
        self.saves = 0
        self.largest = 0

    def submit(self, events: Sequence[StoredEvent]) -> list[int]:
        with self._lock:
            if not self._busy:
                # Nobody writes or waits: this save is written at once, alone (no
                # queue entry, no batch to build), and hands over to whoever queued
                # meanwhile.
                self._busy = True
                self._count(1)
                save = None
            else:
                save = _Save(events)
                save.done = done = threading.Event()
                self._queue.append(save)
        if save is None:
            try:
                return self._write(events)
            finally:
                self._hand_over()
        done.wait()
        if not save.lead:
            return _outcome(save)
        try:
            self._lead()
        finally:
            self._hand_over()
        return _outcome(save)

    def _hand_over(self) -> None:
        """The writing save is done: the oldest queued save leads next, or none is busy."""
        with self._lock:
            if self._queue:
                nxt = self._queue[0]
                nxt.lead = True
                assert nxt.done is not None
                nxt.done.set()
            else:
                self._busy = False

    def _lead(self) -> None:
        with self._lock:
            batch: list[_Save] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].events) <= MAX_BATCH_EVENTS):
                save = self._queue.pop(0)
                batch.append(save)
                size += len(save.events)
        try:
            self._run(batch)
        finally:
            for save in batch:
                if save.done is not None:
                    save.done.set()

    def _count(self, saves: int) -> None:
        """One batch of ``saves`` saves is written."""
        self.batches += 1
        self.saves += saves
        self.largest = max(self.largest, saves)

    def _run(self, batch: list[_Save]) -> None:
        self._count(len(batch))
        if len(batch) == 1:
            self._run_alone(batch[0])
            return
        try:
            ids = self._write([e for save in batch for e in save.events])
        except (InterfaceError, OperationalError) as exc:
            # The connection failed (after one more try): whether the statement
            # committed is unknown, so every save gets the error (the conversation
            # store recognises a save that landed when it retries).
            for save in batch:
                save.error = exc
            return
        except Exception:
            # The statement failed and rolled back as a whole (a conflict, or one bad
            # save): write each alone, so only the failing one gets the error.
            for save in batch:
                self._run_alone(save)
            return
        start = 0
        for save in batch:
            save.result = ids[start : start + len(save.events)]
            start += len(save.events)

    def _run_alone(self, save: _Save) -> None:
        try:
            save.result = self._write(save.events)
        except BaseException as exc:
            save.error = exc


def _outcome(save: _Save) -> list[int]:
    if save.error is not None:
        raise save.error
    return save.result
