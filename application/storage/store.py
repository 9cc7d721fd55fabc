"""The conversation store: loading, saving and snapshotting ``Conversation`` aggregates.

Commands load a conversation from an in-process cache (or a bounded snapshot plus
the events after it), run, and save their events with optimistic concurrency,
retrying on conflicts. Queries bring the cached copy up to date from the store first
(read-your-writes). Store failures become ``StoreError`` (``store_failures``, whose
names this module also exports); a conversation that does not exist,
``ConversationNotFoundError``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Repository
from eventsourcing.persistence import EventStore, IntegrityError, OperationalError, PersistenceError

from contextledger.application.shared.settings import Settings
from contextledger.application.storage.outage import Outages
from contextledger.application.storage.remainders import load_remainder, remainder
from contextledger.application.storage.store_failures import failure_cause, store_error, store_errors
from contextledger.domain.client_ids import ClientMessageId
from contextledger.domain.conversation import Conversation, ConversationSnapshot
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.events import ConversationEvent, DomainEvent, Forked, Started
from contextledger.domain.values.errors import (
    ConcurrencyError,
    ConversationErasedError,
    ConversationNotFoundError,
    LogDamagedError,
    StoreError,
)

if TYPE_CHECKING:
    from datetime import datetime

    from contextledger.domain.folding.state import ConversationState

__all__ = [
    "ConversationStore",
    "FairLock",
    "StoreApplication",
    "failure_cause",
    "store_error",
    "store_errors",
]

T = TypeVar("T")
Command = Callable[[Conversation], tuple[T, list[Any]]]

log = logging.getLogger("contextledger.store")

#: How long a command waits for this process's other writers of the conversation and
#: retries optimistic-concurrency conflicts, unless told (``Settings.write_deadline``).
DEFAULT_DEADLINE_SECONDS = 5.0
CACHE_SIZE = 2048
#: Seconds a conversation counts as contended after a save of it conflicted: its
#: commands then keep a copy of the state to return to, so that the retry catches up
#: from the log instead of reloading the conversation from its latest snapshot.
CONTENDED_SECONDS = 5.0


class FairLock:
    """A FIFO lock: waiters get it in the order they asked (``threading.Lock`` wakes an
    arbitrary one, so a busy writer can starve the others). ``acquire`` takes a timeout."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[threading.Lock] = deque()

    def acquire(self, timeout: float | None = None) -> bool:
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return True  # handed over by release()
        with self._mutex:
            try:
                self._waiters.remove(waiter)
            except ValueError:  # handed over between the timeout and now
                return True
            return False

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()  # ownership passes straight on
            else:
                self._held = False

    def locked(self) -> bool:
        return self._held

    def waiting(self) -> int:
        """How many threads wait for the lock."""
        return len(self._waiters)

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def snapshot_step(interval: int, window: int) -> int:
    """Versions between snapshots of a conversation whose window holds ``window``
    entries: ``interval``, doubled while it stays within a quarter of the window. A
    snapshot holds the whole window, so a long window (a token trigger over short
    messages) is snapshotted less often: its cost per append stays bounded, and a
    load still folds at most about a quarter window of events after the snapshot.
    Steps are ``interval`` times a power of two, so their boundaries nest."""
    step = interval
    while step * 2 <= window // 4:
        step *= 2
    return step


class StoreApplication(Protocol):
    """What the store reads and saves conversations through: an eventsourcing
    application (the ``Ledger``) with its settings and its lean save."""

    @property
    def settings(self) -> Settings: ...

    @property
    def events(self) -> EventStore[UUID]: ...

    @property
    def snapshots(self) -> EventStore[UUID] | None: ...

    @property
    def repository(self) -> Repository[UUID]: ...

    def save(self, *objs: Any) -> object:
        """Save aggregates of any kind (eventsourcing's ``Application.save``)."""
        ...

    def save_conversations(self, *objs: Any) -> list[Any]:
        """Save conversations (and ``others``); returns the events saved."""
        ...


