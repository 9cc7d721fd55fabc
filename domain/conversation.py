"""The ``Conversation`` aggregate: its commands and the queries over its state.

The events are in ``contextledger.domain.events`` (reachable here as nested names,
``Conversation.MessageAppended``), the state and its fold in
``contextledger.domain.state``. Commands check their invariants, then trigger events;
a command that changes nothing emits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from contextledger.domain import events
from contextledger.domain.budget import check_budget, keep_offset, trigger_extra
from contextledger.domain.digests import chain_digest, genesis_digest
from contextledger.domain.editing import EditCommands
from contextledger.domain.errors import (
    ContextOverflowError,
    InvalidMessageError,
    InvalidPolicyError,
    LogDamagedError,
    StaleSummaryError,
    SummaryQualityError,
)
from contextledger.domain.events import (
    ConversationEvent,
    DomainEvent,
    Forked,
    MessageAppended,
    PolicyChanged,
    Started,
    SummarizationFailed,
    SummaryCreated,
    SummaryProvenance,
    ThresholdReached,
    ToolsChanged,
    UsageRecorded,
)
from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.redaction import provider_text
from contextledger.domain.reduction import (
    Entry,
    SummaryLayer,
    placeholder_message,
    plan_range,
    summary_message,
    trigger_limit,
)
from contextledger.domain.state import (
    ConversationState,
    PendingRange,
    apply_event,
    fixed_tokens,
    folds_previous,
    gap_run,
    initial_state,
    is_placeholder,
    layers_after,
    newest_group_tokens,
    summaries_tokens,
    tail_index,
    tail_tokens,
    view_tokens,
    visible_entries,
)
from contextledger.domain.tools import ToolDefinitions
from contextledger.domain.validation import check_count, check_text

__all__ = [
    "Conversation",
    "ConversationSnapshot",
    "ConversationState",
    "PendingRange",
    "SummaryFailure",
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



@dataclass(frozen=True)
class SummaryFailure:
    """One failed summarization attempt, as recorded in ``SummarizationFailed``.

    ``kind`` names the failure (an error class name, ``"quality"``, ...), ``error``
    says what happened (one line of at most 2,000 characters, control characters
    escaped and anything like an API key masked: ``redaction.provider_text``), ``retryable`` whether trying
    again may help, ``called_provider`` whether a provider was called (and may have
    charged for it), with the tokens it reported when it did.
    """

    kind: str
    error: str
    retryable: bool
    called_provider: bool
    input_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:  # text from a provider: escaped, secrets masked
        object.__setattr__(self, "error", provider_text(self.error))


class Conversation(EditCommands):
    """An LLM conversation kept as an event-sourced aggregate."""

    # The events, by their nested names (their topics are pinned in the events module).
    Started: ClassVar[type[events.Started]] = events.Started
    MessageAppended: ClassVar[type[events.MessageAppended]] = events.MessageAppended
    ThresholdReached: ClassVar[type[events.ThresholdReached]] = events.ThresholdReached
    SummaryCreated: ClassVar[type[events.SummaryCreated]] = events.SummaryCreated
    SummarizationFailed: ClassVar[type[events.SummarizationFailed]] = events.SummarizationFailed
    PolicyChanged: ClassVar[type[events.PolicyChanged]] = events.PolicyChanged
    UsageRecorded: ClassVar[type[events.UsageRecorded]] = events.UsageRecorded
    ToolsChanged: ClassVar[type[events.ToolsChanged]] = events.ToolsChanged
    MessagesRetracted: ClassVar[type[events.MessagesRetracted]] = events.MessagesRetracted
    MessageEdited: ClassVar[type[events.MessageEdited]] = events.MessageEdited
    SystemPromptChanged: ClassVar[type[events.SystemPromptChanged]] = events.SystemPromptChanged
    SummaryInvalidated: ClassVar[type[events.SummaryInvalidated]] = events.SummaryInvalidated
    Forked: ClassVar[type[events.Forked]] = events.Forked


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
        key: str | None = None,
        tools: ToolDefinitions | None = None,
        tools_tokens: int = 0,
    ) -> Conversation:
        """Command: begin a conversation (``key``: the application's own name for it;
        ``tools``: the tool definitions sent with every call, costing ``tools_tokens``)."""
        check_text(model, "model", empty=False, conversation_id=conversation_id)
        check_text(system_prompt, "system_prompt", optional=True, conversation_id=conversation_id)
        cap = policy.max_context_tokens
        if cap is not None and system_tokens + reply_priming + tools_tokens >= cap:
            raise InvalidPolicyError(
                f"max_context_tokens ({cap}) leaves no room after the system prompt ({system_tokens} "
                "tokens)" + (f" and the tools ({tools_tokens} tokens)" if tools_tokens else ""),
                conversation_id=conversation_id,
            )
        check_budget(policy, tools_tokens=tools_tokens if tools else 0, reply_priming=reply_priming,
                     system_tokens=system_tokens if system_prompt is not None else 0,
                     conversation_id=conversation_id)
        event = Started(
            originator_id=conversation_id,
            originator_version=1,
            timestamp=at,
            system_prompt=system_prompt,
            system_tokens=system_tokens,
            model=model,
            policy=policy,
            reply_priming=reply_priming,
            digest=genesis_digest(str(conversation_id), system_prompt, model),
            key=key,
            tools=tools,
            tools_tokens=tools_tokens if tools else 0,
        ).sealed()
        conversation = cls.apply(None, event)
        conversation._pending_events.append(event)
        return conversation

    def collect_events(self) -> list[DomainEvent]:
        events, self._pending_events = self._pending_events, []
        return events

    @classmethod
    def apply(cls, conversation: Conversation | None, event: ConversationEvent) -> Conversation:
        """Fold ``event`` into ``conversation`` (``Started`` creates it)."""
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
        event = event_class(
            originator_id=self.id, originator_version=self.version + 1, timestamp=at, **fields
        )
        if isinstance(event, events.SealedEvent):
            event = event.sealed()
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
        return visible_entries(self.state)

    def working_memory(self) -> tuple[list[Message], int]:
        """The context the model is sent next, and what its prompt costs in tokens.

        Summaries stand where the policy places them: as system messages after the
        system prompt (the default), as user messages, or merged into the system
        prompt. As messages, each stands where its range is, so a gap an invalidated
        layer reopened between valid layers keeps its order.
        """
        s = self.state
        messages: list[Message] = []
        tokens = s.reply_priming + s.tools_tokens + summaries_tokens(s)
        if s.system_prompt is not None:
            tokens += s.system_tokens
        placement = s.policy.summary_placement
        layers = list(s.summaries)
        if placement == "system_prompt" and layers:
            parts = [] if s.system_prompt is None else [s.system_prompt]
            parts.extend(
                str(summary_message(x.from_position, x.through_position, x.text).content) for x in layers
            )
            messages.append(Message(role="system", content="\n\n".join(parts)))
            layers = []
        elif s.system_prompt is not None:
            messages.append(Message(role="system", content=s.system_prompt))
        role = "user" if placement == "user_message" else "system"

        def summary(layer: SummaryLayer) -> Message:
            rendered = summary_message(layer.from_position, layer.through_position, layer.text)
            return Message(role=role, content=rendered.content)

        for entry in self.visible_entries():
            while layers and layers[0].from_position < entry.position:
                messages.append(summary(layers.pop(0)))
            if is_placeholder(s, entry):
                messages.append(placeholder_message(entry))
                tokens += entry.placeholder_tokens or 0
            else:
                messages.append(entry.message)
                tokens += entry.tokens
        messages.extend(summary(layer) for layer in layers)
        return messages, tokens

    def context_tokens(self) -> int:
        return view_tokens(self.state, self.visible_entries())

    @property
    def full_history_tokens(self) -> int:
        """What sending every message ever appended would cost (no reduction)."""
        s = self.state
        system = s.system_tokens if s.system_prompt is not None else 0
        return s.reply_priming + s.tools_tokens + system + s.appended_tokens

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
        if folds_previous(s, s.pending):
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
        items: tuple[dict[str, Any], ...] | None = None,
        original: dict[str, Any] | None = None,
        hidden: bool = False,
    ) -> int:
        """Command: append a message (and the Responses ``items`` or the framework's
        ``original`` it stands for, if any); may also pin a range (ThresholdReached).
        ``hidden``: a tool result the framework filtered from the model."""
        self.check_message(message)
        if hidden and message.role != "tool":
            raise InvalidMessageError(
                f"only a tool result can be hidden from the model, not a {message.role} message",
                conversation_id=self.id,
                field="hidden",
            )
        s = self.state
        cap = s.policy.max_context_tokens
        if cap is not None:
            fixed = fixed_tokens(s)
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
            MessageAppended,
            at,
            position=position,
            message=message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            client_message_id=client_message_id,
            digest=chain_digest(s.digest, message, items, original, hidden),
            items=items,
            original=original,
            hidden=hidden,
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
        threshold_version: int | None = None,
    ) -> None:
        """Command: record the summary of the pending range; stale ones are rejected
        (with ``threshold_version``, also a range pinned again after an edit)."""
        pending = self._require_pending(from_position, through_position, threshold_version)
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
            layers = layers_after(s, pending, from_position, through_position, "", message_tokens)
            fixed = s.reply_priming + s.tools_tokens
            fixed += s.system_tokens if s.system_prompt is not None else 0
            fixed += summaries_tokens(s, layers)
            newest = newest_group_tokens(s, after=through_position)
            if fixed + newest > cap:
                raise SummaryQualityError(
                    f"with this summary the context cannot fit max_context_tokens ({cap})",
                    conversation_id=self.id,
                )
        covers_from = 0 if folds_previous(s, pending) else from_position
        self._trigger(
            SummaryCreated,
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
        failure: SummaryFailure,
        *,
        from_position: int,
        through_position: int,
        at: datetime,
        threshold_version: int | None = None,
    ) -> int:
        """Command: record a failed attempt for the pending range; returns the attempt number."""
        pending = self._require_pending(from_position, through_position, threshold_version)
        attempt = pending.attempts + 1
        self._trigger(
            SummarizationFailed,
            at,
            threshold_version=pending.threshold_version,
            from_position=from_position,
            through_position=through_position,
            kind=failure.kind,
            error=failure.error[:2000],
            attempt=attempt,
            retryable=failure.retryable,
            called_provider=failure.called_provider,
            input_tokens=failure.input_tokens,
            output_tokens=failure.output_tokens,
        )
        return attempt

    def change_policy(self, policy: ReductionPolicy, *, at: datetime) -> bool:
        """Command: adopt a new policy (from the next event on). False if unchanged."""
        s = self.state
        if policy == s.policy:
            return False
        cap = policy.max_context_tokens
        if cap is not None and fixed_tokens(s) + newest_group_tokens(s, after=-1) > cap:
            raise InvalidPolicyError(
                f"max_context_tokens ({cap}) cannot hold the system prompt, summaries and "
                "newest turn",
                conversation_id=self.id,
            )
        self._check_budget(policy, s.tools_tokens)
        self._trigger(PolicyChanged, at, policy=policy, policy_version=s.policy_version + 1)
        self._maybe_pin_range(at)
        return True

    def change_tools(self, tools: ToolDefinitions | None, *, tools_tokens: int, at: datetime) -> bool:
        """Command: send these tool definitions from now on. False if unchanged."""
        s = self.state
        if tools == s.tools:
            return False
        tools_tokens = tools_tokens if tools else 0
        cap = s.policy.max_context_tokens
        if cap is not None and fixed_tokens(s) - s.tools_tokens + tools_tokens + newest_group_tokens(
            s, after=-1
        ) > cap:
            raise InvalidPolicyError(
                f"max_context_tokens ({cap}) cannot hold these tools ({tools_tokens} tokens) with "
                "the system prompt, summaries and newest turn",
                conversation_id=self.id,
            )
        self._check_budget(s.policy, tools_tokens)
        self._trigger(ToolsChanged, at, tools=tools, tools_tokens=tools_tokens)
        self._maybe_pin_range(at)
        return True

    def record_usage(
        self, *, prompt_tokens: int, completion_tokens: int, at: datetime
    ) -> None:
        """Command: record what the provider reported for the latest model call."""
        for argument, value in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
            check_count(value, argument, conversation_id=self.id)
        self._trigger(
            UsageRecorded,
            at,
            through_position=self.state.next_position - 1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            estimated_prompt_tokens=self.context_tokens(),
        )

    def _check_budget(self, policy: ReductionPolicy, tools_tokens: int) -> None:
        s = self.state
        system = s.system_tokens if s.system_prompt is not None else 0
        check_budget(policy, tools_tokens=tools_tokens, system_tokens=system,
                     reply_priming=s.reply_priming, conversation_id=self.id)

    def _require_pending(
        self, from_position: int, through_position: int, threshold_version: int | None = None
    ) -> PendingRange:
        pending = self.state.pending
        if (
            pending is None
            or pending.from_position != from_position
            or pending.through_position != through_position
            or (threshold_version is not None and pending.threshold_version != threshold_version)
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
        start = tail_index(s)
        gap = gap_run(s)
        if gap:
            # Messages an invalidated layer reopened between valid layers: when the
            # unsummarized messages cross a trigger, the gap is summarized first, whole
            # (it holds whole groups), as a layer of its own.
            unsummarized = [*gap, *s.window[start:]]
            count = len(unsummarized)
            tokens = sum(e.tokens for e in unsummarized)
            limit = trigger_limit(s.policy, count, tokens, trigger_extra(s))
            if limit is not None:
                self._trigger(
                    ThresholdReached,
                    at,
                    limit=limit,
                    unsummarized_messages=count,
                    unsummarized_tokens=tokens,
                    from_position=gap[0].position,
                    through_position=gap[-1].position,
                    from_version=gap[0].version,
                    through_version=gap[-1].version,
                    consolidate=False,
                    policy_version=s.policy_version,
                )
            return
        # The tail's tokens are a running sum: an append that crosses no trigger
        # neither passes over the window nor copies it.
        tokens = tail_tokens(s, start)
        extra = trigger_extra(s)
        if trigger_limit(s.policy, len(s.window) - start, tokens, extra) is None:
            return
        open_index = s.open_group_index - start if s.open_group_index is not None else None
        planned = plan_range(
            s.window[start:], s.policy, open_group_index=open_index, tools_tokens=extra,
            tokens=tokens, keep_offset=keep_offset(s),
        )
        if planned is None:
            return
        consolidate = (
            s.policy.summary_mode == "layered"
            and start == 0
            and sum(layer.message_tokens for layer in s.summaries) > s.policy.layered_max_tokens
        )
        self._trigger(
            ThresholdReached,
            at,
            consolidate=consolidate,
            policy_version=s.policy_version,
            **planned.model_dump(),
        )


class ConversationSnapshot(DomainEvent):
    """The whole (bounded) state of a conversation at a version."""

    TOPIC: ClassVar[str] = "contextledger.conversation.Snapshot"
    #: v2: the state's policy has ``token_scope`` (v1 policies are read as ``messages``).
    class_version: ClassVar[int] = 2

    created_on: datetime
    state: ConversationState

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        events.Forked.upcast_v1_v2(state)  # the same shape: {"state": {"policy": ...}}

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
        conversation.state = self.state.clone()
        conversation.version = self.originator_version
        conversation.modified_on = self.timestamp
        return conversation
