"""Read models as projections of the ledger's log, and the runner that keeps them.

A projection has a ``name`` (its tracking key and the name ``rebuild`` takes) and the
``topics`` it follows, and maps each domain event to calls of its *view*, passing the
event's position in the log (an eventsourcing ``Tracking``). A view writes its change
and its tracking row in one transaction and ignores an event whose notification id is
not above the tracked one, so every event changes a read model exactly once, whoever
applies it and however often.

Lifecycle (as Marten states it): the built-in read models are *async* projections:
the ``ReadModelRunner`` polls the log in a background thread (a SQLite store cannot
notify; an append in this process wakes it at once) and ``Ledger.wait_idle()`` waits
for it once attached with ``ledger.attach(runner)``. Each projection's progress is a
row; ``rebuild(name)`` recreates one read model from the whole log.

The views are ports (``Protocol`` classes); ``contextledger.infrastructure.readmodels``
implements them on SQLAlchemy tables. Users add their own projections the same way:
subclass ``ReadModelProjection``, give it a ``name`` and ``topics``, map events to
calls of a view that records ``Tracking`` atomically with its change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import PersistenceError, Tracking
from eventsourcing.projection import Projection

from contextledger.application.results import SummaryInfo, TranscriptEntry
from contextledger.domain import events
from contextledger.domain.errors import (
    ContextLedgerError,
    TrackingRewoundError,
    UnknownReadModelError,
    UsageError,
)

if TYPE_CHECKING:
    from contextledger.application.ledger import Ledger

__all__ = [
    "ConversationRecord",
    "ConversationsProjection",
    "ConversationsView",
    "ProgressCallback",
    "ReadModelProjection",
    "ReadModelRunner",
    "ReadModelView",
    "SummariesProjection",
    "SummariesView",
    "TokenTotalsProjection",
    "TokenTotalsRecord",
    "TokenTotalsView",
    "TrackingRewoundError",
    "TranscriptProjection",
    "TranscriptView",
    "UnknownReadModelError",
]

log = logging.getLogger("contextledger.readmodels")

#: ``progress(position, end)``: notification ids; ``end`` may grow while writers append.
ProgressCallback = Callable[[int, int], None]

_CONVERSATION_TOPICS = (
    events.Started.TOPIC,
    events.MessageAppended.TOPIC,
    events.ThresholdReached.TOPIC,
    events.SummaryCreated.TOPIC,
    events.SummarizationFailed.TOPIC,
    events.PolicyChanged.TOPIC,
    events.UsageRecorded.TOPIC,
)


# ---------------------------------------------------------------------- errors


# ---------------------------------------------------------------------- records


@dataclass(frozen=True)
class TokenTotalsRecord:
    """Token accounting as the ``token_totals`` read model holds it.

    Per conversation (``conversation_id`` set, ``conversations == 1``) or summed over
    all of them (``conversation_id`` None). ``context_tokens`` is not here: what the
    next prompt costs depends on the working window, which ``Ledger.totals()`` computes.
    """

    conversation_id: UUID | None
    conversations: int
    messages: int
    appended_tokens: int
    full_history_tokens: int
    summaries: int
    summarizer_calls: int
    summarizer_failures: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    provider_prompt_tokens: int
    provider_completion_tokens: int


@dataclass(frozen=True)
class ConversationRecord:
    """One row of the ``conversations`` read model."""

    conversation_id: UUID
    model: str
    started_at: datetime
    updated_at: datetime
    last_version: int
    messages: int
    summaries: int
    policy_version: int


# ------------------------------------------------------------------------ views


@runtime_checkable
class ReadModelView(Protocol):
    """What every view does besides its own changes (eventsourcing's TrackingRecorder)."""

    def insert_tracking(self, tracking: Tracking) -> None:
        """Record that the event at ``tracking`` was seen, changing nothing else."""
        ...

    def max_tracking_id(self, application_name: str) -> int | None:
        """The last notification id applied (None: nothing yet)."""
        ...

    def reset(self) -> None:
        """Drop and recreate the view's tables and reset its tracking (for rebuilds)."""
        ...


@runtime_checkable
class TranscriptView(ReadModelView, Protocol):
    """Every message ever appended, per conversation."""

    def add_message(self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking) -> None:
        ...

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        ...


@runtime_checkable
class SummariesView(ReadModelView, Protocol):
    """Every summary recorded, with its range and provenance."""

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None:
        ...

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        ...


@runtime_checkable
class TokenTotalsView(ReadModelView, Protocol):
    """Token counters per conversation; global totals are their sum."""

    def start_totals(self, conversation_id: UUID, *, base_tokens: int, tracking: Tracking) -> None:
        """A row for a new conversation; ``base_tokens``: system prompt and reply priming."""
        ...

    def add_to_totals(
        self, conversation_id: UUID, *, tracking: Tracking, **increments: int
    ) -> None:
        """Add ``increments`` (column name -> amount) to the conversation's counters."""
        ...

    def totals(self, conversation_id: UUID) -> TokenTotalsRecord | None:
        ...

    def global_totals(self) -> TokenTotalsRecord:
        ...


@runtime_checkable
class ConversationsView(ReadModelView, Protocol):
    """The list of conversations."""

    def add_conversation(
        self, conversation_id: UUID, *, model: str, started_at: datetime, tracking: Tracking
    ) -> None:
        ...

    def update_conversation(
        self,
        conversation_id: UUID,
        *,
        version: int,
        at: datetime,
        tracking: Tracking,
        messages: int = 0,
        summaries: int = 0,
        policy_version: int | None = None,
    ) -> None:
        """Move ``last_version``/``updated_at`` on and add to the counters."""
        ...

    def conversations(self) -> list[ConversationRecord]:
        ...


# ------------------------------------------------------------------ projections


class ReadModelProjection(Projection[Any]):
    """Base of the built-in read models: eventsourcing's ``Projection`` shape.

    ``process_event(event, tracking)`` maps one domain event to view calls; events of
    the projection's topics that change nothing still record their tracking.
    """

    name = "read_model"
    topics: tuple[str, ...] = ()

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)


