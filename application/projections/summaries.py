"""The ``summaries`` read model: one row per recorded summary."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ReadModelProjection, SummariesView
from contextledger.application.results import SummaryInfo
from contextledger.domain import events

__all__ = ["SummariesProjection"]


class SummariesProjection(ReadModelProjection[SummariesView]):
    """``summaries``: one row per recorded summary."""

    name = "summaries"
    topics = (events.SummaryCreated.TOPIC,)

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
