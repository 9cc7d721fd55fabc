"""The one base of the log's followers: a background thread that reads what is new.

A follower (the summarization policy, the read-model runner, a user's own) reads the
ledger's notification log through ``read_notifications`` and acts on what it finds.
``LogFollower`` holds what they all share:

- ``start()`` runs ``step()`` in a background thread, ``stop()`` ends it (both
  idempotent; a stopped follower can be started again);
- the thread wakes at once when this process saves an event of ``wake_topics`` (all
  topics by default; ``ledger.add_listener``) and otherwise polls every
  ``poll_interval`` seconds (a SQLite store cannot notify, and PostgreSQL saves do not
  NOTIFY: it would serialize commits). While its steps find nothing to do the pause
  doubles, up to ``MAX_IDLE_POLL`` (one second), so an idle follower costs the
  writers next to nothing; the first step that finds work polls at once again;
- a step that fails on the store is retried with backoff, and a failing step never
  ends the thread: ``health()`` shows the last error until a step succeeds;
- ``shard=(i, n)`` follows only the conversations whose id modulo ``n`` is ``i``
  (``owns(conversation_id)``), so several workers can split one log;
- ``wait_idle(timeout)`` waits until the follower has read the log's end as of the
  call and has nothing left to do (False once stopped with work left).

A subclass implements ``step()`` (read with ``read()`` and act; return how much it
did), ``log_position()`` (how far it has read) and ``idle_at(head)`` (nothing left to
do for a log that ends at ``head``), and may hook ``_starting()``/``_stopped()``.
State that ``idle_at`` reads from several fields is changed under ``_progress``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol
from uuid import UUID

from eventsourcing.application import NotificationLog
from eventsourcing.persistence import ApplicationRecorder, Notification, PersistenceError

from contextledger.application.following.notifications import committed_top, read_notifications
from contextledger.application.shared.settings import Settings
from contextledger.domain.values.errors import ConfigurationError, ContextLedgerError, LedgerClosedError

__all__ = ["FollowedLog", "FollowerHealth", "LogFollower", "Shard", "shard_of"]

log = logging.getLogger("contextledger.follower")

#: ``(i, n)``: shard ``i`` of ``n``.
Shard = tuple[int, int]

#: The longest pause between two attempts after failures.
MAX_BACKOFF = 1.0

#: The longest pause between two polls of a follower that keeps finding nothing to do.
MAX_IDLE_POLL = 1.0


@dataclass(frozen=True)
class FollowerHealth:
    """A snapshot of one follower: how far it has read, how far behind it is, and
    the error of its last step (None once a step succeeds again)."""

    name: str
    running: bool
    #: The notification id up to which the log has been read.
    position: int
    #: The log's last notification id (as last seen, if the store cannot answer now).
    head: int
    #: ``head - position``: notifications not read yet.
    lag: int
    last_error: str | None
    #: Steps that failed in a row (0: the last one succeeded).
    failures: int
    shard: Shard | None


def shard_of(conversation_id: UUID, shards: int) -> int:
    """The shard (of ``shards``) a conversation belongs to: its id modulo ``shards``,
    stable across processes and restarts, so each shard's tracking rows stay valid."""
    return conversation_id.int % shards


def check_shard(shard: Shard | None) -> Shard | None:
    """``shard`` if it is ``(i, n)`` with ``0 <= i < n``; else ``ConfigurationError``."""
    if shard is not None and not 0 <= shard[0] < shard[1]:
        raise ConfigurationError(f"shard {shard[0]}/{shard[1]} must satisfy 0 <= I < N")
    return shard


class FollowedLog(Protocol):
    """What a follower reads of the ledger: its log (the recorder for the head, the
    notification log in pages of ``log_section_size``), its settings, and the
    listeners of its saves that wake the follower."""

    @property
    def settings(self) -> Settings: ...

    @property
    def recorder(self) -> ApplicationRecorder: ...

    @property
    def notification_log(self) -> NotificationLog: ...

    @property
    def log_section_size(self) -> int: ...

    def add_listener(self, listener: Callable[[], None], topics: Iterable[str] | None = None) -> None:
        """Call ``listener`` after each save (of ``topics``, if given) of this process."""
        ...


