"""The ``conversations`` read model: the list of conversations and their counters."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ConversationsView, ReadModelProjection
from contextledger.domain import events
from contextledger.domain.erasure import ContentErased, ErasedEvent

__all__ = ["ConversationsProjection"]


#: Every event of a conversation moves its last version on; a conversation begins
#: with ``Started`` or, forked from another, with ``Forked``.
_CONVERSATION_TOPICS = (
    events.Started.TOPIC,
    events.Forked.TOPIC,
    events.MessageAppended.TOPIC,
    events.ThresholdReached.TOPIC,
    events.SummaryCreated.TOPIC,
    events.SummarizationFailed.TOPIC,
    events.PolicyChanged.TOPIC,
    events.UsageRecorded.TOPIC,
    events.ToolsChanged.TOPIC,
    events.MessagesRetracted.TOPIC,
    events.MessageEdited.TOPIC,
    events.SystemPromptChanged.TOPIC,
    events.SummaryInvalidated.TOPIC,
    ContentErased.TOPIC,
)


class ConversationsProjection(ReadModelProjection[ConversationsView]):
    """``conversations``: id, key, model, start, last version and counters of each
    one, a fork's source, and the last system prompt change."""

    name = "conversations"
    topics = _CONVERSATION_TOPICS

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self._touch(domain_event, tracking)

    @process_event.register(ContentErased)
    def _content_erased(self, event: ContentErased, tracking: Tracking) -> None:
        self.erase_rows(event, tracking)

    @process_event.register(ErasedEvent)
    def _erased_record(self, event: ErasedEvent, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(events.Started)
    def _started(self, event: events.Started, tracking: Tracking) -> None:
        self.view.add_conversation(
            event.originator_id,
            model=event.model,
            started_at=event.timestamp,
            key=event.key,
            tracking=tracking,
        )

    @process_event.register(events.Forked)
    def _forked(self, event: events.Forked, tracking: Tracking) -> None:
        self.view.add_conversation(
            event.originator_id,
            model=str(event.state.get("model", "")),
            started_at=event.timestamp,
            key=event.key,
            messages=int(event.state.get("next_position", 0)),
            forked_from=event.origin.conversation_id,
            forked_at_version=event.origin.version,
            policy_version=int(event.state.get("policy_version", 1)),
            summaries=int(event.state.get("inherited_summaries", 0)),
            tracking=tracking,
        )

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self._touch(event, tracking, messages=1)

    @process_event.register(events.SummaryCreated)
    def _summary(self, event: events.SummaryCreated, tracking: Tracking) -> None:
        self._touch(event, tracking, summaries=1)

    @process_event.register(events.PolicyChanged)
    def _policy(self, event: events.PolicyChanged, tracking: Tracking) -> None:
        self._touch(event, tracking, policy_version=event.policy_version)

    @process_event.register(events.SystemPromptChanged)
    def _system_prompt(self, event: events.SystemPromptChanged, tracking: Tracking) -> None:
        self._touch(event, tracking, system_prompt_version=event.originator_version)

    def _touch(self, event: Any, tracking: Tracking, **changes: Any) -> None:
        """Move the conversation's last version and update time to ``event``'s, with
        ``changes`` (counters to add, a new policy version) as ``update_conversation`` takes them."""
        self.view.update_conversation(
            event.originator_id,
            version=event.originator_version,
            at=event.timestamp,
            tracking=tracking,
            **changes,
        )
