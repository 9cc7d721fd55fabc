"""What a reader gets for a stored record whose content was erased (crypto-shredded).

Each event and snapshot of a data subject is encrypted under the subject's data key;
erasing the subject destroys that key and leaves a tombstone (when, why). The records
stay in the log, unreadable. The mapper gives an ``ErasedEvent`` for each of them
instead of raising: a follower reading a batch of the notification log must go on past
them, for every other conversation's sake. Folding one into an aggregate (loading the
erased conversation) raises ``ConversationErasedError``.

``Erasure`` is the record of one subject's erasure that followers of the log see: a
tiny aggregate per subject (its id derives from the subject) whose one event,
``ContentErased``, says who and what was erased, when and why, and nothing of the
content. It is stored in clear (the subject mapper writes it unencrypted), so that it
stays readable after the key is gone; read models delete what they hold for the
conversations it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID, uuid5

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from contextledger.domain.events import DomainEvent
from contextledger.domain.values.errors import ConversationErasedError

__all__ = ["ContentErased", "ErasedEvent", "ErasedLog", "ErasedRecord", "Erasure"]

_NAMESPACE = UUID("8f0d7c61-2b3e-4f8a-9c55-3d1e6b7a0e42")


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
    #: Every erased subject whose key the record names (a record carrying several
    #: subjects' content is under all their keys); ``subject`` is the first of them.
    subjects: tuple[str, ...] = ()

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


class ErasedRecord(BaseModel):
    """The structure of one erased record, kept in clear so that ``verify`` can still
    check it: its place, topic and time, the SHA-256 of its stored bytes, and for a
    link of the digest chain that commits to content, the link's structure,
    commitment and digest (``domain/commands/links.py``). Nothing of the content."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int
    topic: str
    #: None: written while the erasure was under way, after its structure was taken.
    timestamp: datetime | None = None
    #: SHA-256 (hex) of the record's stored (encrypted) state.
    stored: str
    structure: str | None = None
    commitment: str | None = None
    digest: str | None = None
    #: A summary's range: (covers_from, from_position, through_position).
    summary: tuple[int, int, int] | None = None
    #: A fork's origin: its source, the source's version and its last shared position.
    origin: UUID | None = None
    origin_version: int | None = None
    through_position: int | None = None


class ErasedLog(BaseModel):
    """The erased records of one conversation, in version order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversation_id: UUID
    records: tuple[ErasedRecord, ...]


class ContentErased(DomainEvent):
    """A data subject was erased: its key destroyed, its conversations unreadable.
    No content: the subject, the conversations, the time (``timestamp``) and the
    reason, and the structure of each erased record (``structure``)."""

    TOPIC: ClassVar[str] = "contextledger.erasure.ContentErased"
    subject: str
    #: The subject's conversations.
    conversations: tuple[UUID, ...]
    #: Forks of other subjects whose inherited history (the subject's) was erased.
    forks: tuple[UUID, ...] = ()
    reason: str
    #: The erased records' structure, per conversation, taken before the key was
    #: destroyed (empty, and left out of the stored form: an erasure recorded before).
    structure: tuple[ErasedLog, ...] = ()

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and not data.get("structure", 1):
            data.pop("structure")
        return data

    def structure_of(self, conversation_id: UUID) -> ErasedLog | None:
        """The erased records of ``conversation_id`` as this erasure recorded them."""
        return next((log for log in self.structure if log.conversation_id == conversation_id), None)

    def mutate(self, aggregate: Any) -> Erasure:
        return Erasure(self)

    @property
    def erased(self) -> tuple[UUID, ...]:
        """Every conversation whose content (or inherited history) this erased."""
        return self.conversations + self.forks


class Erasure:
    """The record of one subject's erasure (see the module doc)."""

    def __init__(self, event: ContentErased) -> None:
        self.id = event.originator_id
        self.version = 1
        self.record = event
        self._pending_events: list[DomainEvent] = []

    @staticmethod
    def id_for(subject: str) -> UUID:
        return uuid5(_NAMESPACE, subject)

    @classmethod
    def record_of(
        cls,
        subject: str,
        conversations: tuple[UUID, ...],
        forks: tuple[UUID, ...],
        *,
        at: datetime,
        reason: str,
        structure: tuple[ErasedLog, ...] = (),
    ) -> Erasure:
        event = ContentErased(
            originator_id=cls.id_for(subject),
            originator_version=1,
            timestamp=at,
            subject=subject,
            conversations=conversations,
            forks=forks,
            reason=reason,
            structure=structure,
        )
        erasure = event.mutate(None)
        erasure._pending_events.append(event)
        return erasure

    def collect_events(self) -> list[DomainEvent]:
        events, self._pending_events = self._pending_events, []
        return events
