"""The runner that keeps read models up to date, and rebuilds them by name.

Lifecycle (as Marten states it): the built-in read models are *async* projections:
the ``ReadModelRunner`` (a ``LogFollower``) polls the log in a background thread (a
SQLite store cannot notify; an append in this process wakes it at once) and
``Ledger.wait_idle()`` waits for it once attached with ``ledger.attach(runner)``. Each
projection's progress is a row; ``rebuild(name)`` recreates one read model from the
whole log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import Notification, Tracking

from contextledger.application.follower import LogFollower
from contextledger.application.projections.base import ReadModelProjection
from contextledger.domain.errors import (
    ConfigurationError,
    ReadModelAheadError,
    TrackingRewoundError,
    UnknownReadModelError,
    UsageError,
)

if TYPE_CHECKING:
    from contextledger.application.ledger import Ledger

__all__ = ["ProgressCallback", "ReadModelRunner"]

log = logging.getLogger("contextledger.readmodels")

#: ``progress(position, end)``: notification ids; ``end`` may grow while writers append.
ProgressCallback = Callable[[int, int], None]


class ReadModelRunner(LogFollower):
    """Keeps projections up to date by following the ledger's notification log.

    A follower for ``ledger.attach(runner)``: ``start()`` runs it in a background
    thread, ``wait_idle(timeout)`` waits until every projection has seen the log's
    end, ``stop()`` ends it. Without a thread, ``wait_idle()`` and ``catch_up()``
    process in the caller's thread. ``rebuild(name)`` recreates a read model from the
    whole log while writers keep appending.
    """

    thread_name = "contextledger-readmodels"

    def __init__(
        self,
        ledger: Ledger,
        projections: Sequence[ReadModelProjection[Any]],
        *,
        batch_size: int = 500,
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
                projection=name, position=position, head=head,
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
                            self.projections, after=start, head=head, topics=self._topics
                        )
                    span.set("events", applied)
        self._progressed()
        return applied

    def _replay(
        self,
        projections: Sequence[ReadModelProjection[Any]],
        *,
        after: int,
        head: int,
        topics: Sequence[str],
        progress: ProgressCallback | None = None,
    ) -> int:
        """Apply the log above ``after`` through ``head`` to ``projections``; returns
        the events applied. Stops early when a projection finds its read model rebuilt
        elsewhere (its position moved back: the caller reads on from there)."""
        applied = 0
        for page in self.read(after=after, stop=head, topics=topics, page=self.batch_size):
            done, rewound = self._apply(page, projections, page[-1].id)
            applied += done
            if rewound:
                return applied
            if progress is not None:
                progress(page[-1].id, head)
        self._apply((), projections, head)
        return applied

    def _apply(
        self, page: Sequence[Notification], projections: Sequence[ReadModelProjection[Any]], end: int
    ) -> tuple[int, bool]:
        """Apply ``page`` to ``projections``; each one that is not rewound has then
        read the log through ``end``. Returns the events applied, and whether any
        projection was rewound."""
        applied = 0
        rewound: set[str] = set()
        decode = self.ledger.mapper.to_domain_event
        for notification in page:
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
                    projection.process_event(event, Tracking(self.application_name, notification.id))
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
        return applied, bool(rewound)

    # -- rebuild --------------------------------------------------------------------

    def rebuild(self, name: str, *, progress: ProgressCallback | None = None) -> int:
        """Drop and recreate read model ``name``, then replay the whole log into it.

        Writers may keep appending: the replay reads on until it reaches the log's end,
        and whatever lands later is applied by the runner as usual. Returns the number
        of events applied.
        """
        projection = self.projection(name)
        with self._lock, self.ledger.tracer.span("rebuild", projection=name) as span:
            projection.view.reset()
            self._scanned[name] = 0
            applied = 0
            while True:
                head = self.head()
                position = self._scanned[name]
                if progress is not None:
                    progress(position, head)
                if position >= head:
                    break
                applied += self._replay(
                    (projection,), after=position, head=head, topics=projection.topics, progress=progress
                )
            span.set("events", applied)
            span.set("through_notification", self._scanned[name])
        self._progressed()
        return applied
