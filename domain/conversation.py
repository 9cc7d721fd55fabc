"""The ``Conversation`` aggregate: its commands and the queries over its state.

The events are in ``contextledger.domain.events`` (reachable here as nested names,
``Conversation.MessageAppended``); the state is in
``contextledger.domain.folding.state``, the fold of events into it in
``contextledger.domain.folding.fold`` and the queries over it in
``contextledger.domain.folding.queries``. The aggregate's identity, version and fold
are its root (``contextledger.domain.folding.aggregate``); the edit and the summary
commands are its bases (``contextledger.domain.commands.editing``,
``contextledger.domain.commands.summarizing``), and the appends, policy, tools and
usage are here. Commands check their invariants, then trigger events; a command that
changes nothing emits nothing.

Stored logs name this module's path (``ConversationSnapshot``), so it stays at the
top of the domain. May import: commands, folding, events, values.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from contextledger.domain import events
from contextledger.domain.commands.editing import EditCommands
from contextledger.domain.commands.summarizing import SummaryCommands, SummaryFailure
from contextledger.domain.events import (
    DomainEvent,
    MessageAppended,
    PolicyChanged,
    Started,
    SummaryProvenance,
    ToolsChanged,
    UsageRecorded,
    fold_conversation_events_with,
)
from contextledger.domain.folding.budget import check_budget
from contextledger.domain.folding.queries import (
    fixed_tokens,
    full_history_tokens,
    newest_group_tokens,
    view_tokens,
    visible_entries,
    working_memory,
)
from contextledger.domain.folding.state import ConversationState, PendingRange
from contextledger.domain.values.digests import commit, genesis_content, message_content, structure
from contextledger.domain.values.errors import (
    ContextOverflowError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPolicyError,
)
from contextledger.domain.values.messages import MESSAGES_CHECKED, Message
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.reduction import Entry
from contextledger.domain.values.tools import ToolDefinitions
from contextledger.domain.values.validation import check_count, check_text

__all__ = [
    "Conversation",
    "ConversationSnapshot",
    "ConversationState",
    "PendingRange",
    "SummaryFailure",
    "SummaryProvenance",
    "project_events",
]


class Conversation(EditCommands, SummaryCommands):
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
    NativeSummaryReadable: ClassVar[type[events.NativeSummaryReadable]] = events.NativeSummaryReadable

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
        check_budget(
            policy,
            tools_tokens=tools_tokens if tools else 0,
            reply_priming=reply_priming,
            system_tokens=system_tokens if system_prompt is not None else 0,
            conversation_id=conversation_id,
        )
        event = Started(
            originator_id=conversation_id,
            originator_version=1,
            timestamp=at,
            system_prompt=system_prompt,
            system_tokens=system_tokens,
            model=model,
            policy=policy,
            reply_priming=reply_priming,
            **commit("", structure("start", 1, at, conversation_id), genesis_content(system_prompt, model)),
            key=key,
            tools=tools,
            tools_tokens=tools_tokens if tools else 0,
        ).sealed()
        conversation = cls.apply(None, event)
        conversation._pending_events.append(event)
        return conversation

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
        """The context the model is sent next, and what its prompt costs in tokens
        (``queries.working_memory``: summaries stand where the policy places them)."""
        return working_memory(self.state)

    def context_tokens(self) -> int:
        return view_tokens(self.state, self.visible_entries())

    @property
    def full_history_tokens(self) -> int:
        """What sending every message ever appended would cost (no reduction)."""
        return full_history_tokens(self.state)

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
        self._new_event(
            MessageAppended,
            at,
            {
                "position": position,
                "message": message,
                "tokens": tokens,
                "placeholder_tokens": placeholder_tokens,
                "client_message_id": client_message_id,
                **commit(
                    s.digest,
                    structure("message", self.version + 1, at, position),
                    message_content(message, items, original, hidden),
                ),
                "items": items,
                "original": original,
                "hidden": hidden,
            },
            MESSAGES_CHECKED if type(message) is Message else None,  # checked when built
        )
        self._maybe_pin_range(at)
        return position

    def change_policy(self, policy: ReductionPolicy, *, at: datetime) -> bool:
        """Command: adopt a new policy (from the next event on). False if unchanged."""
        s = self.state
        if policy == s.policy:
            return False
        cap = policy.max_context_tokens
        if cap is not None and fixed_tokens(s) + newest_group_tokens(s, after=-1) > cap:
            raise InvalidPolicyError(
                f"max_context_tokens ({cap}) cannot hold the system prompt, summaries and newest turn",
                conversation_id=self.id,
            )
        self._check_budget(policy, s.tools_tokens)
        self._trigger(PolicyChanged, at, policy=policy, policy_version=s.policy_version + 1)
        self._maybe_pin_range(at)
        return True

    def restate_policy(self, *, at: datetime) -> None:
        """Command: record the policy in force again, unchanged (same policy version):
        a fork of another data subject keeps it in a record of its own, which outlives
        the erasure of its inherited history (``domain/remainder.py``)."""
        s = self.state
        through = s.fork_of.through_position if s.fork_of is not None else None
        self._trigger(
            PolicyChanged, at, policy=s.policy, policy_version=s.policy_version, inherited_through=through
        )

    def change_tools(self, tools: ToolDefinitions | None, *, tools_tokens: int, at: datetime) -> bool:
        """Command: send these tool definitions from now on. False if unchanged."""
        s = self.state
        if tools == s.tools:
            return False
        tools_tokens = tools_tokens if tools else 0
        cap = s.policy.max_context_tokens
        if (
            cap is not None
            and fixed_tokens(s) - s.tools_tokens + tools_tokens + newest_group_tokens(s, after=-1) > cap
        ):
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
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        at: datetime,
        cache_read_tokens: int | None = None,
        cache_creation_tokens: int | None = None,
        calibrates: bool = False,
    ) -> None:
        """Command: record what the provider reported for the latest model call.
        ``prompt_tokens`` includes the cached tokens (``cache_read_tokens``, read from
        the provider's prompt cache, and ``cache_creation_tokens``, written to it);
        ``calibrates``: our counts for this model are estimates, so the provider's
        count stands for the prefix it saw (``queries.reported_offset``)."""
        for argument, value in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
            check_count(value, argument, conversation_id=self.id)
        cached = 0
        for argument, given in (
            ("cache_read_tokens", cache_read_tokens),
            ("cache_creation_tokens", cache_creation_tokens),
        ):
            if given is not None:
                cached += check_count(given, argument, conversation_id=self.id)
        if cached > prompt_tokens:
            raise InvalidArgumentError(
                f"cache_read_tokens and cache_creation_tokens ({cached}) exceed prompt_tokens "
                f"({prompt_tokens}), which includes them",
                conversation_id=self.id,
                argument="cache_read_tokens" if cache_read_tokens else "cache_creation_tokens",
            )
        self._trigger(
            UsageRecorded,
            at,
            through_position=self.state.next_position - 1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            estimated_prompt_tokens=self.context_tokens(),
            cache_read_tokens=cache_read_tokens,
            cache_creation_tokens=cache_creation_tokens,
            calibrates=bool(calibrates),
            reduction="miss" if self.state.pending is not None else ("hit" if self.state.summaries else None),
        )
        if calibrates:  # the provider's count may cross the trigger our estimate did not
            self._maybe_pin_range(at)

    def _check_budget(self, policy: ReductionPolicy, tools_tokens: int) -> None:
        s = self.state
        system = s.system_tokens if s.system_prompt is not None else 0
        check_budget(
            policy,
            tools_tokens=tools_tokens,
            system_tokens=system,
            reply_priming=s.reply_priming,
            conversation_id=self.id,
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


fold_conversation_events_with(Conversation.apply)


def project_events(aggregate: Any, events: Iterable[Any]) -> Any:
    """The aggregate after ``events`` (a snapshot first, or ``aggregate``'s next ones):
    what the store's repository reads a conversation with. It is eventsourcing's
    ``project_aggregate`` without its check of each event against a runtime-checkable
    ``Protocol``, an ``isinstance`` that costs about 13 µs an event (most of a cold
    load's fold); each event still folds itself in by its own ``mutate``."""
    for event in events:
        aggregate = event.mutate(aggregate)
    return aggregate
