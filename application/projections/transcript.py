"""The ``transcript`` read model: one row per appended message."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ReadModelProjection, TranscriptView
from contextledger.application.results import TranscriptEntry
from contextledger.domain import events

__all__ = ["TranscriptProjection"]


class TranscriptProjection(ReadModelProjection[TranscriptView]):
    """``transcript``: one row per appended message."""

    name = "transcript"
    topics = (events.MessageAppended.TOPIC,)

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
