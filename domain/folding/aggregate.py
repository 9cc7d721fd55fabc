"""What every part of the ``Conversation`` aggregate stands on: its identity, version
and state, the fold of its events, and the triggering of new ones.

``Conversation`` (``contextledger.domain.conversation``) adds the commands to this root,
with the edit commands (``contextledger.domain.commands.editing``) and the summary commands
(``contextledger.domain.commands.summarizing``) as the bases that share it.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Self
from uuid import UUID

from contextledger.domain.events import (
    ConversationEvent,
    DomainEvent,
    Forked,
    SealedEvent,
    Started,
    ThresholdReached,
)
from contextledger.domain.folding.fold import apply_event, initial_state
from contextledger.domain.folding.state import ConversationState
from contextledger.domain.folding.thresholds import range_to_pin
from contextledger.domain.values.errors import LogDamagedError

__all__ = ["ConversationRoot"]


class ConversationRoot:
    """A conversation's identity, version and state, and how events change them."""

    def __init__(self, conversation_id: UUID, created_on: datetime) -> None:
        self.id = conversation_id
        self.version = 0
        self.created_on = created_on
        self.modified_on = created_on
        self.state: ConversationState
        self._pending_events: list[DomainEvent] = []

    def collect_events(self) -> list[DomainEvent]:
        events, self._pending_events = self._pending_events, []
        return events

    def private_copy(self) -> Self:
        """A copy that shares nothing a caller could change with this one: the state's
        ``private_copy``, any other attribute that is not a plain value copied deeply."""
        copied = copy.copy(self)
        for name, value in vars(self).items():
            if name == "state":
                copied.state = self.state.private_copy()
            elif not isinstance(value, (str, int, UUID, datetime, type(None))):
                setattr(copied, name, copy.deepcopy(value))
        return copied

    @classmethod
    def apply(cls, conversation: Self | None, event: ConversationEvent) -> Self:
        """Fold ``event`` into ``conversation`` (``Started`` and ``Forked`` create it)."""
        if isinstance(event, Started):
            conversation = cls(event.originator_id, event.timestamp)
            conversation.state = initial_state(event)
        elif isinstance(event, Forked):
            conversation = cls(event.originator_id, event.timestamp)
            conversation.state = ConversationState.model_validate(event.state)
        elif conversation is None or event.originator_version != conversation.version + 1:
            after = "no Started" if conversation is None else f"version {conversation.version}"
            raise LogDamagedError(
                f"the log is damaged: {type(event).__name__} at version "
                f"{event.originator_version} comes after {after} (events are missing)",
                conversation_id=event.originator_id,
                version=event.originator_version,
            )
        else:
            apply_event(conversation.state, event)
        conversation.version = event.originator_version
        conversation.modified_on = event.timestamp
        return conversation

    def _trigger(self, event_class: type[ConversationEvent], at: datetime, **fields: Any) -> None:
        self._new_event(event_class, at, fields, None)

    def _new_event(
        self,
        event_class: type[ConversationEvent],
        at: datetime,
        fields: dict[str, Any],
        context: dict[str, Any] | None,
    ) -> None:
        """``_trigger``, the event validated under ``context`` (pydantic's)."""
        fields.update(originator_id=self.id, originator_version=self.version + 1, timestamp=at)
        event = event_class.model_validate(fields, context=context)
        if isinstance(event, SealedEvent):
            event = event.sealed()
        self.apply(self, event)
        self._pending_events.append(event)

    def _maybe_pin_range(self, at: datetime) -> None:
        """Pin the range the policy's trigger calls for, if any (``ThresholdReached``)."""
        fields = range_to_pin(self.state)
        if fields is not None:
            self._trigger(ThresholdReached, at, **fields)
