"""contextledger as Pydantic AI's message history: bounded, summarized, auditable, lossless.

    from pydantic_ai import Agent
    from contextledger.integrations.pydantic_ai import LedgerHistory

    history = LedgerHistory("user-42", url="sqlite:///memory.db", system_prompt="Be brief.",
                            policy=cl.ReductionPolicy(trigger_messages=40, keep_messages=10))
    agent = Agent(model, capabilities=[history.capability])
    result = await agent.run("hi", message_history=history.messages())
    history.extend(result.new_messages())

``messages()`` is the *working memory* as ``ModelMessage``\\ s (the system prompt and
the summary as ``SystemPromptPart``\\ s, then the recent messages as they were added,
old tool returns as placeholders); ``all_messages()`` gives back every message ever
added, equal to what was added. Each ``ModelMessage`` is stored as the OpenAI chat
messages the ledger counts, summarizes and sends (one per system prompt, user prompt
and tool return part; one assistant message per response), each carrying its
*original* (``MessageAppended.original``, ``{"format": "pydantic_ai", "version": 1,
...}``): Pydantic AI's own JSON of the parts it stands for, kept verbatim in the log
and chained into the digests.

Needs the ``pydantic-ai`` extra (``pip install contextledger[pydantic-ai]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)
from pydantic_ai.tools import RunContext

from contextledger.application.facade.ledger import Ledger
from contextledger.application.formats.originals import (
    ContextEntry,
    context_entries,
    extend_with_originals,
    transcript_originals,
)
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.domain.values.messages import FunctionCall, Message, ToolCall
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.integrations._keys import SessionBinding

__all__ = ["FORMAT", "VERSION", "LedgerHistory", "chat_records", "model_messages"]

#: The ``"format"`` of the originals this integration stores.
FORMAT = "pydantic_ai"
#: Their ``"version"``: the layout of ``"fragments"`` (see ``chat_records``).
VERSION = 1

Original = dict[str, Any]
Record = tuple[Message, Original]


# ------------------------------------------------------------ ModelMessage -> log


def _dump(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    return list(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))


def _user_content(part: UserPromptPart) -> str | list[dict[str, Any]]:
    if isinstance(part.content, str):
        return part.content
    out: list[dict[str, Any]] = []
    for item in part.content:
        if isinstance(item, str):
            out.append({"type": "text", "text": item})
        elif isinstance(item, TextContent):
            out.append({"type": "text", "text": item.content})
        elif isinstance(item, ImageUrl):
            out.append({"type": "image_url", "image_url": {"url": item.url}})
        elif isinstance(item, BinaryContent) and item.is_image:
            out.append({"type": "image_url", "image_url": {"url": item.data_uri}})
        else:
            name = getattr(item, "identifier", None) or getattr(item, "kind", type(item).__name__)
            out.append({"type": "text", "text": f"[{type(item).__name__}: {name}]"})
    return out or [{"type": "text", "text": ""}]


def _request_chat(part: Any) -> Message | None:
    """The chat message a request part is sent as (None: it is not sent on its own)."""
    if isinstance(part, SystemPromptPart):
        return Message(role="system", content=part.content)
    if isinstance(part, UserPromptPart):
        return Message.from_openai({"role": "user", "content": _user_content(part)})
    if isinstance(part, ToolReturnPart):
        text, _ = part.model_response_str_and_user_content()
        return Message(role="tool", tool_call_id=part.tool_call_id, content=text)
    if isinstance(part, RetryPromptPart):  # legacy; validation translates it
        if part.tool_name is not None:
            return Message(role="tool", tool_call_id=part.tool_call_id, content=part.model_response())
        return Message(role="user", content=part.model_response())
    if isinstance(part, RetryFeedbackPart):
        return Message(role="user", content=part.model_response())
    return None


def _response_chat(message: ModelResponse) -> Message:
    texts = [p.content for p in message.parts if isinstance(p, TextPart)]
    calls = tuple(
        ToolCall(id=p.tool_call_id, function=FunctionCall(name=p.tool_name, arguments=p.args_as_json_str()))
        for p in message.parts
        if isinstance(p, ToolCallPart)
    )
    content = "\n\n".join(texts) if texts else (None if calls else "")
    return Message(role="assistant", content=content, tool_calls=calls or None)


def _fragments(message: ModelMessage, dumped: dict[str, Any]) -> list[tuple[Message | None, Original]]:
    """A message's chat messages, each with the fragment (header and parts) it stands for."""
    header = {k: v for k, v in dumped.items() if k != "parts"}
    parts = dumped["parts"]
    if isinstance(message, ModelResponse):
        return [(_response_chat(message), {**header, "parts": parts})]
    groups: list[tuple[Message | None, list[Any]]] = []
    lead: list[Any] = []
    for part, raw in zip(message.parts, parts, strict=True):
        chat = _request_chat(part)
        if chat is not None:
            groups.append((chat, [*lead, raw]))
            lead = []
        elif groups:
            groups[-1][1].append(raw)
        else:
            lead.append(raw)
    if not groups:
        return [(None, {**header, "parts": lead})]
    return [(chat, {**header, "parts": raw_parts}) for chat, raw_parts in groups]