class LogFollower(ABC):
    """Base of the followers of one ledger's log (see the module doc)."""

    #: The background thread's name, and the name ``health()`` reports.
    thread_name: ClassVar[str] = "contextledger-follower"
    #: Topics whose saves in this process wake the thread at once (None: every save);
    #: other writes are found by the next poll.
    wake_topics: ClassVar[tuple[str, ...] | None] = None

    def __init__(
        self,
        ledger: FollowedLog,
        *,
        poll_interval: float | None = None,
        shard: Shard | None = None,
    ) -> None:
        self.ledger = ledger
        self.shard = check_shard(shard)
        self.poll_interval = poll_interval if poll_interval is not None else ledger.settings.poll_interval
        #: Guards what ``idle_at`` reads (subclasses change their state under it) and
        #: is notified whenever the follower makes progress.
        self._progress = threading.Condition(threading.RLock())
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listening = False
        self._head = 0
        self._failures = 0
        #: Whether the last step found something to do (an idle follower polls less often).
        self._active = True
        self.last_error: BaseException | None = None

    # -- what a subclass provides ------------------------------------------------

    @abstractmethod
    def step(self) -> int:
        """Read what is new in the log and act on it; returns how much was done."""

    @abstractmethod
    def log_position(self) -> int:
        """The notification id up to which the log has been read."""

    @abstractmethod
    def idle_at(self, head: int) -> bool:
        """True if the log has been read through ``head`` and nothing is left to do
        (called with ``_progress`` held)."""

    def _starting(self) -> None:  # noqa: B027 - an optional hook
        """Called by ``start()`` before the thread starts."""

    def _stopped(self) -> None:  # noqa: B027 - an optional hook
        """Called by ``stop()`` after the thread has ended."""

    def _settle(self, head: int, timeout: float | None) -> bool:
        """``wait_idle`` without a running thread: by default only says whether the
        follower is idle; a subclass may do the work in the caller's thread instead."""
        with self._progress:
            return self.idle_at(head)

    # -- lifecycle -----------------------------------------------------------------

    @property
    def name(self) -> str:
        """What logs and ``health()`` call this follower."""
        return self.thread_name

    @property
    def running(self) -> bool:
        """True while the background thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Follow the log in a background thread (no-op if it already runs)."""
        if self._thread is not None:
            return
        self._stop.clear()
        if not self._listening:
            self.ledger.add_listener(self._wake.set, self.wake_topics)
            self._listening = True
        self._starting()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the background thread (waiting up to ``timeout`` seconds for it)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._stopped()
        with self._progress:
            self._progress.notify_all()

    def wake(self) -> None:
        """Make the background thread step now instead of at its next poll."""
        self._wake.set()

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """True once the log is read through what was committed as of this call
        (``committed_head``) and nothing is left to do; False if ``timeout`` seconds
        pass first, or if the follower is not running (or stops) with work left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # a store that cannot answer yet (a restart): ask again until the deadline
            try:
                head = self.committed_head()
                break
            except (ContextLedgerError, PersistenceError) as exc:
                self._failed(exc)
                if deadline is not None and time.monotonic() + 0.1 > deadline:
                    return False
                time.sleep(0.1)
        if self._thread is None:
            return self._settle(head, None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._progress:
            while not self.idle_at(head):
                remaining = None if deadline is None else deadline - time.monotonic()
                if (remaining is not None and remaining <= 0) or self._thread is None:
                    return False
                if not self.read_through(head):  # the rest (jobs, retries) wakes the thread itself
                    self._wake.set()
                self._progress.wait(0.01 if remaining is None else min(0.01, remaining))
        return True

    def read_through(self, head: int) -> bool:
        """True if the log has been read through ``head``: ``wait_idle`` wakes the
        thread only until then, not every time it looks again while work the thread
        is woken for anyway (a job finishing, a retry falling due) is under way."""
        return self.log_position() >= head

    def health(self) -> FollowerHealth:
        """How this follower is doing now (reads the log's head; never raises for a
        store that cannot answer: the last head seen stands in)."""
        with contextlib.suppress(ContextLedgerError, PersistenceError):
            self.head()
        position = self.log_position()
        error = self.last_error
        return FollowerHealth(
            name=self.name,
            running=self.running,
            position=position,
            head=self._head,
            lag=max(0, self._head - position),
            last_error=None if error is None else f"{type(error).__name__}: {error}",
            failures=self._failures,
            shard=self.shard,
        )

    # -- reading the log -----------------------------------------------------------

    def head(self) -> int:
        """The log's last notification id (0 while it is empty)."""
        self._head = self.ledger.recorder.max_notification_id() or 0
        return self._head

    def committed_head(self) -> int:
        """The highest notification id committed now (0 while the log is empty). On
        PostgreSQL it can be above ``head()``: the log is final only once every
        transaction that may still fill in a lower id has ended (another session's
        included), and ``wait_idle`` waits for that, so that what was written before
        the call has been read when it returns True."""
        return committed_top(self.ledger.recorder)

    def owns(self, conversation_id: UUID) -> bool:
        """True if this follower's shard covers the conversation (always, unsharded;
        see ``shard_of``)."""
        return self.shard is None or shard_of(conversation_id, self.shard[1]) == self.shard[0]

    def read(
        self, *, after: int, stop: int, topics: Sequence[str] = (), page: int | None = None
    ) -> Iterator[Sequence[Notification]]:
        """Pages of the notifications above ``after`` through ``stop`` of ``topics``."""
        return read_notifications(
            self.ledger.notification_log,
            after=after,
            stop=stop,
            topics=topics,
            page=page or self.ledger.log_section_size,
        )

    def _progressed(self) -> None:
        with self._progress:
            self._progress.notify_all()

    # -- the loop --------------------------------------------------------------------

    def run_once(self) -> bool:
        """One step in the caller's thread, its outcome recorded for ``health()``;
        False if it failed (a store error, or a bug in a subclass)."""
        try:
            self._active = self.step() > 0
        except LedgerClosedError:  # the ledger closes: its followers stop with it
            self._stop.set()
            return False
        except (ContextLedgerError, PersistenceError) as exc:
            self._failed(exc)
            log.warning("%s: %s; retrying", self.name, exc)
            return False
        except Exception as exc:  # a bug in a user's follower: keep following the log
            self._failed(exc)
            log.exception("%s: a step failed: %s; retrying", self.name, exc)
            return False
        self.last_error = None
        self._failures = 0
        self._progressed()
        return True

    def _failed(self, exc: BaseException) -> None:
        self.last_error = exc
        self._failures += 1

    def backoff(self) -> float:
        """The pause before the next attempt after ``failures`` failed steps in a row:
        ten poll intervals, doubling with each further failure, at most a second."""
        if self._failures == 0:
            return 0.0
        return min(MAX_BACKOFF, self.poll_interval * 10 * 2.0 ** (self._failures - 1))

    def poll_wait(self, idle_steps: int) -> float:
        """The pause before the next poll after ``idle_steps`` steps in a row that found
        nothing to do: ``poll_interval``, doubling per idle step up to
        ``MAX_IDLE_POLL`` (a save of ``wake_topics`` in this process, ``wake()`` and
        ``wait_idle()`` wake the thread at once whatever the pause)."""
        return min(max(self.poll_interval, MAX_IDLE_POLL), self.poll_interval * 2.0 ** min(idle_steps, 16))

    def _run(self) -> None:
        idle = 0
        while not self._stop.is_set():
            if not self.run_once():
                self._stop.wait(self.backoff())
            idle = 0 if self._active else idle + 1
            self._wake.wait(self.poll_wait(idle))
            self._wake.clear()