class TranscriptProjection(ReadModelProjection):
    """``transcript``: one row per appended message."""

    name = "transcript"
    topics = (events.MessageAppended.TOPIC,)

    @property
    def view(self) -> TranscriptView:
        return self._view  # type: ignore[no-any-return]

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self.view.add_message(
            TranscriptEntry.from_event(event),
            conversation_id=event.originator_id,
            tracking=tracking,
        )


class SummariesProjection(ReadModelProjection):
    """``summaries``: one row per recorded summary."""

    name = "summaries"
    topics = (events.SummaryCreated.TOPIC,)

    @property
    def view(self) -> SummariesView:
        return self._view  # type: ignore[no-any-return]

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(events.SummaryCreated)
    def _summary(self, event: events.SummaryCreated, tracking: Tracking) -> None:
        self.view.add_summary(
            SummaryInfo.from_event(event),
            conversation_id=event.originator_id,
            tracking=tracking,
        )


class TokenTotalsProjection(ReadModelProjection):
    """``token_totals``: counters per conversation (the global totals are their sum)."""

    name = "token_totals"
    topics = (
        events.Started.TOPIC,
        events.MessageAppended.TOPIC,
        events.SummaryCreated.TOPIC,
        events.SummarizationFailed.TOPIC,
        events.UsageRecorded.TOPIC,
    )

    @property
    def view(self) -> TokenTotalsView:
        return self._view  # type: ignore[no-any-return]

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(events.Started)
    def _started(self, event: events.Started, tracking: Tracking) -> None:
        system = event.system_tokens if event.system_prompt is not None else 0
        self.view.start_totals(
            event.originator_id, base_tokens=system + event.reply_priming, tracking=tracking
        )

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id, tracking=tracking, messages=1, appended_tokens=event.tokens
        )

    @process_event.register(events.SummaryCreated)
    def _summary(self, event: events.SummaryCreated, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            summaries=1,
            summarizer_calls=1,
            summarizer_input_tokens=event.provenance.input_tokens or 0,
            summarizer_output_tokens=event.provenance.output_tokens or 0,
        )

    @process_event.register(events.SummarizationFailed)
    def _failed(self, event: events.SummarizationFailed, tracking: Tracking) -> None:
        called = 1 if event.called_provider else 0
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            summarizer_failures=1,
            summarizer_calls=called,
            summarizer_input_tokens=(event.input_tokens or 0) * called,
            summarizer_output_tokens=(event.output_tokens or 0) * called,
        )

    @process_event.register(events.UsageRecorded)
    def _usage(self, event: events.UsageRecorded, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            provider_prompt_tokens=event.prompt_tokens,
            provider_completion_tokens=event.completion_tokens,
        )


