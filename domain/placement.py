"""``Placement``: which store of a sharded deployment holds a conversation.

One tiny aggregate per conversation, with an id derived from the conversation's id,
kept in the first store (the directory). It is written once, when the conversation
is started (or forked) in a deployment of several stores, before the conversation
itself; two processes placing the same id collide on its version 1 and both use the
placement that was stored first. A placement never changes: adding a store moves
nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID, uuid5

from contextledger.domain.events import DomainEvent

__all__ = ["Placement"]

_NAMESPACE = UUID("3c5e0f0e-8a4b-4d8e-9b1e-6c2d7a9f4e10")


class Placement:
    """Maps a conversation to the index of the store that holds it."""

    class Recorded(DomainEvent):
        TOPIC: ClassVar[str] = "contextledger.placement.Recorded"
        conversation_id: UUID
        #: The index of the store in the deployment's list of stores (0 is the first).
        store: int

        def mutate(self, aggregate: Any) -> Placement:
            return Placement(self.originator_id, self.conversation_id, self.store)

    def __init__(self, placement_id: UUID, conversation_id: UUID, store: int) -> None:
        self.id = placement_id
        self.version = 1
        self.conversation_id = conversation_id
        self.store = store
        self._pending_events: list[DomainEvent] = []

    @staticmethod
    def id_for(conversation_id: UUID) -> UUID:
        return uuid5(_NAMESPACE, str(conversation_id))

    @classmethod
    def record(cls, conversation_id: UUID, store: int, *, at: datetime) -> Placement:
        event = cls.Recorded(
            originator_id=cls.id_for(conversation_id),
            originator_version=1,
            timestamp=at,
            conversation_id=conversation_id,
            store=store,
        )
        placement = event.mutate(None)
        placement._pending_events.append(event)
        return placement

    def collect_events(self) -> list[DomainEvent]:
        events, self._pending_events = self._pending_events, []
        return events
