"""The ``summaries`` read model: one row per recorded summary, and whether it stands."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ReadModelProjection, SummariesView
from contextledger.application.shared.results import SummaryInfo
from contextledger.domain import events
from contextledger.domain.erasure import ContentErased

__all__ = ["SummariesProjection"]


class SummariesProjection(ReadModelProjection[SummariesView]):
    """``summaries``: one row per recorded summary, and a fork's copy of the summaries
    of its shared history; ``SummaryInvalidated`` marks the ones it takes back
    (``valid``, the invalidating version, its reason and conversation);
    ``NativeSummaryReadable`` gives an opaque native summary its readable text."""

    name = "summaries"
    topics = (
        events.SummaryCreated.TOPIC,
        events.SummaryInvalidated.TOPIC,
        events.NativeSummaryReadable.TOPIC,
        events.Forked.TOPIC,
        ContentErased.TOPIC,
    )

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(ContentErased)
    def _content_erased(self, event: ContentErased, tracking: Tracking) -> None:
        self.erase_rows(event, tracking)

    @process_event.register(events.SummaryCreated)
    def _summary(self, event: events.SummaryCreated, tracking: Tracking) -> None:
        self.view.add_summary(
            SummaryInfo.from_event(event),
            conversation_id=event.originator_id,
            tracking=tracking,
        )

    @process_event.register(events.SummaryInvalidated)
    def _invalidated(self, event: events.SummaryInvalidated, tracking: Tracking) -> None:
        self.view.invalidate_summaries(
            event.originator_id,
            event.invalidated_versions,
            version=event.originator_version,
            reason=event.reason,
            tracking=tracking,
            inherited=tuple(
                (link.origin, link.version) for link in event.invalidated_inherited if link.origin
            ),
        )

    @process_event.register(events.NativeSummaryReadable)
    def _readable(self, event: events.NativeSummaryReadable, tracking: Tracking) -> None:
        self.view.readable_summary(
            event.originator_id,
            origin_id=event.summary_origin or event.originator_id,
            version=event.summary_version,
            text=event.text,
            tokens=event.tokens,
            tracking=tracking,
        )

    @process_event.register(events.Forked)
    def _forked(self, event: events.Forked, tracking: Tracking) -> None:
        self.view.fork_summaries(
            event.originator_id,
            source_id=event.origin.conversation_id,
            source_version=event.origin.version,
            tracking=tracking,
        )
