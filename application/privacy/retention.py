"""Retention: finding the conversations idle for a number of days, and erasing them.

A conversation is **idle** for ``days`` when its last event (an append, an edit, a
summary, usage recorded ...) is older than ``now - days``. The time is read from the
log itself: the newest event of each conversation, one indexed read per conversation
(``events.get(id, desc=True, limit=1)``), so the answer never depends on a read
model being up to date. Conversations already erased are left out (their records read
as ``ErasedEvent``, or their subject has a tombstone); a fork whose inherited history
was erased with its source is in: what is its own can still be read
(``domain/remainder.py``), its newest record tells when it was last used.

Retention (``Settings.retention_idle_days``, enforced by ``contextledger worker``)
erases a data subject once **all** its conversations are idle: a subject with one
idle conversation and one active one keeps both. A subject holding one conversation
is erased with ``erase(conversation=...)``, one holding several with
``erase(subject=...)``; the reason recorded is ``"retention: idle N days"``. A subject
whose content a conversation of another subject holds -- a fork given another subject,
and the forks of that fork -- is not erased while that conversation is active either:
erasing it would erase the fork's inherited history. Each subject is checked again just
before its erasure, so a conversation written to meanwhile saves its subject.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from contextledger.application.privacy.subjects import Subjects
from contextledger.application.shared.observability import log
from contextledger.application.storage.sharding import ShardedStore
from contextledger.application.storage.store import ConversationStore, store_errors
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.events import Forked
from contextledger.domain.values.errors import ContextLedgerError, InvalidArgumentError
from contextledger.domain.values.validation import shown

__all__ = [
    "RetentionDue",
    "RetentionEnforcer",
    "RetentionHost",
    "check_days",
    "enforce_retention",
    "idle_conversations",
    "retention_plan",
    "retention_reason",
]

#: ``erase(*, subject=None, conversation=None, reason)``: the ledger's erasure.
Erase = Callable[..., Any]


class RetentionHost(Protocol):
    """What retention needs of the ledger."""

    @property
    def store(self) -> ConversationStore: ...

    @property
    def subjects(self) -> Subjects: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    def conversation_ids(self) -> list[UUID]: ...


@dataclass(frozen=True)
class RetentionDue:
    """A data subject whose conversations are all idle: what retention erases."""

    subject: str
    conversations: tuple[UUID, ...]
    #: The newest event among them.
    last_event_at: datetime
    #: Conversations of other subjects holding the subject's content (forks given
    #: another subject, and their forks): idle too, or the subject is not due.
    holders: tuple[UUID, ...] = ()


def check_days(days: object) -> float:
    """``days`` if it is a number of days above 0 (``InvalidArgumentError`` otherwise)."""
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days < 1_000_000:
        raise InvalidArgumentError(
            "days must be a number of days above 0", argument="days", value=shown(days)
        )
    return float(days)


def retention_reason(days: float) -> str:
    """The reason an erasure by retention records."""
    return f"retention: idle {days:g} days"


def _last_event(store: ConversationStore, conversation_id: UUID) -> Any | None:
    app = store.app_for(conversation_id) if isinstance(store, ShardedStore) else store.app
    with store_errors(conversation_id):
        newest = list(app.events.get(conversation_id, desc=True, limit=1))
    return newest[0] if newest else None


def _first_event(store: ConversationStore, conversation_id: UUID) -> Any | None:
    app = store.app_for(conversation_id) if isinstance(store, ShardedStore) else store.app
    with store_errors(conversation_id):
        first = list(app.events.get(conversation_id, lte=1, limit=1))
    return first[0] if first else None


def _scan(host: RetentionHost, conversations: Iterable[UUID]) -> dict[UUID, tuple[datetime, Any]]:
    """Each conversation's newest event's time and its first event, erased ones left
    out. A fork whose inherited history was erased with its source is in, its first
    event an ``ErasedEvent``: its later records are still its own subject's, erased
    with that subject."""
    found: dict[UUID, tuple[datetime, Any]] = {}
    for cid in conversations:
        event = _last_event(host.store, cid)
        if event is None or isinstance(event, ErasedEvent):
            continue
        first = event if event.originator_version == 1 else _first_event(host.store, cid)
        if first is not None:
            found[cid] = (event.timestamp, first)
    return found


def _last_times(host: RetentionHost, conversations: Iterable[UUID]) -> dict[UUID, datetime]:
    """The time of each conversation's newest event; erased ones left out."""
    return {cid: at for cid, (at, _) in _scan(host, conversations).items()}


def _content_subjects(
    host: RetentionHost, cid: UUID, first: Any, memo: dict[UUID, frozenset[str]]
) -> frozenset[str]:
    """Every subject whose content the conversation holds: its own, and for a fork its
    source's (at the fork, what the source held itself)."""
    if cid in memo:
        return memo[cid]
    memo[cid] = own = frozenset({_subject(host, cid)[0]})  # a cycle cannot recurse
    if isinstance(first, Forked):
        source = first.origin.conversation_id
        origin_first = _first_event(host.store, source)
        if origin_first is not None and not isinstance(origin_first, ErasedEvent):
            memo[cid] = own | _content_subjects(host, source, origin_first, memo)
    return memo[cid]


