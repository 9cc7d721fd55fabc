"""``ClientMessageId``: makes a retried append with the same client id a no-op.

One tiny aggregate per (conversation, client message id), with a deterministic id,
saved in the same transaction as the ``MessageAppended`` it names. A second append
with the same client id collides on its version 1 and finds the original position.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID, uuid5

from contextledger.domain.events import DomainEvent

__all__ = ["ClientMessageId"]

_NAMESPACE = UUID("6f1b7b3e-4a57-4f2d-9a55-2a8a3f1c0b71")


class ClientMessageId:
    """Maps a client's message id to the position the message got."""

    class Recorded(DomainEvent):
        TOPIC: ClassVar[str] = "contextledger.client_message_id.Recorded"
        conversation_id: UUID
        client_message_id: str
        position: int

        def mutate(self, aggregate: Any) -> ClientMessageId:
            return ClientMessageId(
                self.originator_id, self.conversation_id, self.client_message_id, self.position
            )

    def __init__(self, index_id: UUID, conversation_id: UUID, client_message_id: str, position: int) -> None:
        self.id = index_id
        self.version = 1
        self.conversation_id = conversation_id
        self.client_message_id = client_message_id
        self.position = position
        self._pending_events: list[DomainEvent] = []

    @staticmethod
    def id_for(conversation_id: UUID, client_message_id: str) -> UUID:
        return uuid5(_NAMESPACE, f"{conversation_id}/{client_message_id}")

    @classmethod
    def record(
        cls, conversation_id: UUID, client_message_id: str, position: int, *, at: datetime
    ) -> ClientMessageId:
        event = cls.Recorded(
            originator_id=cls.id_for(conversation_id, client_message_id),
            originator_version=1,
            timestamp=at,
            conversation_id=conversation_id,
            client_message_id=client_message_id,
            position=position,
        )
        index = event.mutate(None)
        index._pending_events.append(event)
        return index

    def collect_events(self) -> list[DomainEvent]:
        events, self._pending_events = self._pending_events, []
        return events
