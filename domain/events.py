"""The events of contextledger: the base class and the ``Conversation``'s events.

Every event class names its ``TOPIC`` explicitly so that renaming or moving a class
never orphans stored events, and registers it so a fresh process resolves stored
topics without importing anything by module path. Events are facts: frozen, and
never changed once stored (a schema change adds ``class_version`` and an upcaster).

Stored logs name this module's path, so it stays at the top of the domain, beside
``client_ids``, ``placement`` and ``erasure`` (the other records a log holds), which
import it. May import: values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal, Protocol, Self
from uuid import UUID

from eventsourcing.utils import register_topic
from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from contextledger.domain.moved import register_moved_paths
from contextledger.domain.values.digests import event_seal
from contextledger.domain.values.errors import UsageError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.reduction import (
    Entry,
    SummaryLayer,
    SummaryLink,
    omit_unhidden,
    omit_unset_native,
)

__all__ = [
    "Committed",
    "ConversationEvent",
    "DomainEvent",
    "ForkOrigin",
    "Forked",
    "MessageAppended",
    "MessageEdited",
    "MessagesRetracted",
    "NativeSummaryReadable",
    "PolicyChanged",
    "SealedEvent",
    "Started",
    "SummarizationFailed",
    "SummaryCreated",
    "SummaryInvalidated",
    "SummaryProvenance",
    "SystemPromptChanged",
    "ThresholdReached",
    "ToolsChanged",
    "UsageRecorded",
    "fold_conversation_events_with",
    "omit_uncommitted",
]


#: The old paths of the domain's moved modules resolve wherever the events do.
register_moved_paths()


class DomainEvent(BaseModel):
    """An immutable fact. ``class_version`` + ``upcast_vN_vN+1`` evolve its schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

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
    """An event of a ``Conversation``: applying it folds it into the aggregate (the
    fold the aggregate's module handed over with ``fold_conversation_events_with``)."""

    def mutate(self, aggregate: Any) -> Any:
        fold = _fold
        if fold is None:
            raise UsageError(
                "conversation events are folded by contextledger.domain.conversation."
                "Conversation: import that module before applying them"
            )
        return fold(aggregate, self)


class _Fold(Protocol):
    def __call__(self, aggregate: Any, event: ConversationEvent, /) -> Any: ...


#: ``Conversation.apply``: set by the aggregate's own module, so that the events never
#: import the aggregate they are folded into (they are read, and topics resolved,
#: without it).
_fold: _Fold | None = None


def fold_conversation_events_with(fold: _Fold) -> None:
    """Make ``fold(aggregate, event)`` what ``ConversationEvent.mutate`` does (the
    aggregate's ``apply``: ``Started`` and ``Forked`` create the aggregate from None)."""
    global _fold
    _fold = fold


class SealedEvent(ConversationEvent):
    """An event whose fields are all covered by its ``seal`` (``digests.event_seal``):
    every event but ``MessageAppended``, whose message the digest chain covers and
    whose token counts ``verify`` recounts. Written by ``Conversation`` commands; an
    event stored before seals existed has none (``None``)."""

    seal: str | None = None

    def sealed(self) -> Self:
        """This event with its seal."""
        return self.model_copy(update={"seal": self.expected_seal()})

    def expected_seal(self) -> str:
        """The seal of this event's fields as they are now."""
        return event_seal(
            self.TOPIC, str(self.originator_id), self.originator_version, self.model_dump(mode="json")
        )


def omit_uncommitted(data: Any) -> Any:
    """``data`` (a dump) without ``salt`` and ``commitment`` when they are None: an
    event written before the chain committed to its content dumps (and so seals and
    snapshots) exactly as it did."""
    if isinstance(data, dict) and data.get("commitment", 0) is None:
        data.pop("commitment")
        data.pop("salt", None)
    return data


class Committed(BaseModel):
    """The fields of a link of the committed digest chain (``digests.commit``): the
    salt and the commitment to the content (None: written before, the link hashes the
    content itself)."""

    salt: str | None = None
    commitment: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_uncommitted(handler(self))