def _cutoff(host: RetentionHost, days: object, now: datetime | None) -> datetime:
    span = timedelta(days=check_days(days))
    if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):
        raise InvalidArgumentError(
            "now must be a datetime with a time zone", argument="now", value=shown(now)
        )
    return (now or host.clock()) - span


def _subject(host: RetentionHost, conversation_id: UUID) -> tuple[str, bool]:
    """The conversation's subject, and whether it is erased already."""
    keys = host.subjects.keys_for(conversation_id)
    if keys is None:
        return str(conversation_id), False
    subject = keys.subject_of(conversation_id)
    return subject, keys.is_erased(subject)


def idle_conversations(host: RetentionHost, days: object, now: datetime | None = None) -> list[UUID]:
    """The conversations whose last event is older than ``days`` before ``now``
    (default: the ledger's clock), in the order they were started; erased ones left out
    (a fork whose inherited history was erased with its source is in: what is its own
    is still there)."""
    cutoff = _cutoff(host, days, now)
    scanned = _scan(host, host.conversation_ids())
    return [cid for cid, (at, _) in scanned.items() if at < cutoff and not _subject(host, cid)[1]]


def retention_plan(host: RetentionHost, days: object, now: datetime | None = None) -> list[RetentionDue]:
    """The data subjects retention would erase now: those whose every conversation is
    idle for ``days`` (erased subjects left out), in the order of their first conversation."""
    cutoff = _cutoff(host, days, now)
    scanned = _scan(host, host.conversation_ids())
    by_subject: dict[str, list[UUID]] = {}
    holders: dict[str, list[UUID]] = {}
    erased: set[str] = set()
    memo: dict[UUID, frozenset[str]] = {}
    for cid, (_, first) in scanned.items():
        subject, is_erased = _subject(host, cid)
        if is_erased:
            erased.add(subject)
        by_subject.setdefault(subject, []).append(cid)
        for other in _content_subjects(host, cid, first, memo) - {subject}:
            holders.setdefault(other, []).append(cid)
    times = {cid: at for cid, (at, _) in scanned.items()}
    return [
        RetentionDue(subject, tuple(cids), max(times[c] for c in cids), tuple(holders.get(subject, ())))
        for subject, cids in by_subject.items()
        if subject not in erased and all(times[c] < cutoff for c in (*cids, *holders.get(subject, ())))
    ]


def _still_due(host: RetentionHost, due: RetentionDue, cutoff: datetime) -> bool:
    # A conversation erased meanwhile (with its source, when all it held was
    # inherited) has nothing left to save: only one written to since can save it.
    times = _last_times(host, (*due.conversations, *due.holders))
    return all(at < cutoff for at in times.values())


def enforce_retention(
    host: RetentionHost, erase: Erase, days: object, now: datetime | None = None
) -> list[Any]:
    """Erase every subject ``retention_plan`` names (checked again just before); the
    erasure reports, in order. A subject that fails is logged and left for the next
    pass: the others are still erased."""
    cutoff = _cutoff(host, days, now)
    reason = retention_reason(check_days(days))
    reports: list[Any] = []
    for due in retention_plan(host, days, now):
        try:
            if not _still_due(host, due, cutoff):
                continue
            if len(due.conversations) == 1:
                reports.append(erase(conversation=due.conversations[0], reason=reason))
            else:
                reports.append(erase(subject=due.subject, reason=reason))
        except ContextLedgerError as exc:
            log.warning("retention: erasing subject %r failed: %s", due.subject, exc)
    return reports


class RetentionEnforcer:
    """Retention in a background thread: ``enforce_retention`` every ``interval``
    seconds (the first pass at start). Attached to a ledger as its followers are
    (``start``, ``stop``, ``wait_idle``); ``wait_idle`` is True once a pass has ended
    and none runs."""

    thread_name = "contextledger-retention"

    def __init__(
        self, host: RetentionHost, erase: Erase, days: int | float, *, interval: float = 3600.0
    ) -> None:
        self.host = host
        self.erase = erase
        self.days = check_days(days)
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
            raise InvalidArgumentError(
                "interval must be a number of seconds above 0", argument="interval", value=shown(interval)
            )
        self.interval = float(interval)
        #: Every erasure report of this enforcer, oldest first.
        self.erased: list[Any] = []
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._passes = 0
        self._running = False
        self._thread: threading.Thread | None = None

    def run_once(self) -> Sequence[Any]:
        """One pass: the reports of what it erased."""
        with self._progress:
            self._running = True
        try:
            reports = enforce_retention(self.host, self.erase, self.days)
            self.erased.extend(reports)
            return reports
        finally:
            with self._progress:
                self._running = False
                self._passes += 1
                self._progress.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the store away: try again at the next pass
                log.warning("retention pass failed: %s", exc)
            self._stop.wait(self.interval)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        with self._progress:
            self._progress.notify_all()

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._progress:
            while self._passes == 0 or self._running:
                if self._thread is None:
                    return self._passes > 0 and not self._running
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._progress.wait(remaining)
        return True