def chat_records(messages: Sequence[ModelMessage]) -> list[Record]:
    """``messages`` as (chat message, original) pairs, ready to append.

    A request part that is not sent on its own (and a message that sends nothing) rides
    in the original of the nearest chat message; fragments after a message's first say
    ``continues``. Raises ``InvalidArgumentError`` for anything not a ``ModelMessage``
    and when no part of ``messages`` is sent to a model.
    """
    listed = list(messages)
    for index, m in enumerate(listed):
        if not isinstance(m, ModelRequest | ModelResponse):
            raise InvalidArgumentError(
                f"messages[{index}] is a {type(m).__name__}, not a pydantic_ai ModelMessage",
                argument="messages",
            )
    try:
        dumped = _dump(listed)
    except Exception as exc:  # pydantic's serialization errors
        raise InvalidArgumentError(f"the messages cannot be serialized: {exc}", argument="messages") from None
    records: list[tuple[Message, list[dict[str, Any]]]] = []
    waiting: list[dict[str, Any]] = []
    for message, raw in zip(listed, dumped, strict=True):
        for number, (chat, fragment) in enumerate(_fragments(message, raw)):
            if number:
                fragment["continues"] = True
            if chat is None:
                waiting.append(fragment)
            else:
                records.append((chat, [*waiting, fragment]))
                waiting = []
    if waiting:
        if not records:
            raise InvalidArgumentError(
                "none of these messages holds a part sent to a model (a prompt, a tool return, a response)",
                argument="messages",
            )
        records[-1][1].extend(waiting)
    return [(chat, {"format": FORMAT, "version": VERSION, "fragments": frags}) for chat, frags in records]


# ------------------------------------------------------------ log -> ModelMessage


def _from_chat(message: Message) -> dict[str, Any]:
    """A message appended without an original (e.g. through ``Ledger.append``), as the
    ``ModelMessage`` JSON that stands for it."""
    if message.role == "assistant":
        parts: list[dict[str, Any]] = []
        if message.text:
            parts.append({"part_kind": "text", "content": message.text})
        for call in message.tool_calls or ():
            parts.append(
                {
                    "part_kind": "tool-call",
                    "tool_name": call.function.name,
                    "args": call.function.arguments,
                    "tool_call_id": call.id,
                }
            )
        return {"kind": "response", "parts": parts}
    if message.role == "tool":
        part = {
            "part_kind": "tool-return",
            "tool_name": "",
            "content": message.text,
            "tool_call_id": message.tool_call_id,
        }
        return {"kind": "request", "parts": [part]}
    kind = "user-prompt" if message.role == "user" else "system-prompt"
    return {"kind": "request", "parts": [{"part_kind": kind, "content": message.text}]}


def _load(dicts: list[dict[str, Any]]) -> list[ModelMessage]:
    try:
        return list(ModelMessagesTypeAdapter.validate_python(dicts))
    except ValidationError as exc:
        raise InvalidMessageError(f"a stored Pydantic AI message does not load: {exc}") from None