class ConversationsProjection(ReadModelProjection):
    """``conversations``: id, model, start, last version and counters of each one."""

    name = "conversations"
    topics = _CONVERSATION_TOPICS

    @property
    def view(self) -> ConversationsView:
        return self._view  # type: ignore[no-any-return]

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.update_conversation(
            domain_event.originator_id,
            version=domain_event.originator_version,
            at=domain_event.timestamp,
            tracking=tracking,
        )

    @process_event.register(events.Started)
    def _started(self, event: events.Started, tracking: Tracking) -> None:
        self.view.add_conversation(
            event.originator_id, model=event.model, started_at=event.timestamp, tracking=tracking
        )

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self.view.update_conversation(
            event.originator_id,
            version=event.originator_version,
            at=event.timestamp,
            tracking=tracking,
            messages=1,
        )

    @process_event.register(events.SummaryCreated)
    def _summary(self, event: events.SummaryCreated, tracking: Tracking) -> None:
        self.view.update_conversation(
            event.originator_id,
            version=event.originator_version,
            at=event.timestamp,
            tracking=tracking,
            summaries=1,
        )

    @process_event.register(events.PolicyChanged)
    def _policy(self, event: events.PolicyChanged, tracking: Tracking) -> None:
        self.view.update_conversation(
            event.originator_id,
            version=event.originator_version,
            at=event.timestamp,
            tracking=tracking,
            policy_version=event.policy_version,
        )


# ----------------------------------------------------------------------- runner