class ConversationStore:
    """Conversations of one eventsourcing application, cached per process."""

    def __init__(
        self,
        app: StoreApplication,
        *,
        snapshot_interval: int,
        on_saved: Callable[[list[Any]], None] | None = None,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
    ) -> None:
        self.app = app
        self.snapshot_interval = snapshot_interval
        #: How long one command may wait for other writers and retry conflicts.
        self.deadline_seconds = deadline_seconds
        self._on_saved = on_saved
        self._cache: OrderedDict[UUID, Conversation] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._locks: dict[UUID, FairLock] = {}
        self._locks_lock = threading.Lock()
        #: conversation -> monotonic time of its last conflicting save in this process
        self._contended: dict[UUID, float] = {}
        #: The last failure that said the store is away (a lock wait then names it).
        self.outages = Outages(grace=app.settings.connect_timeout + 1.0)
        #: The erased subjects among those whose content a conversation holds, as this
        #: process knows them (None: no per-subject keys); a cached conversation that
        #: shows one of them is loaded again (``subjects.erased_subjects_check``).
        self.erased_subjects: Callable[[UUID], tuple[str, ...]] | None = None
        #: Per conversation loaded as a remainder: the erased subjects it reflects.
        self._reflects: dict[UUID, frozenset[str]] = {}

    # -- commands -------------------------------------------------------------------

    def create(self, conversation: Conversation) -> None:
        """Save a new conversation (``IntegrityError`` if its id is taken)."""
        self.save(conversation)
        self._cache_put(conversation)

    def execute(
        self,
        conversation_id: UUID,
        command: Command[T],
        *,
        on_conflict: Callable[[], T | None] | None = None,
    ) -> T:
        """Run ``command`` on the conversation and save its events, retrying on conflicts.

        ``command`` returns its result and other aggregates to save in the same
        transaction. ``on_conflict`` may find the result a conflicting writer already
        produced (an idempotent retry).
        """
        started = time.monotonic()
        deadline = started + self.deadline_seconds
        attempt = 0
        while True:
            lock = self.lock(conversation_id)
            # Writers of one conversation in this process queue in order (FairLock);
            # the wait counts against the deadline.
            if not lock.acquire(timeout=deadline - time.monotonic()):
                raise self.outages.gave_up(started, conversation_id) or self._gave_up(
                    conversation_id, attempt, started, "waiting for other writers"
                )
            attempt += 1
            token, failure = self.outages.begin(), None
            try:
                conversation = self.load(conversation_id, fresh=False)
                backup = self._backup(conversation)
                try:
                    result, others = command(conversation)
                except BaseException:
                    self._cache_evict(conversation_id)  # it may hold half-applied events
                    raise
                pending = list(conversation._pending_events)
                if not pending:
                    return result
                try:
                    self.save(conversation, *others)
                except IntegrityError:
                    self._note_contended(conversation_id)
                    newer = None if backup is None else self._catch_up(conversation, backup)
                    if newer is None:
                        self._cache_evict(conversation_id)
                        landed = self._landed(conversation_id, pending)
                    else:  # what the catch-up read starts where these events would stand
                        landed = newer[: len(pending)] == pending
                    if landed:
                        return result
                    if on_conflict is not None:
                        found = on_conflict()
                        if found is not None:
                            return found
                except BaseException:
                    self._cache_evict(conversation_id)
                    raise
                else:
                    self._cache_put(conversation)
                    return result
            except StoreError as exc:
                failure = exc
                raise
            finally:
                self.outages.end(token, failure)
                lock.release()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._gave_up(conversation_id, attempt, started, "conflicting concurrent writes")
            time.sleep(min(remaining, min(0.1, 0.002 * (2 ** min(attempt, 6))) * random.random()))

    def _backup(self, conversation: Conversation) -> tuple[ConversationState, int, datetime] | None:
        """What a contended conversation returns to if its save conflicts (None for the
        others: a copy of the state costs a little on every command)."""
        since = self._contended.get(conversation.id)
        if since is None or time.monotonic() - since > CONTENDED_SECONDS:
            return None
        return conversation.state.clone(), conversation.version, conversation.modified_on

    def _note_contended(self, conversation_id: UUID) -> None:
        now = time.monotonic()
        if len(self._contended) > 4 * CACHE_SIZE:
            self._contended = {k: t for k, t in self._contended.items() if now - t <= CONTENDED_SECONDS}
        self._contended[conversation_id] = now

    def _catch_up(
        self, conversation: Conversation, backup: tuple[ConversationState, int, datetime]
    ) -> list[DomainEvent] | None:
        """Return the cached conversation to its state before the command that
        conflicted, then fold in what was stored since; those events, or None (it is
        then evicted) if the log cannot be read."""
        state, version, modified_on = backup
        conversation.state, conversation.version, conversation.modified_on = state, version, modified_on
        conversation._pending_events = []
        try:
            with store_errors(conversation.id):
                newer = cast(list[DomainEvent], list(self.app.events.get(conversation.id, gt=version)))
                for event in newer:
                    event.mutate(conversation)
        except Exception:  # a store error or an unexpected event: reload from the log
            return None
        return newer

    def _gave_up(self, conversation_id: UUID, attempts: int, started: float, why: str) -> ConcurrencyError:
        spent = time.monotonic() - started
        return ConcurrencyError(
            f"gave up after {attempts} attempts in {spent:.2f} s ({why}; the deadline is "
            f"{self.deadline_seconds:g} s, Settings.write_deadline)",
            conversation_id=conversation_id,
            attempts=attempts,
            seconds=round(spent, 3),
        )

    def save(self, conversation: Conversation, *others: Any) -> None:
        """Save the conversation's new events (and ``others``) in one transaction,
        and a snapshot when an interval boundary was crossed."""
        before = conversation.version - len(conversation._pending_events)
        try:
            saved = self.app.save_conversations(conversation, *others)
        except IntegrityError:
            raise
        except (OperationalError, PersistenceError) as exc:
            raise store_error(exc, conversation.id) from exc
        interval = snapshot_step(self.snapshot_interval, len(conversation.state.window))
        snapshots = self.app.snapshots
        if conversation.version // interval > before // interval and snapshots is not None:
            try:
                snapshots.put([ConversationSnapshot.take(conversation)])
            except IntegrityError:  # another writer took the same one
                pass
            except ConversationErasedError:  # a fork's remainder: folded from its records
                pass
            except PersistenceError as exc:  # the events are saved; the next boundary takes one
                log.warning("no snapshot of %s at version %s: %s", conversation.id, conversation.version, exc)
        if self._on_saved is not None:
            self._on_saved(saved)

    def _landed(self, conversation_id: UUID, pending: list[DomainEvent]) -> bool:
        """Whether these exact events are stored already: a commit whose answer was
        lost (a dropped connection) and whose retry then conflicted with itself."""
        stored = list(
            self.app.events.get(
                conversation_id,
                gt=pending[0].originator_version - 1,
                lte=pending[-1].originator_version,
            )
        )
        return stored == pending

    # -- queries --------------------------------------------------------------------

    def load(self, conversation_id: UUID, *, fresh: bool = True) -> Conversation:
        """The conversation from the cache (brought up to date from the store when
        ``fresh``), else from its latest snapshot and the events after it. Commands
        skip the freshness query (a stale copy fails its save with a conflict and is
        reloaded), not the check for erasures this process knows of: a copy folded
        before its content's erasure is read again. Hold ``lock(conversation_id)``."""
        with self._cache_lock:
            cached = self._cache.get(conversation_id)
            if cached is not None:
                self._cache.move_to_end(conversation_id)
        check = self.erased_subjects
        if cached is not None and check is not None:
            erased = check(conversation_id)
            if erased and not set(erased) <= self._reflects.get(conversation_id, frozenset()):
                self._cache_evict(conversation_id)  # erased since: read the log again
                cached = None
        try:
            with store_errors(conversation_id):
                if cached is not None:
                    if fresh:
                        for event in self.app.events.get(conversation_id, gt=cached.version):
                            event.mutate(cached)  # type: ignore[attr-defined]
                    return cached
                conversation: Conversation = self.app.repository.get(conversation_id)
        except AggregateNotFoundError:
            raise ConversationNotFoundError("no such conversation", conversation_id=conversation_id) from None
        except ConversationErasedError:  # all of it, or a fork's inherited part (a remainder)
            conversation = load_remainder(self.app.events, conversation_id)
            if check is not None:
                self._reflects[conversation_id] = frozenset(check(conversation_id))
        if not isinstance(conversation, Conversation):
            raise ConversationNotFoundError("no such conversation", conversation_id=conversation_id)
        self._cache_put(conversation)
        return conversation

    def cached(self, conversation_id: UUID) -> bool:
        """Whether this process holds the conversation in its cache (a read does not
        load it from its snapshot and events)."""
        with self._cache_lock:
            return conversation_id in self._cache

    def read(self, conversation_id: UUID, reader: Callable[[Conversation], T]) -> T:
        """``reader`` applied to the up-to-date conversation, under its lock. While the
        store is away, a wait for the lock past the deadline raises the outage's
        ``StoreError`` (see ``outage``); otherwise it waits for the writers ahead."""
        started = time.monotonic()
        lock = self.lock(conversation_id)
        if not lock.acquire(timeout=self.deadline_seconds):
            error = self.outages.gave_up(started, conversation_id)
            if error is not None:
                raise error
            lock.acquire()
        return self._read_held(lock, conversation_id, reader)

    def read_now(self, conversation_id: UUID, reader: Callable[[Conversation], T]) -> T | None:
        """``read`` if it needs no wait: None when the conversation is not cached or its lock is held."""
        if not self.cached(conversation_id) or not (lock := self.lock(conversation_id)).acquire(timeout=0):
            return None
        return self._read_held(lock, conversation_id, reader)

    def _read_held(self, lock: FairLock, conversation_id: UUID, reader: Callable[[Conversation], T]) -> T:
        token, failure = self.outages.begin(), None  # ``lock`` held, released here
        try:
            return reader(self.load(conversation_id))
        except StoreError as exc:
            failure = exc
            raise
        finally:
            self.outages.end(token, failure)
            lock.release()

    def copy(self, conversation_id: UUID) -> Conversation:
        """A private copy of the conversation as it is now."""
        return self.read(conversation_id, Conversation.private_copy)

    def at_version(self, conversation_id: UUID, version: int) -> Conversation:
        """The conversation as it stood at ``version`` (re-derived from the log)."""
        try:
            with store_errors(conversation_id):
                conversation: Conversation = self.app.repository.get(conversation_id, version=version)
        except AggregateNotFoundError:
            raise ConversationNotFoundError(
                "no such conversation", conversation_id=conversation_id, version=version
            ) from None
        except ConversationErasedError:
            conversation = load_remainder(self.app.events, conversation_id, version)
        if conversation.version != version:
            raise ConversationNotFoundError(
                f"the conversation has only {conversation.version} versions",
                conversation_id=conversation_id,
                version=version,
            )
        return conversation

    def events(self, conversation_id: UUID) -> list[DomainEvent]:
        """Every stored event of the conversation, oldest first (of a fork whose
        inherited history was erased, its own events about its own part: they begin
        after version 1, ``domain/remainder.py``)."""
        with store_errors(conversation_id):
            events = list(self.app.events.get(conversation_id))
        if events and isinstance(events[0], ErasedEvent):
            return list(remainder(self.app.events, conversation_id).own)
        if not events or not isinstance(events[0], ConversationEvent):
            raise ConversationNotFoundError("no such conversation", conversation_id=conversation_id)
        if not isinstance(events[0], (Started, Forked)) or events[0].originator_version != 1:
            first = events[0]
            raise LogDamagedError(
                f"the log is damaged: it begins with {type(first).__name__} at version "
                f"{first.originator_version}, not with the conversation's start",
                conversation_id=conversation_id,
                version=first.originator_version,
            )
        return events  # type: ignore[return-value]

    def records(self, conversation_id: UUID) -> list[DomainEvent | ErasedEvent]:
        """Every stored record of the conversation as ``events``, but a fork whose
        inherited history was erased has them all, those holding inherited content as
        ``ErasedEvent`` (``replay``)."""
        with store_errors(conversation_id):
            first = list(self.app.events.get(conversation_id, lte=1))
        if first and isinstance(first[0], ErasedEvent):
            return list(remainder(self.app.events, conversation_id).records)
        return list(self.events(conversation_id))

    def client_position(self, conversation_id: UUID, client_message_id: str) -> int | None:
        """The position an append with this client message id got (None: none yet)."""
        try:
            with store_errors(conversation_id):
                index: ClientMessageId = self.app.repository.get(
                    ClientMessageId.id_for(conversation_id, client_message_id)
                )
        except AggregateNotFoundError:
            return None
        return index.position

    # -- locks and cache ------------------------------------------------------------

    def lock(self, conversation_id: UUID) -> FairLock:
        """This process's lock for one conversation (first come, first served)."""
        with self._locks_lock:
            lock = self._locks.get(conversation_id)
            if lock is None:
                if len(self._locks) > 4 * CACHE_SIZE:
                    self._locks = {k: v for k, v in self._locks.items() if v.locked()}
                lock = self._locks[conversation_id] = FairLock()
            return lock

    def _cache_put(self, conversation: Conversation) -> None:
        with self._cache_lock:
            self._cache[conversation.id] = conversation
            self._cache.move_to_end(conversation.id)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)

    def _cache_evict(self, conversation_id: UUID) -> None:
        with self._cache_lock:
            self._cache.pop(conversation_id, None)