class _Builder:
    """Joins fragments back into message JSON."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.open = False

    def fragments(self, original: Original, replace: dict[str, str] | None = None) -> None:
        for fragment in original.get("fragments", ()):
            frag = {k: v for k, v in fragment.items() if k != "continues"}
            if replace:
                frag["parts"] = [
                    {**p, "content": replace[p["tool_call_id"]]}
                    if p.get("part_kind") == "tool-return" and p.get("tool_call_id") in replace
                    else p
                    for p in frag["parts"]
                ]
            if fragment.get("continues") and self.open and self.out[-1].get("kind") == frag.get("kind"):
                self.out[-1]["parts"].extend(frag["parts"])
            else:
                self.out.append({**frag, "parts": list(frag["parts"])})
            self.open = True

    def plain(self, message: dict[str, Any]) -> None:
        self.out.append(message)
        self.open = False


def _is_ours(original: Original | None) -> bool:
    return original is not None and original.get("format") == FORMAT and original.get("version") == VERSION


def model_messages(records: Sequence[tuple[Message | dict[str, Any], Original | None]]) -> list[ModelMessage]:
    """Stored (chat message, original) pairs back as ``ModelMessage``\\ s (a message
    without a Pydantic AI original is converted from its chat form)."""
    builder = _Builder()
    for message, original in records:
        if original is not None and _is_ours(original):
            builder.fragments(original)
        else:
            builder.plain(_from_chat(Message.from_openai(message)))
    return _load(builder.out)


def _memory_messages(entries: Sequence[ContextEntry]) -> list[ModelMessage]:
    builder = _Builder()
    lead: list[dict[str, Any]] = []
    for entry in entries:
        message = Message.from_openai(entry.message)
        if entry.position is None:  # the system prompt or a summary
            kind = "user-prompt" if message.role == "user" else "system-prompt"
            lead.append({"part_kind": kind, "content": message.text})
            continue
        if lead:
            builder.plain({"kind": "request", "parts": lead})
            lead = []
        if entry.original is not None and _is_ours(entry.original):
            replace = None
            if entry.reduced and message.tool_call_id is not None:
                replace = {message.tool_call_id: message.text}
            builder.fragments(entry.original, replace)
        else:
            builder.plain(_from_chat(message))
    if lead:
        builder.plain({"kind": "request", "parts": lead})
    return _load(builder.out)


# ------------------------------------------------------------------ the history


class LedgerHistory(SessionBinding):
    """A Pydantic AI message history kept in a contextledger ``Ledger``.

    Constructed from a key (or a conversation id as a string) and either a ``ledger``
    (shared, not closed here) or a database ``url`` (opened here, closed by
    ``close()``). The first use starts the conversation with ``policy``, ``model`` and
    ``system_prompt``: the system prompt is conversation state, always first in
    ``messages()``, never summarized away (an agent's ``instructions`` work too: they
    are sent with every request and not stored). ``subject`` names the data subject
    the conversation is about (``Ledger.start``'s ``subject``).
    """

    def __init__(
        self,
        key: str,
        ledger: Ledger | None = None,
        *,
        url: str | None = None,
        policy: ReductionPolicy | None = None,
        model: str = "gpt-4o-mini",
        system_prompt: str | None = None,
        subject: str | None = None,
    ) -> None:
        super().__init__(
            key, ledger, url=url, policy=policy, model=model, system_prompt=system_prompt, subject=subject
        )

    def messages(self, *, version: int | None = None) -> list[ModelMessage]:
        """The working memory (now, or at aggregate ``version``): pass it as
        ``message_history``. Tool calls still waiting for their results (a run that
        ended in ``DeferredToolRequests``) follow it, as the run that answers them with
        ``deferred_tool_results`` needs them."""
        memory = context_entries(self.ledger, self.conversation_id, version=version, pending=True)
        return _memory_messages(memory.entries)

    def extend(self, messages: Sequence[ModelMessage]) -> list[int]:
        """Append ``messages`` (e.g. ``result.new_messages()``) to the log in one
        transaction, losslessly; returns the positions of the chat messages stored.

        Tool calls still waiting for their returns (an approval given up: the run went
        on from ``repair_messages(history.messages())``) are answered first, when
        ``messages`` do not start with their returns, by the returns Pydantic AI's
        ``repair_messages`` makes for them (``outcome="interrupted"``, marked
        ``pydantic_ai_synthesized_tool_return``)."""
        if isinstance(messages, ModelRequest | ModelResponse):
            messages = [messages]
        records = chat_records(messages) if messages else []
        if records:
            records = self._interrupted(records[0][0]) + records
        return extend_with_originals(self.ledger, self.conversation_id, records) if records else []

    def _interrupted(self, first: Message) -> list[Record]:
        """The returns that close the waiting calls when ``first`` does not answer one."""
        memory = context_entries(self.ledger, self.conversation_id, pending=True)
        if not memory.pending:
            return []
        waiting = _memory_messages(memory.entries[-memory.pending :])
        called = {
            p.tool_call_id
            for m in waiting
            if isinstance(m, ModelResponse)
            for p in m.parts
            if isinstance(p, ToolCallPart)
        }
        answered = {
            p.tool_call_id
            for m in waiting
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart | RetryPromptPart)
        }
        if first.role == "tool" and first.tool_call_id in called - answered:
            return []
        repaired = repair_messages(waiting)[-1]
        synthesized = (
            [
                p
                for p in repaired.parts
                if isinstance(p, ToolReturnPart) and p.tool_call_id in called - answered
            ]
            if isinstance(repaired, ModelRequest)
            else []
        )
        return chat_records([ModelRequest(parts=synthesized)]) if synthesized else []

    async def amessages(self, *, version: int | None = None) -> list[ModelMessage]:
        """``messages()`` off the event loop (the ledger's reads are blocking I/O)."""
        return await asyncio.to_thread(lambda: self.messages(version=version))

    async def aextend(self, messages: Sequence[ModelMessage]) -> list[int]:
        """``extend()`` off the event loop."""
        return await asyncio.to_thread(self.extend, messages)

    def all_messages(self) -> list[ModelMessage]:
        """Every message ever added, oldest first, equal to what was added."""
        records = transcript_originals(self.ledger, self.conversation_id)
        return model_messages([(message, original) for _, message, original in records])

    def version(self) -> int:
        """The conversation's current aggregate version (pairs with ``messages(version=)``)."""
        return context_entries(self.ledger, self.conversation_id).version

    async def processor(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """A history processor: before each model request, the messages from before this
        run are replaced by the current working memory (a summary that landed meanwhile
        is used; a whole history passed as ``message_history`` is bounded). This run's
        own messages (those carrying its ``run_id``) follow unchanged."""
        start = next((i for i, m in enumerate(messages) if m.run_id == ctx.run_id), None)
        if start is None or ctx.run_id is None:
            return messages
        memory = await asyncio.to_thread(self.messages)
        return memory + messages[start:]

    @property
    def capability(self) -> ProcessHistory[Any]:
        """``processor`` as the agent capability Pydantic AI 2 takes:
        ``Agent(model, capabilities=[history.capability])``."""
        return ProcessHistory(self.processor)
