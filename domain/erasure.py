"""What a reader gets for a stored record whose content was erased (crypto-shredded).

Each event and snapshot of a data subject is encrypted under the subject's data key;
erasing the subject destroys that key and leaves a tombstone (when, why). The records
stay in the log, unreadable. The mapper gives an ``ErasedEvent`` for each of them
instead of raising: a follower reading a batch of the notification log must go on past
them, for every other conversation's sake. Folding one into an aggregate (loading the
erased conversation) raises ``ConversationErasedError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from contextledger.domain.errors import ConversationErasedError

__all__ = ["ErasedEvent"]


@dataclass(frozen=True, slots=True)
class ErasedEvent:
    """A stored event or snapshot whose data key is a tombstone. What is in clear
    remains (the record's place and topic); its content is gone for good."""

    originator_id: UUID
    originator_version: int
    #: The topic of the record (stored in clear beside it).
    topic: str
    #: The data subject whose key was destroyed.
    subject: str
    #: When the subject was erased, and the reason given (the tombstone's).
    erased_at: datetime
    reason: str | None = None

    @property
    def timestamp(self) -> datetime:
        """The event's own time was erased with it: the erasure's time stands in."""
        return self.erased_at

    def error(self) -> ConversationErasedError:
        """The error a reader that needs this record's content raises."""
        return ConversationErasedError(
            f"the content of conversation {self.originator_id} was erased (subject {self.subject!r})",
            conversation_id=self.originator_id,
            subject=self.subject,
            erased_at=self.erased_at,
            reason=self.reason,
        )

    def mutate(self, aggregate: Any) -> Any:
        """Folding an erased record (loading an erased conversation) raises
        ``ConversationErasedError``."""
        raise self.error()
