"""The conversation commands behind the ``Ledger`` façade: start, append, extend,
answer abandoned tool calls, change the policy or the tools, record usage.

``append`` and ``extend`` take OpenAI chat messages (``inbound``) and, through
``formats.inbound.decode``, Anthropic and Gemini messages and replies: one wire
message may stand for several chat messages, appended together with their originals
in one transaction.

Each command checks its input, then runs on the ``Conversation`` aggregate through
the conversation store (one transaction, retried on conflicts). What a command needs
of the ledger is the ``CommandHost`` port; the ``Ledger`` satisfies it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError

from contextledger.application.formats.base import InboundAdapter, ProviderUsage
from contextledger.application.formats.gemini import OpenCall, open_calls_of
from contextledger.application.formats.inbound import GEMINI
from contextledger.application.formats.native import record_native
from contextledger.application.formats.native_readable import readable_now
from contextledger.application.privacy.subjects import Subjects
from contextledger.application.shared.addressing import ConversationRef, check_key, id_for_key, resolve
from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.limits import (
    DEFAULT_POLICY,
    check_message_bytes,
    check_message_tokens,
    with_default_cap,
)
from contextledger.application.shared.observability import Tracer, log
from contextledger.application.shared.ports import Summarizer, SummaryResult, TokenCounter
from contextledger.application.shared.settings import Settings
from contextledger.application.shared.wire import ToolDefinition
from contextledger.application.storage.store import ConversationStore
from contextledger.application.writing.idempotency import (
    check_client_message_id,
    check_client_message_ids,
    execute_once,
    id_records,
)
from contextledger.application.writing.inbound import Inbound, inbound
from contextledger.application.writing.wire_pieces import WireBatch, decode_wire, wire_adapter
from contextledger.domain.conversation import Conversation
from contextledger.domain.values.errors import (
    ConfigurationError,
    ConversationNotFoundError,
    DuplicateConversationError,
    InvalidArgumentError,
    InvalidMessageError,
)
from contextledger.domain.values.messages import Message
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.tools import check_tools
from contextledger.domain.values.validation import check_text, shown

__all__ = ["DEFAULT_POLICY", "CommandHost", "ConversationCommands"]

#: The reduction policy of a conversation started without one.


class CommandHost(Protocol):
    """What the commands need of the ledger: its settings, its conversations (read
    through the attribute each time: a sharded ledger swaps in the router), its token
    counters, its tracer, its clock and its conversations' data subjects."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> ConversationStore: ...

    @property
    def counters(self) -> TokenCounters: ...

    @property
    def tracer(self) -> Tracer: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def subjects(self) -> Subjects: ...

    @property
    def summarizer(self) -> Summarizer: ...

    @property
    def fallback_summarizer(self) -> Summarizer | None: ...

    def summarizer_model_name(self) -> str: ...

    def counter_for(self, model: str) -> TokenCounter: ...


