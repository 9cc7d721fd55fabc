"""The ``transcript`` read model: one row per appended message and edited version,
with the marks of retractions, edits and forks."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ReadModelProjection, TranscriptView
from contextledger.application.shared.results import TranscriptEntry
from contextledger.domain import events
from contextledger.domain.erasure import ContentErased

__all__ = ["TranscriptProjection"]


class TranscriptProjection(ReadModelProjection[TranscriptView]):
    """``transcript``: one row per message version, marked as ``Ledger.transcript()``
    marks it (retracted with its reason, replaced by an edit, inherited by a fork)."""

    name = "transcript"
    topics = (
        events.MessageAppended.TOPIC,
        events.MessageEdited.TOPIC,
        events.MessagesRetracted.TOPIC,
        events.Forked.TOPIC,
        ContentErased.TOPIC,
    )

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(ContentErased)
    def _content_erased(self, event: ContentErased, tracking: Tracking) -> None:
        self.erase_rows(event, tracking)

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self.view.add_message(
            TranscriptEntry.from_event(event),
            conversation_id=event.originator_id,
            tracking=tracking,
        )

    @process_event.register(events.MessageEdited)
    def _edited(self, event: events.MessageEdited, tracking: Tracking) -> None:
        self.view.edit_message(
            TranscriptEntry.from_event(event),
            conversation_id=event.originator_id,
            tracking=tracking,
        )

    @process_event.register(events.MessagesRetracted)
    def _retracted(self, event: events.MessagesRetracted, tracking: Tracking) -> None:
        self.view.retract_messages(
            event.originator_id,
            event.positions,
            version=event.originator_version,
            reason=event.reason,
            tracking=tracking,
        )

    @process_event.register(events.Forked)
    def _forked(self, event: events.Forked, tracking: Tracking) -> None:
        self.view.fork_transcript(
            event.originator_id,
            source_id=event.origin.conversation_id,
            source_version=event.origin.version,
            through_position=event.origin.through_position,
            tracking=tracking,
        )
