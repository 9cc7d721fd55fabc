"""The ``Conversation`` aggregate: events, fold, commands (in that order).

State is bounded by the unsummarized window: counters, the current summaries, the
pending range and the unsummarized messages. History lives only in the log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from contextledger.domain.errors import (
    ContextOverflowError,
    InvalidMessageError,
    InvalidPolicyError,
    StaleSummaryError,
    SummaryQualityError,
)
from contextledger.domain.events import DomainEvent
from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.reduction import (
    Entry,
    SummaryLayer,
    chain_digest,
    genesis_digest,
    placeholder_message,
    plan_range,
    summary_message,
)
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Conversation",
    "ConversationSnapshot",
    "ConversationState",
    "PendingRange",
    "SummaryProvenance",
]

#: A summary this short is accepted even when its input was shorter still.
_TINY_SUMMARY_TOKENS = 32

_ERROR_TEXT_PREFIXES = (
    "error",
    "i'm sorry",
    "i am sorry",
    "sorry, i",
    "as an ai",
    "i cannot",
    "i can't",
    "internal server error",
    "traceback",
)


class PendingRange(BaseModel):
    """A pinned range waiting for its summary (set by ThresholdReached)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold_version: int
    from_position: int
    through_position: int
    from_version: int
    through_version: int
    consolidate: bool = False
    attempts: int = 0


class SummaryProvenance(BaseModel):
    """Where a summary came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    prompt_version: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float = 0.0


class ConversationState(BaseModel):
    """Everything the aggregate knows. Snapshots store exactly this."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    system_prompt: str | None
    system_tokens: int
    model: str
    policy: ReductionPolicy
    policy_version: int = 1
    reply_priming: int = 3
    next_position: int = 0
    appended_tokens: int = 0
    digest: str
    summarized_through: int = -1
    summaries: list[SummaryLayer] = Field(default_factory=list)
    window: list[Entry] = Field(default_factory=list)
    #: Unanswered call ids of the current tool-call group (empty: no group open).
    open_calls: list[str] = Field(default_factory=list)
    #: Function names by call id for the current group (names tool placeholders).
    group_calls: dict[str, str] = Field(default_factory=dict)
    #: Index in ``window`` of the open group's assistant message.
    open_group_index: int | None = None
    pending: PendingRange | None = None
    #: Tool results before this position are shown as placeholders.
    placeholder_before: int = 0
    #: Window messages before this position are left out of the view (the cap).
    dropped_before: int = 0
    summaries_created: int = 0
    summarizer_calls: int = 0
    summarizer_failures: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    provider_prompt_tokens: int = 0
    provider_completion_tokens: int = 0