class SummaryProvenance(BaseModel):
    """Where a summary came from."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    model: str
    prompt_version: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float = 0.0


def keep_token_scope(policy: Any) -> None:
    """Upcast a stored policy written before ``token_scope`` existed: its token trigger
    counted the messages (and tools) only, so it is read back as ``messages``."""
    if isinstance(policy, dict) and policy.get("trigger_tokens") is not None:
        policy.setdefault("token_scope", "messages")


class Started(SealedEvent, Committed):
    TOPIC: ClassVar[str] = "contextledger.conversation.Started"
    #: v2: the policy has ``token_scope`` (v1 policies are read as ``messages``).
    class_version: ClassVar[int] = 2
    system_prompt: str | None
    system_tokens: int
    model: str
    policy: ReductionPolicy
    reply_priming: int = 3
    digest: str
    #: The application's own string key for the conversation (its id is derived from it).
    key: str | None = None
    #: Tool definitions sent with every model call (OpenAI ``tools`` format), and their cost.
    tools: tuple[dict[str, Any], ...] | None = None
    tools_tokens: int = 0

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        keep_token_scope(state.get("policy"))


def _entry(
    event: MessageAppended | MessageEdited,
    tool_name: str | None,
    items: tuple[dict[str, Any], ...] | None,
    original: dict[str, Any] | None = None,
    hidden: bool = False,
) -> Entry:
    """The window entry of a message-carrying event at its position and version."""
    if items is None and original is None:  # a chat message: its values are checked
        return Entry.of_checked(
            event.position,
            event.originator_version,
            event.message,
            event.tokens,
            event.placeholder_tokens,
            tool_name,
            hidden,
        )
    return Entry(
        position=event.position,
        version=event.originator_version,
        message=event.message,
        tokens=event.tokens,
        placeholder_tokens=event.placeholder_tokens,
        tool_name=tool_name,
        items=items,
        original=original,
        hidden=hidden,
    )


class MessageAppended(ConversationEvent, Committed):
    TOPIC: ClassVar[str] = "contextledger.conversation.MessageAppended"
    position: int
    message: Message
    tokens: int
    placeholder_tokens: int | None = None
    client_message_id: str | None = None
    digest: str
    #: The raw Responses-format items this message stands for (None: appended as a chat message).
    items: tuple[dict[str, Any], ...] | None = None
    #: The message as the framework that appended it spells it (a JSON object whose
    #: ``"format"`` names the framework), kept verbatim and never sent to the model
    #: (None: appended as a chat message or as items).
    original: dict[str, Any] | None = None
    #: True: a tool result the framework filtered from what the model sees. The
    #: working memory shows its placeholder, and the summarizer is given the
    #: placeholder too unless the policy's ``summarize_hidden`` is set. Left out of
    #: the stored form when False (so events from before it read and dump as they did).
    hidden: bool = False

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_uncommitted(omit_unhidden(self.hidden, handler(self)))

    def entry(self, tool_name: str | None = None) -> Entry:
        """The window entry this message becomes (``tool_name``: the call it answers)."""
        return _entry(self, tool_name, self.items, self.original, self.hidden)


class ThresholdReached(SealedEvent):
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


class SummaryCreated(SealedEvent):
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
    #: The provider format of a compaction the provider made (``"responses"``,
    #: ``"anthropic"``); None (and left out of the stored form) for contextledger's own.
    native: str | None = None
    #: A native compaction's own items or blocks, exactly as the provider gave them.
    payload: tuple[dict[str, Any], ...] | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_unset_native(handler(self))


class NativeSummaryReadable(SealedEvent):
    """The readable text of an opaque native summary made after it was recorded
    (``Settings.native_readable = "on_demand"``): the summary of ``summary_version``
    (in the log of ``summary_origin``; None: this one) is read as ``text`` by every
    format but its provider's own, at every version it stands at."""

    TOPIC: ClassVar[str] = "contextledger.conversation.NativeSummaryReadable"
    summary_version: int
    summary_origin: UUID | None = None
    #: The range that summary covers (as it recorded it).
    from_position: int
    through_position: int
    text: str
    tokens: int
    message_tokens: int
    provenance: SummaryProvenance


class SummarizationFailed(SealedEvent):
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
    #: The provider format of a native compaction that failed (it leaves the pending
    #: range, if any, to the policy's summarizer); None (left out) for the policy's own.
    native: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_unset_native(handler(self))


