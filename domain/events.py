"""The events of contextledger: the base class and the ``Conversation``'s events.

Every event class names its ``TOPIC`` explicitly so that renaming or moving a class
never orphans stored events, and registers it so a fresh process resolves stored
topics without importing anything by module path. Events are facts: frozen, and
never changed once stored (a schema change adds ``class_version`` and an upcaster).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from eventsourcing.utils import register_topic
from pydantic import BaseModel, ConfigDict

from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy

__all__ = [
    "ConversationEvent",
    "DomainEvent",
    "MessageAppended",
    "PolicyChanged",
    "Started",
    "SummarizationFailed",
    "SummaryCreated",
    "SummaryProvenance",
    "ThresholdReached",
    "UsageRecorded",
]


class DomainEvent(BaseModel):
    """An immutable fact. ``class_version`` + ``upcast_vN_vN+1`` evolve its schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    TOPIC: ClassVar[str] = ""
    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        topic = cls.__dict__.get("TOPIC")
        if topic:
            register_topic(topic, cls)

    def mutate(self, aggregate: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError


class ConversationEvent(DomainEvent):
    """An event of a ``Conversation``: applying it folds it into the aggregate."""

    def mutate(self, aggregate: Any) -> Any:
        from contextledger.domain.conversation import Conversation

        return Conversation.apply(aggregate, self)


class SummaryProvenance(BaseModel):
    """Where a summary came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    prompt_version: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float = 0.0



class Started(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.Started"
    system_prompt: str | None
    system_tokens: int
    model: str
    policy: ReductionPolicy
    reply_priming: int = 3
    digest: str


class MessageAppended(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.MessageAppended"
    position: int
    message: Message
    tokens: int
    placeholder_tokens: int | None = None
    client_message_id: str | None = None
    digest: str
    #: The raw Responses-format items this message stands for (None: appended as a chat message).
    items: tuple[dict[str, Any], ...] | None = None


class ThresholdReached(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.ThresholdReached"
    limit: Literal["messages", "tokens", "messages+tokens"]
    unsummarized_messages: int
    unsummarized_tokens: int
    from_position: int
    through_position: int
    from_version: int
    through_version: int
    consolidate: bool = False
    policy_version: int


class SummaryCreated(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.SummaryCreated"
    from_position: int
    through_position: int
    #: First position the new summary stands for (0 in single mode).
    covers_from: int
    text: str
    tokens: int
    message_tokens: int
    source_digest: str
    threshold_version: int
    consolidated: bool = False
    provenance: SummaryProvenance
    policy_version: int


class SummarizationFailed(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.SummarizationFailed"
    threshold_version: int
    from_position: int
    through_position: int
    kind: str
    error: str
    attempt: int
    retryable: bool
    #: True when the provider was called (it counts as a summarizer call).
    called_provider: bool = True
    input_tokens: int | None = None
    output_tokens: int | None = None


class PolicyChanged(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.PolicyChanged"
    policy: ReductionPolicy
    policy_version: int


class UsageRecorded(ConversationEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.UsageRecorded"
    #: The position of the last message the provider had seen.
    through_position: int
    prompt_tokens: int
    completion_tokens: int
    estimated_prompt_tokens: int