class ReadModelRunner:
    """Keeps projections up to date by polling the ledger's notification log.

    A follower for ``ledger.attach(runner)``: ``start()`` runs it in a background
    thread, ``wait_idle(timeout)`` waits until every projection has seen the log's
    end, ``stop()`` ends it. Without a thread, ``wait_idle()`` and ``catch_up()``
    process in the caller's thread. ``rebuild(name)`` recreates a read model from the
    whole log while writers keep appending.
    """

    def __init__(
        self,
        ledger: Ledger,
        projections: Sequence[ReadModelProjection],
        *,
        batch_size: int = 500,
        poll_interval: float | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise UsageError(f"projection names must be unique: {names}")
        self.ledger = ledger
        self.projections: tuple[ReadModelProjection, ...] = tuple(projections)
        self.batch_size = batch_size
        self.application_name = ledger.name
        self._poll = poll_interval if poll_interval is not None else ledger.settings.poll_interval
        self._on_close = on_close
        self._by_name = {p.name: p for p in self.projections}
        self._topics = tuple(sorted({t for p in self.projections for t in p.topics}))
        self._lock = threading.RLock()
        self._idle = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listening = False
        #: Per projection: the notification id up to which the log has been read.
        self._scanned: dict[str, int] = {
            p.name: p.view.max_tracking_id(self.application_name) or 0 for p in self.projections
        }
        self.last_error: BaseException | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The projections' names, as ``rebuild()`` takes them."""
        return tuple(self._by_name)

    def projection(self, name: str) -> ReadModelProjection:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownReadModelError(
                f"no read model named {name!r}; choose from {', '.join(self._by_name)}",
                projection=name,
                known=tuple(self._by_name),
            ) from None

    def position(self, name: str) -> int:
        """How far projection ``name`` has read the log (a notification id)."""
        return self._scanned[self.projection(name).name]

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        if not self._listening:
            self.ledger.add_listener(self._wake.set)
            self._listening = True
        self._thread = threading.Thread(target=self._run, name="contextledger-readmodels", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """True once every projection has read the log up to its end as of this call."""
        target = self.ledger.recorder.max_notification_id() or 0
        if self._thread is None:
            self.catch_up(timeout=timeout)
            return self._caught_up(target)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while not self._caught_up(target):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if self._thread is None:
                    return False
                self._wake.set()
                self._idle.wait(0.01 if remaining is None else min(0.01, remaining))
        return True

    def _caught_up(self, target: int) -> bool:
        # No lock: a rebuild holds it for long, and reading a snapshot of the dict is safe.
        return all(position >= target for position in list(self._scanned.values()))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
                self.last_error = None
            except (ContextLedgerError, PersistenceError) as exc:
                self.last_error = exc
                log.warning("read models: %s; retrying", exc)
                self._stop.wait(min(1.0, self._poll * 10))
            except Exception as exc:  # a bug in a user's projection: keep following the log
                self.last_error = exc
                log.exception("read models: a projection failed: %s; retrying", exc)
                self._stop.wait(1.0)
            self._wake.wait(self._poll)
            self._wake.clear()

    # -- processing -----------------------------------------------------------------

    def catch_up(self, *, timeout: float | None = None) -> int:
        """Process until every projection has read the log's end; returns events applied."""
        deadline = None if timeout is None else time.monotonic() + timeout
        applied = 0
        while True:
            applied += self.step()
            top = self.ledger.recorder.max_notification_id() or 0
            if self._caught_up(top):
                return applied
            if deadline is not None and time.monotonic() > deadline:
                return applied

    def step(self) -> int:
        """Read what is new in the log (up to one batch per call of the inner loop, until
        the end as of now) and apply it; returns the number of events applied."""
        applied = 0
        with self._lock:
            while True:
                top = self.ledger.recorder.max_notification_id() or 0
                start = min(self._scanned.values(), default=top)
                if start >= top:
                    break
                batch = self.ledger.recorder.select_notifications(
                    start + 1, self.batch_size, stop=top, topics=self._topics
                )
                end = batch[-1].id if len(batch) == self.batch_size else top
                applied += self._apply(batch, self.projections, end)
                if len(batch) < self.batch_size and all(
                    position >= top for position in self._scanned.values()
                ):
                    break
        with self._idle:
            self._idle.notify_all()
        return applied

    def _apply(
        self, batch: Sequence[Any], projections: Sequence[ReadModelProjection], end: int
    ) -> int:
        """Apply ``batch`` to ``projections``; each one that is not rewound has then
        read the log through ``end``."""
        applied = 0
        rewound: set[str] = set()
        decode = self.ledger.mapper.to_domain_event
        for notification in batch:
            event: Any = None
            for projection in projections:
                name = projection.name
                if (
                    name in rewound
                    or notification.id <= self._scanned[name]
                    or notification.topic not in projection.topics
                ):
                    continue
                if event is None:
                    event = decode(notification)
                try:
                    projection.process_event(
                        event, Tracking(self.application_name, notification.id)
                    )
                except TrackingRewoundError as exc:
                    tracked = int(exc.context.get("tracked", 0) or 0)
                    log.info("read model %s was reset elsewhere; resuming after %d", name, tracked)
                    self._scanned[name] = tracked
                    rewound.add(name)
                    continue
                self._scanned[name] = notification.id
                applied += 1
        for projection in projections:
            if projection.name not in rewound:
                self._scanned[projection.name] = max(self._scanned[projection.name], end)
        return applied

    # -- rebuild --------------------------------------------------------------------

    def rebuild(self, name: str, *, progress: ProgressCallback | None = None) -> int:
        """Drop and recreate read model ``name``, then replay the whole log into it.

        Writers may keep appending: the replay reads on until it reaches the log's end,
        and whatever lands later is applied by the runner as usual. Returns the number
        of events applied.
        """
        projection = self.projection(name)
        with self._lock:
            projection.view.reset()
            self._scanned[name] = 0
            applied = 0
            while True:
                top = self.ledger.recorder.max_notification_id() or 0
                position = self._scanned[name]
                if progress is not None:
                    progress(position, top)
                if position >= top:
                    break
                batch = self.ledger.recorder.select_notifications(
                    position + 1, self.batch_size, stop=top, topics=projection.topics
                )
                end = batch[-1].id if len(batch) == self.batch_size else top
                applied += self._apply(batch, (projection,), end)
        with self._idle:
            self._idle.notify_all()
        return applied