class Conversation:
    """An LLM conversation kept as an event-sourced aggregate."""

    # ------------------------------------------------------------------ events

    class Started(DomainEvent):
        TOPIC: ClassVar[str] = "contextledger.conversation.Started"
        system_prompt: str | None
        system_tokens: int
        model: str
        policy: ReductionPolicy
        reply_priming: int = 3
        digest: str

        def mutate(self, aggregate: Any) -> Conversation:
            conversation = Conversation(self.originator_id, self.timestamp)
            conversation.state = ConversationState(
                system_prompt=self.system_prompt,
                system_tokens=self.system_tokens,
                model=self.model,
                policy=self.policy,
                reply_priming=self.reply_priming,
                digest=self.digest,
            )
            conversation.version = self.originator_version
            return conversation

    class MessageAppended(DomainEvent):
        TOPIC: ClassVar[str] = "contextledger.conversation.MessageAppended"
        position: int
        message: Message
        tokens: int
        placeholder_tokens: int | None = None
        client_message_id: str | None = None
        digest: str

        def mutate(self, aggregate: Any) -> Conversation:
            return _fold(aggregate, self)

    class ThresholdReached(DomainEvent):
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

        def mutate(self, aggregate: Any) -> Conversation:
            return _fold(aggregate, self)

    class SummaryCreated(DomainEvent):
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

        def mutate(self, aggregate: Any) -> Conversation:
            return _fold(aggregate, self)

    class SummarizationFailed(DomainEvent):
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

        def mutate(self, aggregate: Any) -> Conversation:
            return _fold(aggregate, self)

    class PolicyChanged(DomainEvent):
        TOPIC: ClassVar[str] = "contextledger.conversation.PolicyChanged"
        policy: ReductionPolicy
        policy_version: int

        def mutate(self, aggregate: Any) -> Conversation:
            return _fold(aggregate, self)

    class UsageRecorded(DomainEvent):
        TOPIC: ClassVar[str] = "contextledger.conversation.UsageRecorded"
        #: The position of the last message the provider had seen.
        through_position: int
        prompt_tokens: int
        completion_tokens: int
        estimated_prompt_tokens: int

        def mutate(self, aggregate: Any) -> Conversation:
            return _fold(aggregate, self)

    # ------------------------------------------------------------ construction

    def __init__(self, conversation_id: UUID, created_on: datetime) -> None:
        self.id = conversation_id
        self.version = 0
        self.created_on = created_on
        self.modified_on = created_on
        self.state: ConversationState
        self._pending_events: list[DomainEvent] = []

    @classmethod
    def start(
        cls,
        conversation_id: UUID,
        *,
        system_prompt: str | None,
        system_tokens: int,
        model: str,
        policy: ReductionPolicy,
        reply_priming: int,
        at: datetime,
    ) -> Conversation:
        """Command: begin a conversation."""
        if not model or not isinstance(model, str):
            raise InvalidMessageError("model must be a non-empty string")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise InvalidMessageError("system_prompt must be a string or None")
        cap = policy.max_context_tokens
        if cap is not None and system_tokens + reply_priming >= cap:
            raise InvalidPolicyError(
                f"max_context_tokens ({cap}) leaves no room after the system prompt "
                f"({system_tokens} tokens)",
                conversation_id=conversation_id,
            )
        event = cls.Started(
            originator_id=conversation_id,
            originator_version=1,
            timestamp=at,
            system_prompt=system_prompt,
            system_tokens=system_tokens,
            model=model,
            policy=policy,
            reply_priming=reply_priming,
            digest=genesis_digest(str(conversation_id), system_prompt, model),
        )
        conversation = event.mutate(None)
        conversation._pending_events.append(event)
        return conversation

    def collect_events(self) -> list[DomainEvent]:
        events, self._pending_events = self._pending_events, []
        return events

    def _trigger(self, event_class: type[DomainEvent], at: datetime, **fields: Any) -> None:
        event = event_class(
            originator_id=self.id, originator_version=self.version + 1, timestamp=at, **fields
        )
        event.mutate(self)
        self._pending_events.append(event)

    # ------------------------------------------------------------------ queries

    @property
    def policy(self) -> ReductionPolicy:
        return self.state.policy

    def tool_name_for(self, tool_call_id: str | None) -> str | None:
        """The function an open call id names (None if not open)."""
        if tool_call_id is None:
            return None
        return self.state.group_calls.get(tool_call_id)

    def check_message(self, message: Message) -> None:
        """Raise ``InvalidMessageError`` if ``message`` cannot come next."""
        s = self.state
        if message.role == "tool":
            if not s.open_calls:
                raise InvalidMessageError(
                    "a tool message must answer a call of the immediately preceding "
                    "assistant tool-call message, and none is open",
                    conversation_id=self.id,
                    tool_call_id=message.tool_call_id,
                )
            if message.tool_call_id not in s.open_calls:
                answered = message.tool_call_id in s.group_calls
                raise InvalidMessageError(
                    "this tool call was already answered"
                    if answered
                    else "tool_call_id does not name an open call of the preceding assistant message",
                    conversation_id=self.id,
                    tool_call_id=message.tool_call_id,
                    open_calls=list(s.open_calls),
                )
        elif s.open_calls:
            raise InvalidMessageError(
                f"the assistant's tool calls {list(s.open_calls)} must all be answered "
                f"before a {message.role} message",
                conversation_id=self.id,
                open_calls=list(s.open_calls),
            )

    def visible_entries(self) -> list[Entry]:
        """Window entries the working memory shows (closed groups, not dropped)."""
        s = self.state
        end = s.open_group_index if s.open_group_index is not None else len(s.window)
        return [e for e in s.window[:end] if e.position >= s.dropped_before]

    def working_memory(self) -> tuple[list[Message], int]:
        """The context the model is sent next, and what its prompt costs in tokens."""
        s = self.state
        messages: list[Message] = []
        tokens = s.reply_priming
        if s.system_prompt is not None:
            messages.append(Message(role="system", content=s.system_prompt))
            tokens += s.system_tokens
        for layer in s.summaries:
            messages.append(summary_message(layer.from_position, layer.through_position, layer.text))
            tokens += layer.message_tokens
        for entry in self.visible_entries():
            if _is_placeholder(s, entry):
                messages.append(placeholder_message(entry))
                tokens += entry.placeholder_tokens or 0
            else:
                messages.append(entry.message)
                tokens += entry.tokens
        return messages, tokens

    def context_tokens(self) -> int:
        return _view_tokens(self.state, self.visible_entries())

    @property
    def full_history_tokens(self) -> int:
        """What sending every message ever appended would cost (no reduction)."""
        s = self.state
        return s.reply_priming + (s.system_tokens if s.system_prompt is not None else 0) + s.appended_tokens

    def pending_messages_for_summary(self) -> list[Entry]:
        """Entries of the pending range (the summarizer's input besides the summary)."""
        p = self.state.pending
        if p is None:
            return []
        return [e for e in self.state.window if p.from_position <= e.position <= p.through_position]

    def previous_summary_text(self) -> str | None:
        """The summary a new one extends (all layers joined when consolidating)."""
        s = self.state
        if not s.summaries:
            return None
        if s.policy.summary_mode == "single" or (s.pending and s.pending.consolidate):
            return "\n\n".join(layer.text for layer in s.summaries)
        return None

    # ----------------------------------------------------------------- commands

    def append(
        self,
        message: Message,
        *,
        tokens: int,
        placeholder_tokens: int | None,
        client_message_id: str | None,
        at: datetime,
    ) -> int:
        """Command: append a message; may also pin a range (ThresholdReached)."""
        self.check_message(message)
        s = self.state
        cap = s.policy.max_context_tokens
        if cap is not None:
            fixed = _fixed_tokens(s)
            group = tokens
            if message.role == "tool" and s.open_group_index is not None:
                group += sum(e.tokens for e in s.window[s.open_group_index :])
            if fixed + group > cap:
                raise ContextOverflowError(
                    f"this message makes the newest turn {group} tokens; with the system "
                    f"prompt and summaries ({fixed}) it exceeds max_context_tokens ({cap}): "
                    "truncate it",
                    conversation_id=self.id,
                    tokens=tokens,
                )
        position = s.next_position
        self._trigger(
            Conversation.MessageAppended,
            at,
            position=position,
            message=message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            client_message_id=client_message_id,
            digest=chain_digest(s.digest, message),
        )
        self._maybe_pin_range(at)
        return position

    def record_summary(
        self,
        *,
        from_position: int,
        through_position: int,
        text: str,
        tokens: int,
        message_tokens: int,
        source_digest: str,
        provenance: SummaryProvenance,
        at: datetime,
    ) -> None:
        """Command: record the summary of the pending range; stale ones are rejected."""
        pending = self._require_pending(from_position, through_position)
        s = self.state
        stripped = text.strip()
        if not stripped:
            raise SummaryQualityError("the summary is empty", conversation_id=self.id)
        if stripped.lower().startswith(_ERROR_TEXT_PREFIXES):
            raise SummaryQualityError(
                "the summary reads like an error or a refusal", conversation_id=self.id
            )
        if tokens > s.policy.max_summary_tokens:
            raise SummaryQualityError(
                f"the summary has {tokens} tokens, over max_summary_tokens "
                f"({s.policy.max_summary_tokens})",
                conversation_id=self.id,
            )
        source_tokens = sum(e.tokens for e in self.pending_messages_for_summary())
        if self.previous_summary_text() is not None:
            source_tokens += sum(layer.message_tokens for layer in s.summaries)
        if tokens > max(source_tokens, _TINY_SUMMARY_TOKENS):
            raise SummaryQualityError(
                f"the summary ({tokens} tokens) is longer than its input "
                f"({source_tokens} tokens)",
                conversation_id=self.id,
            )
        cap = s.policy.max_context_tokens
        if cap is not None:
            layers = _layers_after(s, pending, from_position, through_position, "", message_tokens)
            fixed = s.reply_priming + (s.system_tokens if s.system_prompt is not None else 0)
            fixed += sum(layer.message_tokens for layer in layers)
            newest = _newest_group_tokens(s, after=through_position)
            if fixed + newest > cap:
                raise SummaryQualityError(
                    f"with this summary the context cannot fit max_context_tokens ({cap})",
                    conversation_id=self.id,
                )
        covers_from = (
            0
            if s.policy.summary_mode == "single" or pending.consolidate
            else from_position
        )
        self._trigger(
            Conversation.SummaryCreated,
            at,
            from_position=from_position,
            through_position=through_position,
            covers_from=covers_from,
            text=text,
            tokens=tokens,
            message_tokens=message_tokens,
            source_digest=source_digest,
            threshold_version=pending.threshold_version,
            consolidated=pending.consolidate,
            provenance=provenance,
            policy_version=s.policy_version,
        )
        self._maybe_pin_range(at)

    def record_summarization_failure(
        self,
        *,
        from_position: int,
        through_position: int,
        kind: str,
        error: str,
        retryable: bool,
        called_provider: bool,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        at: datetime,
    ) -> int:
        """Command: record a failed attempt for the pending range; returns the attempt number."""
        pending = self._require_pending(from_position, through_position)
        attempt = pending.attempts + 1
        self._trigger(
            Conversation.SummarizationFailed,
            at,
            threshold_version=pending.threshold_version,
            from_position=from_position,
            through_position=through_position,
            kind=kind,
            error=error[:2000],
            attempt=attempt,
            retryable=retryable,
            called_provider=called_provider,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        return attempt

    def change_policy(self, policy: ReductionPolicy, *, at: datetime) -> bool:
        """Command: adopt a new policy (from the next event on). False if unchanged."""
        s = self.state
        if policy == s.policy:
            return False
        cap = policy.max_context_tokens
        if cap is not None and _fixed_tokens(s) + _newest_group_tokens(s, after=-1) > cap:
            raise InvalidPolicyError(
                f"max_context_tokens ({cap}) cannot hold the system prompt, summaries and "
                "newest turn",
                conversation_id=self.id,
            )
        self._trigger(
            Conversation.PolicyChanged, at, policy=policy, policy_version=s.policy_version + 1
        )
        self._maybe_pin_range(at)
        return True

    def record_usage(
        self, *, prompt_tokens: int, completion_tokens: int, at: datetime
    ) -> None:
        """Command: record what the provider reported for the latest model call."""
        if prompt_tokens < 0 or completion_tokens < 0:
            raise InvalidMessageError("usage tokens must not be negative", conversation_id=self.id)
        self._trigger(
            Conversation.UsageRecorded,
            at,
            through_position=self.state.next_position - 1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            estimated_prompt_tokens=self.context_tokens(),
        )

    def _require_pending(self, from_position: int, through_position: int) -> PendingRange:
        pending = self.state.pending
        if (
            pending is None
            or pending.from_position != from_position
            or pending.through_position != through_position
        ):
            raise StaleSummaryError(
                "the range is not the conversation's pending range (late or duplicate result)",
                conversation_id=self.id,
                from_position=from_position,
                through_position=through_position,
                pending=(pending.from_position, pending.through_position) if pending else None,
            )
        return pending

    def _maybe_pin_range(self, at: datetime) -> None:
        s = self.state
        if s.pending is not None or not s.policy.summarizes:
            return
        planned = plan_range(s.window, s.policy, open_group_index=s.open_group_index)
        if planned is None:
            return
        consolidate = (
            s.policy.summary_mode == "layered"
            and sum(layer.message_tokens for layer in s.summaries) > s.policy.layered_max_tokens
        )
        self._trigger(
            Conversation.ThresholdReached,
            at,
            consolidate=consolidate,
            policy_version=s.policy_version,
            **planned.model_dump(),
        )


# --------------------------------------------------------------------- the fold


def _fold(conversation: Conversation | None, event: DomainEvent) -> Conversation:
    if conversation is None:
        raise ValueError(f"{type(event).__name__} before Started")
    if event.originator_version != conversation.version + 1:
        raise ValueError(
            f"event version {event.originator_version} does not follow {conversation.version}"
        )
    s = conversation.state
    if isinstance(event, Conversation.MessageAppended):
        _apply_message(s, event)
    elif isinstance(event, Conversation.ThresholdReached):
        s.pending = PendingRange(
            threshold_version=event.originator_version,
            from_position=event.from_position,
            through_position=event.through_position,
            from_version=event.from_version,
            through_version=event.through_version,
            consolidate=event.consolidate,
        )
    elif isinstance(event, Conversation.SummaryCreated):
        _apply_summary(s, event)
    elif isinstance(event, Conversation.SummarizationFailed):
        if s.pending is not None:
            s.pending = s.pending.model_copy(update={"attempts": event.attempt})
        s.summarizer_failures += 1
        if event.called_provider:
            s.summarizer_calls += 1
            s.summarizer_input_tokens += event.input_tokens or 0
            s.summarizer_output_tokens += event.output_tokens or 0
    elif isinstance(event, Conversation.PolicyChanged):
        s.policy = event.policy
        s.policy_version = event.policy_version
        _refresh_view(s)
    elif isinstance(event, Conversation.UsageRecorded):
        s.provider_prompt_tokens += event.prompt_tokens
        s.provider_completion_tokens += event.completion_tokens
    conversation.version = event.originator_version
    conversation.modified_on = event.timestamp
    return conversation


def _apply_message(s: ConversationState, event: Conversation.MessageAppended) -> None:
    message = event.message
    tool_name = None
    if message.role == "tool":
        tool_name = s.group_calls.get(message.tool_call_id or "")
        s.open_calls.remove(message.tool_call_id or "")
    else:
        s.group_calls = {}
        s.open_calls = []
        s.open_group_index = None
    s.window.append(
        Entry(
            position=event.position,
            version=event.originator_version,
            message=message,
            tokens=event.tokens,
            placeholder_tokens=event.placeholder_tokens,
            tool_name=tool_name,
        )
    )
    if message.tool_calls:
        s.group_calls = {c.id: c.function.name for c in message.tool_calls}
        s.open_calls = [c.id for c in message.tool_calls]
        s.open_group_index = len(s.window) - 1
    elif message.role == "tool" and not s.open_calls:
        s.open_group_index = None
    s.next_position = event.position + 1
    s.appended_tokens += event.tokens
    s.digest = event.digest
    if s.open_group_index is None:
        _refresh_view(s)


def _apply_summary(s: ConversationState, event: Conversation.SummaryCreated) -> None:
    pending = s.pending
    layers = _layers_after(
        s, pending, event.from_position, event.through_position, event.text, event.message_tokens
    )
    s.summaries = layers
    s.summarized_through = event.through_position
    cut = 0
    while cut < len(s.window) and s.window[cut].position <= event.through_position:
        cut += 1
    s.window = s.window[cut:]
    if s.open_group_index is not None:
        s.open_group_index -= cut
    s.pending = None
    s.summaries_created += 1
    s.summarizer_calls += 1
    s.summarizer_input_tokens += event.provenance.input_tokens or 0
    s.summarizer_output_tokens += event.provenance.output_tokens or 0
    # A summary changes the prefix anyway: the cap's batches start afresh.
    s.dropped_before = event.through_position + 1
    s.placeholder_before = max(s.placeholder_before, event.through_position + 1)
    _refresh_view(s)


def _layers_after(
    s: ConversationState,
    pending: PendingRange | None,
    from_position: int,
    through_position: int,
    text: str,
    message_tokens: int,
) -> list[SummaryLayer]:
    single = s.policy.summary_mode == "single" or (pending is not None and pending.consolidate)
    if single:
        return [
            SummaryLayer(
                from_position=0,
                through_position=through_position,
                text=text,
                message_tokens=message_tokens,
            )
        ]
    return [
        *s.summaries,
        SummaryLayer(
            from_position=from_position,
            through_position=through_position,
            text=text,
            message_tokens=message_tokens,
        ),
    ]


def _is_placeholder(s: ConversationState, entry: Entry) -> bool:
    return (
        entry.message.role == "tool"
        and entry.position < s.placeholder_before
        and entry.placeholder_tokens is not None
    )


def _fixed_tokens(s: ConversationState) -> int:
    system = s.system_tokens if s.system_prompt is not None else 0
    return s.reply_priming + system + sum(layer.message_tokens for layer in s.summaries)


def _view_tokens(s: ConversationState, entries: list[Entry]) -> int:
    total = _fixed_tokens(s)
    for entry in entries:
        total += (entry.placeholder_tokens or 0) if _is_placeholder(s, entry) else entry.tokens
    return total


def _newest_group_tokens(s: ConversationState, *, after: int) -> int:
    """Tokens of the newest closed group in the window with positions above ``after``."""
    end = s.open_group_index if s.open_group_index is not None else len(s.window)
    total = 0
    for index in range(end - 1, -1, -1):
        entry = s.window[index]
        if entry.position <= after:
            break
        total += entry.tokens
        if entry.starts_group:
            break
    return total


def _refresh_view(s: ConversationState) -> None:
    """Move the placeholder and cap lines, in batches (hysteresis), never every turn."""
    keep = s.policy.keep_tool_results
    visible_end = s.open_group_index if s.open_group_index is not None else len(s.window)
    if keep is not None:
        full = [
            e
            for e in s.window[:visible_end]
            if e.message.role == "tool"
            and e.position >= s.placeholder_before
            and e.placeholder_tokens is not None
        ]
        if len(full) > 2 * keep:
            s.placeholder_before = full[-keep].position
    cap = s.policy.max_context_tokens
    if cap is None:
        return
    visible = [e for e in s.window[:visible_end] if e.position >= s.dropped_before]
    total = _view_tokens(s, visible)
    if total <= cap:
        return
    fixed = _fixed_tokens(s)
    low_water = cap - max(0, cap - fixed) // 4
    # Drop whole groups from the front until under the low-water mark, never the newest.
    starts = [i for i, e in enumerate(visible) if e.starts_group]
    if len(starts) < 2:
        return
    dropped_tokens = 0
    previous = 0
    for start in starts[1:]:
        dropped_tokens += _view_tokens(s, visible[previous:start]) - fixed
        previous = start
        s.dropped_before = visible[start].position
        if total - dropped_tokens <= low_water:
            break


class ConversationSnapshot(DomainEvent):
    """The whole (bounded) state of a conversation at a version."""

    TOPIC: ClassVar[str] = "contextledger.conversation.Snapshot"

    created_on: datetime
    state: ConversationState

    @classmethod
    def take(cls, conversation: Conversation) -> ConversationSnapshot:
        return cls(
            originator_id=conversation.id,
            originator_version=conversation.version,
            timestamp=conversation.modified_on,
            created_on=conversation.created_on,
            state=conversation.state,
        )

    def mutate(self, aggregate: Any) -> Conversation:
        conversation = Conversation(self.originator_id, self.created_on)
        conversation.state = self.state.model_copy(deep=True)
        conversation.version = self.originator_version
        conversation.modified_on = self.timestamp
        return conversation
