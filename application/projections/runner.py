"""The runner that keeps read models up to date, and rebuilds them by name.

Lifecycle (as Marten states it): the built-in read models are *async* projections:
the ``ReadModelRunner`` (a ``LogFollower``) polls the log in a background thread (a
SQLite store cannot notify; an append in this process wakes it at once) and
``Ledger.wait_idle()`` waits for it once attached with ``ledger.attach(runner)``. Each
projection's progress is a row; ``rebuild(name)`` recreates one read model from the
whole log.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import Mapper, Notification, Tracking

from contextledger.application.following.follower import FollowedLog, LogFollower
from contextledger.application.projections.base import ReadModelProjection
from contextledger.application.shared.observability import Tracer
from contextledger.domain.values.errors import (
    ConfigurationError,
    ReadModelAheadError,
    TrackingRewoundError,
    UnknownReadModelError,
    UsageError,
)

__all__ = ["ProgressCallback", "ReadModelHost", "ReadModelRunner"]

log = logging.getLogger("contextledger.readmodels")

#: ``progress(position, end)``: notification ids; ``end`` may grow while writers append.
ProgressCallback = Callable[[int, int], None]


class ReadModelHost(FollowedLog, Protocol):
    """What the runner needs of the ledger besides its log: the application's name
    (of its tracking rows), the mapper that decodes notifications, and the tracer."""

    @property
    def name(self) -> str: ...

    @property
    def mapper(self) -> Mapper[UUID]: ...

    @property
    def tracer(self) -> Tracer: ...


class _Handlers:
    """A projection's ``process_event`` per event class. Looking up a dispatching
    method (eventsourcing's ``singledispatchmethod``) builds a bound function and finds
    the implementation for the event's class on every call; a batch finds each class's
    implementation once and calls it bound."""

    __slots__ = ("_bound", "_by_class", "_dispatch", "_projection")

    def __init__(self, projection: ReadModelProjection[Any]) -> None:
        self._projection = projection
        #: Also registers what the class registered late (done on lookup).
        self._bound: Callable[[Any, Tracking], None] = projection.process_event
        method = inspect.getattr_static(projection, "process_event", None)
        dispatcher = getattr(method, "dispatcher", None)
        self._dispatch: Callable[[type], Any] | None = None if dispatcher is None else dispatcher.dispatch
        self._by_class: dict[type, Callable[[Any, Tracking], None]] = {}

    def get(self, cls: type) -> Callable[[Any, Tracking], None]:
        handler = self._by_class.get(cls)
        if handler is None:
            if self._dispatch is None:  # a plain method
                handler = self._bound
            else:
                projection = self._projection
                handler = self._dispatch(cls).__get__(projection, type(projection))
            self._by_class[cls] = handler
        return handler


class ReadModelRunner(LogFollower):
    """Keeps projections up to date by following the ledger's notification log.

    A follower for ``ledger.attach(runner)``: ``start()`` runs it in a background
    thread, ``wait_idle(timeout)`` waits until every projection has seen the log's
    end, ``stop()`` ends it. Without a thread, ``wait_idle()`` and ``catch_up()``
    process in the caller's thread. ``rebuild(name)`` recreates a read model from the
    whole log while writers keep appending.
    """

    thread_name = "contextledger-readmodels"
    ledger: ReadModelHost

    def __init__(
        self,
        ledger: ReadModelHost,
        projections: Sequence[ReadModelProjection[Any]],
        *,
        batch_size: int = 500,
        batch_events: int = 1000,
        batch_seconds: float = 0.5,
        rebuild_batch_events: int = 5000,
        rebuild_batch_seconds: float = 2.0,
        read_size: int = 5000,
        poll_interval: float | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(ledger, poll_interval=poll_interval)
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise UsageError(f"projection names must be unique: {names}")
        if not 0 < batch_size <= ledger.log_section_size:
            raise ConfigurationError(
                f"batch_size must be between 1 and the log's section size ({ledger.log_section_size})"
            )
        self.projections: tuple[ReadModelProjection[Any], ...] = tuple(projections)
        self.batch_size = batch_size
        #: A batch ends after this many events or this many seconds (or at the end of
        #: what was read): one transaction and one tracking update per batch.
        self.batch_events = max(1, batch_events)
        self.batch_seconds = batch_seconds
        #: The same bounds for a rebuild, which nothing waits on batch by batch: fewer,
        #: larger transactions (an interrupted rebuild resumes after its last one); also
        #: those of a step that starts more than ``rebuild_batch_events`` behind the log.
        self.rebuild_batch_events = max(1, rebuild_batch_events)
        self.rebuild_batch_seconds = rebuild_batch_seconds
        #: Notifications read per query of the log (a section; above the log's own
        #: section size it goes to the recorder directly).
        self.read_size = max(batch_size, read_size)
        self.application_name = ledger.name
        self._on_close = on_close
        self._by_name = {p.name: p for p in self.projections}
        self._topics = tuple(sorted({t for p in self.projections for t in p.topics}))
        #: Held while reading and applying (a rebuild holds it throughout).
        self._lock = threading.RLock()
        #: Per projection: the notification id up to which the log has been read.
        self._scanned: dict[str, int] = {
            p.name: p.view.max_tracking_id(self.application_name) or 0 for p in self.projections
        }

    @property
    def names(self) -> tuple[str, ...]:
        """The projections' names, as ``rebuild()`` takes them."""
        return tuple(self._by_name)

    def projection(self, name: str) -> ReadModelProjection[Any]:
        """The projection called ``name`` (``UnknownReadModelError`` if none is)."""
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

    def check_against_log(self) -> None:
        """Raise ``ReadModelAheadError`` for a read model whose tracking position lies
        past the log's committed head (a restored older backup, another store's read
        models): its rows count events the log does not hold. ``rebuild(name)`` fixes it."""
        head = self.committed_head()
        ahead = [(name, position) for name, position in self._scanned.items() if position > head]
        if ahead:
            name, position = ahead[0]
            others = "".join(f", {n} at {p}" for n, p in ahead[1:])
            command = f"contextledger rebuild {name}" if len(ahead) == 1 else "contextledger rebuild"
            raise ReadModelAheadError(
                f"read model {name} is at notification {position}{others}, past the log's head {head} "
                f"(an event store restored from an older backup, or another store's read models): "
                f"rebuild from the log ({command})",
                projection=name,
                position=position,
                head=head,
            )

    # -- LogFollower --------------------------------------------------------------

    def start(self) -> None:
        """Follow the log in a background thread; first ``check_against_log()``."""
        if not self.running:
            self.check_against_log()
        super().start()

    def _stopped(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def log_position(self) -> int:
        """How far the slowest projection has read the log."""
        return min(list(self._scanned.values()), default=self._head)

    def idle_at(self, head: int) -> bool:
        # No lock: a rebuild holds it for long, and reading a snapshot of the dict is safe.
        return all(position >= head for position in list(self._scanned.values()))

    def _settle(self, head: int, timeout: float | None) -> bool:
        """Without a thread, ``wait_idle`` processes in the caller's thread (until the
        log is final through ``head``, or the timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.catch_up(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            if self.idle_at(head):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    # -- processing -----------------------------------------------------------------

    def catch_up(self, *, timeout: float | None = None) -> int:
        """Process until every projection has read the log's end; returns events applied."""
        deadline = None if timeout is None else time.monotonic() + timeout
        applied = 0
        while True:
            applied += self.step()
            if self.idle_at(self.head()):
                return applied
            if deadline is not None and time.monotonic() > deadline:
                return applied

    def step(self) -> int:
        """Read what is new in the log, up to its end as of now, and apply it; returns
        the number of events applied."""
        with self._lock:
            head = self.head()
            applied = 0
            start = min(self._scanned.values(), default=head)
            if start < head:
                # A span only for a step with something to read: idle polls make none.
                with self.ledger.tracer.span(
                    "project", after_notification=start, through_notification=head
                ) as span:
                    while (start := min(self._scanned.values(), default=head)) < head:
                        applied += self._replay(
                            self.projections,
                            after=start,
                            head=head,
                            topics=self._topics,
                            limits=self._limits(head - start),
                        )
                    span.set("events", applied)
        self._progressed()
        return applied

    def _limits(self, lag: int) -> tuple[int, float] | None:
        """The batch bounds for applying ``lag`` notifications: a follower that is far
        behind (a worker started after a while down, one that fell behind a burst)
        applies them in a rebuild's larger batches, as nothing waits on its batches
        one by one; close to the log's end, the usual ones (None)."""
        if lag > self.rebuild_batch_events:
            return (self.rebuild_batch_events, self.rebuild_batch_seconds)
        return None

    def _replay(
        self,
        projections: Sequence[ReadModelProjection[Any]],
        *,
        after: int,
        head: int,
        topics: Sequence[str],
        progress: ProgressCallback | None = None,
        counts: dict[str, int] | None = None,
        limits: tuple[int, float] | None = None,
    ) -> int:
        """Apply the log above ``after`` through ``head`` to ``projections``, in
        batches; returns the events applied (also added to ``counts`` per projection).
        Stops early when a projection finds its read model rebuilt elsewhere (its
        position moved back: the caller reads on from there)."""
        applied = 0
        for page in self.read(after=after, stop=head, topics=topics, page=self.read_size):
            index = 0
            while index < len(page):
                index, done, rewound = self._apply_batch(page, index, projections, counts, limits)
                applied += done
                if rewound:
                    return applied
                if progress is not None:
                    progress(page[index - 1].id, head)
            self._advance(projections, page[-1].id)
        self._advance(projections, head)
        return applied

    def _advance(self, projections: Sequence[ReadModelProjection[Any]], end: int) -> None:
        """Each of ``projections`` has read the log through ``end``."""
        for projection in projections:
            self._scanned[projection.name] = max(self._scanned[projection.name], end)

    def _apply_batch(
        self,
        page: Sequence[Notification],
        index: int,
        projections: Sequence[ReadModelProjection[Any]],
        counts: dict[str, int] | None = None,
        limits: tuple[int, float] | None = None,
    ) -> tuple[int, int, bool]:
        """Apply ``page`` from ``index`` on in one batch: each view that can (a
        ``batch(application_name)`` context, as the SQL views have) writes its rows
        and one tracking update in one transaction. The batch ends at the page's end,
        after ``batch_events`` events or ``batch_seconds``, whichever comes first, so
        a single new event is applied at once (``limits``: other bounds, a rebuild's).
        Returns the index after the batch, the events applied, and whether any
        projection was rewound. Positions move on
        only once the batch has committed: a batch that fails leaves them (and the
        rows and tracking, rolled back together) where they were."""
        rewound: set[str] = set()
        scanned = {p.name: self._scanned[p.name] for p in projections}
        applied: dict[str, int] = {}
        decode = self.ledger.mapper.to_domain_event
        app = self.application_name
        most, seconds = limits or (self.batch_events, self.batch_seconds)
        deadline = time.monotonic() + seconds
        # Per projection, once per batch (not per event): its handler per event class
        # and the set of its topics.
        plan = [(p.name, _Handlers(p), frozenset(p.topics)) for p in projections]
        with ExitStack() as stack:
            for projection in projections:
                batch = getattr(projection.view, "batch", None)
                if batch is None:
                    continue
                try:
                    stack.enter_context(batch(self.application_name))
                except TrackingRewoundError as exc:
                    self._rewound(projection.name, exc, scanned, rewound)
            taken = 0
            while index < len(page) and len(rewound) < len(projections):
                notification = page[index]
                index += 1
                nid, topic = notification.id, notification.topic
                event: Any = None
                tracking: Tracking | None = None
                for name, handlers, topics in plan:
                    if topic not in topics or nid <= scanned[name] or name in rewound:
                        continue
                    if tracking is None:  # decoded once, for the first projection that follows it
                        event = decode(notification)
                        tracking = Tracking(app, nid)
                    try:
                        handlers.get(event.__class__)(event, tracking)
                    except TrackingRewoundError as exc:  # a view that writes event by event
                        self._rewound(name, exc, scanned, rewound)
                        continue
                    scanned[name] = nid
                    applied[name] = applied.get(name, 0) + 1
                taken += 1
                if taken >= most or time.monotonic() >= deadline:
                    break
        if rewound or index >= len(page):
            index = len(page)
        else:  # the batch ended mid-page: every projection has read through its last event
            for name in scanned:
                scanned[name] = max(scanned[name], page[index - 1].id)
        self._scanned.update(scanned)
        if counts is not None:
            for name, count in applied.items():
                counts[name] = counts.get(name, 0) + count
        return index, sum(applied.values()), bool(rewound)

    @staticmethod
    def _rewound(name: str, exc: TrackingRewoundError, scanned: dict[str, int], rewound: set[str]) -> None:
        tracked = int(exc.context.get("tracked", 0) or 0)
        log.info("read model %s was reset elsewhere; resuming after %d", name, tracked)
        scanned[name] = tracked
        rewound.add(name)

    # -- rebuild --------------------------------------------------------------------

    def rebuild(self, name: str, *, progress: ProgressCallback | None = None, resume: bool = False) -> int:
        """Drop and recreate read model ``name``, then replay the whole log into it
        (``rebuild_many`` with one name); returns the number of events applied."""
        return self.rebuild_many((name,), progress=progress, resume=resume)[name]

    def rebuild_many(
        self,
        names: Sequence[str],
        *,
        progress: ProgressCallback | None = None,
        resume: bool = False,
    ) -> dict[str, int]:
        """Drop and recreate read models ``names``, then replay the whole log into all
        of them in one pass over the log, in batches (one transaction and one tracking
        update per batch). ``resume``: keep what an interrupted rebuild committed and
        carry on from each read model's last batch instead of starting over.

        Writers may keep appending: the replay reads on until it reaches the log's end,
        and whatever lands later is applied by the runner as usual. Returns the number
        of events applied per read model.
        """
        projections = tuple(self.projection(name) for name in names)
        topics = tuple(sorted({t for p in projections for t in p.topics}))
        counts = {p.name: 0 for p in projections}
        with self._lock, ExitStack() as stack:
            # A span per read model (entered last to first, so they end first to last).
            spans = {
                p.name: stack.enter_context(self.ledger.tracer.span("rebuild", projection=p.name))
                for p in reversed(projections)
            }
            for projection in projections:
                if resume:
                    self._scanned[projection.name] = (
                        projection.view.max_tracking_id(self.application_name) or 0
                    )
                else:
                    projection.view.reset()
                    self._scanned[projection.name] = 0
            while True:
                head = self.head()
                position = min(self._scanned[p.name] for p in projections)
                if progress is not None:
                    progress(position, head)
                if position >= head:
                    break
                self._replay(
                    projections,
                    after=position,
                    head=head,
                    topics=topics,
                    progress=progress,
                    counts=counts,
                    limits=(self.rebuild_batch_events, self.rebuild_batch_seconds),
                )
            for name, span in spans.items():
                span.set("events", counts[name])
                span.set("through_notification", position)
        self._progressed()
        return counts