class ConversationCommands:
    """The commands that add to a conversation (``Ledger`` delegates to them; the
    public methods' documentation is the façade's)."""

    def __init__(self, host: CommandHost) -> None:
        self._host = host
        self._settings = host.settings
        self._clock = host.clock

    def start(
        self,
        system_prompt: str | None,
        *,
        model: str,
        policy: ReductionPolicy | None,
        conversation_id: ConversationRef | None,
        key: str | None,
        tools: Sequence[ToolDefinition] | None,
        subject: str | None = None,
    ) -> UUID:
        check_text(system_prompt, "system_prompt", optional=True)
        subject = self._host.subjects.checked(subject)
        if policy is not None and not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        check_text(model, "model", empty=False)
        policy = with_default_cap(policy or DEFAULT_POLICY, model)
        if key is not None:
            key = check_key(key)
            cid = id_for_key(key)
            if conversation_id is not None and resolve(conversation_id) != cid:
                raise InvalidArgumentError(
                    "conversation_id and key name different conversations", argument="conversation_id"
                )
        else:
            cid = uuid4() if conversation_id is None else resolve(conversation_id)
        host, settings = self._host, self._settings
        checked_tools = check_tools(tools, max_bytes=settings.max_tools_bytes)
        counter = host.counters.for_model(model)
        tools_tokens = host.counters.tools_cost(model, checked_tools)
        system_tokens = 0
        if system_prompt is not None:
            system = Message(role="system", content=system_prompt)
            check_message_bytes(system, settings, field="system_prompt")
            system_tokens = counter.count_message(system)
            check_message_tokens(system_tokens, settings, field="system_prompt")
        conversation = Conversation.start(
            cid,
            system_prompt=system_prompt,
            system_tokens=system_tokens,
            model=model,
            policy=policy,
            reply_priming=counter.reply_priming,
            at=self._clock(),
            key=key,
            tools=checked_tools,
            tools_tokens=tools_tokens,
        )
        with host.tracer.span("start", conversation_id=cid):
            try:
                if subject is not None:  # before the first event: all of them under its key
                    host.subjects.assign_new(cid, subject)
                host.store.create(conversation)
            except IntegrityError:
                raise DuplicateConversationError(
                    f"a conversation with the key {key!r} already exists"
                    if key is not None
                    else "a conversation with this id already exists",
                    conversation_id=cid,
                    key=key,
                ) from None
        return cid

    def get_or_start(self, key: str, start: Callable[..., UUID], start_args: dict[str, Any]) -> UUID:
        """The id of the conversation with this key, started by ``start`` (the
        façade's, with its defaults) if it does not exist yet."""
        cid = id_for_key(check_key(key))
        subject = self._host.subjects.checked(start_args.get("subject"))
        store = self._host.store
        with store.lock(cid):
            try:
                store.load(cid)
            except ConversationNotFoundError:
                pass
            else:
                if subject is not None:
                    self._host.subjects.check_same(cid, subject)
                return cid
        try:
            return start(key=key, **start_args)
        except DuplicateConversationError:
            return cid

    def append(
        self,
        conversation_id: ConversationRef,
        message: Message | dict[str, Any] | Any,
        client_message_id: str | None,
        hidden: bool,
    ) -> int:
        cid = resolve(conversation_id)
        with self._host.tracer.span("append", conversation_id=cid) as span:
            adapter = wire_adapter(message)
            if adapter is not None:
                checked = [None if client_message_id is None else check_client_message_id(client_message_id)]
                batch = self._decode_wire(cid, [message], [adapter], checked)
                # An object that held only a compaction: the newest message it covers.
                position = self._append_pieces(cid, batch, hidden, newest=True)[0]
                role = batch.pieces[0].message.role if batch.pieces else "summary"
            else:
                given = inbound(message)
                position = self._append(cid, given, client_message_id, hidden)
                role = given.message.role
            span.set("position", position)
            span.set("role", role)
            log.debug("appended %s message at %d to %s", role, position, cid)
            return position

    def _append(self, conversation_id: UUID, given: Inbound, client_id: str | None, hidden: bool) -> int:
        msg, usage = given.message, given.usage
        ids = [None if client_id is None else check_client_message_id(client_id)]

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            if usage is not None:  # the provider saw the context before its own answer
                self._record(conversation, usage)
            positions = [self.append_to(conversation, msg, ids[0], hidden)]
            if ids[0] is None:  # no client id: no record of it (nor a reading of the clock)
                return positions, []
            return positions, id_records(conversation.id, ids, positions, at=self._clock())

        return execute_once(self._host.store, conversation_id, command, ids, [msg])[0]

    def extend(
        self,
        conversation_id: ConversationRef,
        messages: Iterable[Message | dict[str, Any] | Any],
        client_message_ids: Sequence[str | None] | None,
    ) -> list[int]:
        conversation_id = resolve(conversation_id)
        if isinstance(messages, str | bytes | dict | Message) or not isinstance(messages, Iterable):
            raise InvalidArgumentError(
                "messages must be a list of messages", argument="messages", value=shown(messages)
            )
        given = list(messages)
        ids = check_client_message_ids(client_message_ids, len(given))
        adapters = [wire_adapter(m) for m in given]
        if any(a is not None for a in adapters):
            batch = self._decode_wire(conversation_id, given, adapters, ids)
            batch.usage = None  # extend records no usage
            return self._append_pieces(conversation_id, batch, False)
        msgs = [inbound(m).message for m in given]
        if not msgs:
            return []

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            positions = [self.append_to(conversation, m, i) for m, i in zip(msgs, ids, strict=True)]
            return positions, id_records(conversation.id, ids, positions, at=self._clock())

        return execute_once(self._host.store, conversation_id, command, ids, msgs)

    def _decode_wire(
        self,
        conversation_id: UUID,
        objs: Sequence[Any],
        adapters: Sequence[InboundAdapter | None],
        ids: Sequence[str | None],
    ) -> WireBatch:
        """``wire_pieces.decode_wire`` with the conversation's open calls (for Gemini)."""
        open_calls: list[OpenCall] = []
        if GEMINI in adapters:
            open_calls = self._host.store.read(conversation_id, open_calls_of)
        return decode_wire(
            conversation_id,
            objs,
            adapters,
            ids,
            open_calls=open_calls,
            limit=self._settings.max_message_bytes,
        )

    def _append_pieces(
        self, conversation_id: UUID, batch: WireBatch, hidden: bool, *, newest: bool = False
    ) -> list[int]:
        """Append ``batch`` in one transaction (after recording its usage), each of its
        compactions recorded as a native summary where it stood; ``hidden`` hides the
        tool results (the first message when none is one: refused). No message appended:
        ``[]``, or with ``newest`` the position of the conversation's newest message."""
        pieces, usage = batch.pieces, batch.usage
        if not pieces and not batch.compactions:
            return []
        tools = [p for p in pieces if p.message.role == "tool"]
        hide = {id(p) for p in (tools or pieces[:1])} if hidden else set()
        ids = [p.client_id for p in pieces]
        defer = self._settings.native_readable == "on_demand"
        readable = None if defer else self._readable(conversation_id, batch)

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            if usage is not None:  # the provider saw the context before its own answer
                self._record(conversation, usage)
            counter = self._host.counters.for_model(conversation.state.model)
            marks = list(batch.compactions)
            positions = []
            for index, p in enumerate([*pieces, None]):
                while marks and marks[0][0] == index:
                    record_native(
                        conversation, marks.pop(0)[1], counter, self._clock(), readable, defer=defer
                    )
                if p is not None:
                    positions.append(
                        self.append_to(
                            conversation,
                            p.message,
                            p.client_id,
                            id(p) in hide,
                            original=p.original,
                            items=p.items,
                        )
                    )
            if not positions and newest:
                return [conversation.state.next_position - 1], []
            return positions, id_records(conversation.id, ids, positions, at=self._clock())

        return execute_once(self._host.store, conversation_id, command, ids, [p.message for p in pieces])

    def _readable(self, conversation_id: UUID, batch: WireBatch) -> SummaryResult | None:
        """For an opaque compaction: a summary of what it covers by the conversation's
        summarizer, made before the transaction (None when no compaction is opaque)."""
        opaque = [c for at, c in batch.compactions if c.text is None and not c.failed]
        if not opaque:
            return None
        # The messages of this batch that come before it: it covers them too.
        before = tuple(p.message for p in batch.pieces[: batch.compactions[0][0]])
        return readable_now(self._host, conversation_id, appended=before)

    def append_to(
        self,
        conversation: Conversation,
        message: Message,
        client_id: str | None,
        hidden: bool = False,
        *,
        original: dict[str, Any] | None = None,
        items: tuple[dict[str, Any], ...] | None = None,
    ) -> int:
        """Append ``message`` (with its wire ``original`` or Responses ``items``, if any) to ``conversation``
        inside a command, its size and tokens checked and counted; returns its position."""
        conversation.check_message(message)
        check_message_bytes(message, self._settings)
        tokens, placeholder_tokens = self._host.counters.message_cost(conversation, message)
        check_message_tokens(tokens, self._settings)
        return conversation.append(
            message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            client_message_id=client_id,
            at=self._clock(),
            hidden=hidden,
            original=original,
            items=items,
        )

    def close_open_tool_calls(self, conversation_id: ConversationRef, content: str) -> list[int]:
        if not isinstance(content, str) or not content.strip():
            raise InvalidMessageError("content must be a non-empty string", field="content")
        conversation_id = resolve(conversation_id)
        text = content if content.lower().startswith("error") else f"error: {content}"

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            return [
                self.append_to(conversation, Message(role="tool", tool_call_id=call_id, content=text), None)
                for call_id in list(conversation.state.open_calls)
            ], []

        return self._host.store.execute(conversation_id, command)

    def change_policy(self, conversation_id: ConversationRef, policy: ReductionPolicy) -> bool:
        conversation_id = resolve(conversation_id)
        if not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        return self._host.store.execute(
            conversation_id,
            lambda c: (c.change_policy(with_default_cap(policy, c.state.model), at=self._clock()), []),
        )

    def change_tools(self, conversation_id: ConversationRef, tools: Sequence[ToolDefinition] | None) -> bool:
        conversation_id = resolve(conversation_id)
        checked = check_tools(tools, max_bytes=self._settings.max_tools_bytes)

        def command(conversation: Conversation) -> tuple[bool, list[Any]]:
            cost = self._host.counters.tools_cost(conversation.state.model, checked)
            return conversation.change_tools(checked, tools_tokens=cost, at=self._clock()), []

        return self._host.store.execute(conversation_id, command)

    def record_usage(
        self,
        conversation_id: ConversationRef,
        prompt_tokens: int,
        completion_tokens: int,
        cache_read_tokens: int | None = None,
        cache_creation_tokens: int | None = None,
    ) -> None:
        conversation_id = resolve(conversation_id)

        def command(conversation: Conversation) -> tuple[None, list[Any]]:
            conversation.record_usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                at=self._clock(),
                cache_read_tokens=cache_read_tokens,
                cache_creation_tokens=cache_creation_tokens,
                calibrates=self._estimated(conversation),
            )
            return None, []

        self._host.store.execute(conversation_id, command)

    def _record(self, conversation: Conversation, usage: ProviderUsage) -> None:
        """Record the usage a reply reported (with its prompt-cache figures), as
        ``record_usage`` does, before the reply is appended."""
        conversation.record_usage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            at=self._clock(),
            cache_read_tokens=usage.cache_read_tokens,
            cache_creation_tokens=usage.cache_creation_tokens,
            calibrates=self._estimated(conversation),
        )

    def _estimated(self, conversation: Conversation) -> bool:
        """Whether the conversation's token counts are estimates (a counter with a
        ``relative_error``, for a model with no local tokenizer): then the provider's
        reported count replaces our estimate of the prompt it saw."""
        counter = self._host.counters.for_model(conversation.state.model)
        return bool(getattr(counter, "relative_error", 0))