class PolicyChanged(SealedEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.PolicyChanged"
    #: v2: the policy has ``token_scope`` (v1 policies are read as ``messages``).
    class_version: ClassVar[int] = 2
    policy: ReductionPolicy
    policy_version: int
    #: Set when a fork restates the policy it starts with (``Conversation.restate_policy``):
    #: the last position of the history it inherited, which a remainder can no longer
    #: read from its erased first record (None: any other policy change).
    inherited_through: int | None = None

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        keep_token_scope(state.get("policy"))


class UsageRecorded(SealedEvent):
    TOPIC: ClassVar[str] = "contextledger.conversation.UsageRecorded"
    #: The position of the last message the provider had seen.
    through_position: int
    #: Every input token the call was billed for, cached ones included.
    prompt_tokens: int
    completion_tokens: int
    estimated_prompt_tokens: int
    #: Of ``prompt_tokens``, those read from the provider's prompt cache (None: not reported).
    cache_read_tokens: int | None = None
    #: Of ``prompt_tokens``, those written to the provider's prompt cache (None: not reported).
    cache_creation_tokens: int | None = None
    #: True: the conversation's token counts are estimates (a model with no local
    #: tokenizer), so ``prompt_tokens`` stands for the prefix the provider saw in the
    #: trigger and the totals until that prefix changes.
    calibrates: bool = False
    #: How the call's context stood to the reduction: ``hit``, served from the summary
    #: that stood; ``miss``, made while a range crossing the trigger waited for its
    #: summary (the context needed a new one); None: no summary was involved (or the
    #: event is older than the field).
    reduction: Literal["hit", "miss"] | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out of the stored form when unset: events from before these fields
        # existed dump (and so seal) exactly as they did.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("cache_read_tokens", "cache_creation_tokens", "reduction"):
                if data.get(name, 0) is None:
                    data.pop(name)
            if not data.get("calibrates", True):
                data.pop("calibrates")
        return data


class ToolsChanged(SealedEvent):
    """The tool definitions sent with the model calls from now on (None: no tools)."""

    TOPIC: ClassVar[str] = "contextledger.conversation.ToolsChanged"
    tools: tuple[dict[str, Any], ...] | None
    tools_tokens: int


class MessagesRetracted(SealedEvent, Committed):
    """Messages leave the working memory and all future summaries (the log keeps them).

    ``positions`` is the whole set, tool-call groups expanded; ``tokens`` what they
    cost. ``digest`` chains the previous digest and this retraction.
    """

    TOPIC: ClassVar[str] = "contextledger.conversation.MessagesRetracted"
    positions: tuple[int, ...]
    #: ``retract``, ``rewind``, ``pop`` or ``clear``: the command that retracted them.
    command: Literal["retract", "rewind", "pop", "clear"]
    reason: str | None = None
    tokens: int
    digest: str


class MessageEdited(SealedEvent, Committed):
    """The message at ``position`` is replaced by a new version (the old one stays in
    the log at ``replaces_version``)."""

    TOPIC: ClassVar[str] = "contextledger.conversation.MessageEdited"
    position: int
    message: Message
    tokens: int
    placeholder_tokens: int | None = None
    #: The version of the event that held the replaced message.
    replaces_version: int
    #: Tokens of the replaced message.
    replaced_tokens: int
    digest: str

    def entry(self, tool_name: str | None = None) -> Entry:
        """The window entry the new version becomes (``tool_name`` kept from the old;
        an edited message stands for no raw Responses items)."""
        return _entry(self, tool_name, None)


class SystemPromptChanged(SealedEvent, Committed):
    """The system prompt is replaced from this version on."""

    TOPIC: ClassVar[str] = "contextledger.conversation.SystemPromptChanged"
    system_prompt: str | None
    system_tokens: int
    digest: str


class SummaryInvalidated(SealedEvent):
    """Summaries made from a retracted or edited message no longer stand.

    Carries everything the fold needs: the summary layers that stand afterwards
    (``layers``, restored from the log where an earlier summary becomes the newest
    valid one) and the messages that come back into the window (``reopened``: their
    current versions, retracted ones left out).
    """

    TOPIC: ClassVar[str] = "contextledger.conversation.SummaryInvalidated"
    reason: str
    #: The version of the retraction or edit that invalidated them.
    trigger_version: int
    #: Versions of the ``SummaryCreated`` events that no longer stand.
    invalidated_versions: tuple[int, ...]
    layers: tuple[SummaryLayer, ...]
    reopened: tuple[Entry, ...]
    #: In a fork: the inherited summaries (their links name the log that holds them)
    #: that no longer stand here. Empty in events recorded before forks listed them.
    invalidated_inherited: tuple[SummaryLink, ...] = ()


class ForkOrigin(BaseModel):
    """Where a forked conversation's history comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    conversation_id: UUID
    version: int
    #: The last position the fork shares with its source.
    through_position: int


class Forked(SealedEvent):
    """The first event of a conversation forked from another at a version.

    ``state`` is the source's (bounded) state at that version, so the summaries of
    the shared prefix are reused and the digest chain continues from ``digest``.
    """

    TOPIC: ClassVar[str] = "contextledger.conversation.Forked"
    #: v2: the state's policy has ``token_scope`` (v1 policies are read as ``messages``).
    class_version: ClassVar[int] = 2
    origin: ForkOrigin
    key: str | None = None
    state: dict[str, Any]
    digest: str

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        inherited = state.get("state")
        if isinstance(inherited, dict):
            keep_token_scope(inherited.get("policy"))
