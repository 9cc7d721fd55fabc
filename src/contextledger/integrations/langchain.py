"""contextledger as a LangChain chat message history: bounded, summarized, auditable.

    from langchain_core.runnables.history import RunnableWithMessageHistory
    from contextledger.integrations.langchain import LedgerChatMessageHistory

    with_history = RunnableWithMessageHistory(
        chain, lambda session_id: LedgerChatMessageHistory(session_id, ledger),
        input_messages_key="input", history_messages_key="history")

``messages`` is the *working memory* (a ``SystemMessage`` with the summary, then the
recent messages, old tool results as placeholders), not the whole history; the log
keeps everything (``ledger.transcript``), and ``ledger.context(cid, version=v)``
re-derives what any call was sent. Tool calls map both ways (``AIMessage.tool_calls``
<-> assistant ``tool_calls``, ``ToolMessage`` <-> ``tool`` messages).

Needs the ``langchain`` extra (``pip install contextledger[langchain]``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from contextledger.domain.messages import FunctionCall, Message, ToolCall
from contextledger.integrations._keys import SessionBinding

__all__ = ["LedgerChatMessageHistory", "from_langchain", "to_langchain"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict):
            parts.append(f"[{part.get('type', 'content')}]")
    return "\n".join(parts)


def from_langchain(message: BaseMessage) -> Message:
    """A LangChain message as a chat-completions ``Message``."""
    text = _text(message.content)
    if isinstance(message, AIMessage):
        calls = tuple(
            ToolCall(
                id=str(call["id"]),
                function=FunctionCall(name=call["name"], arguments=json.dumps(call["args"])),
            )
            for call in message.tool_calls
        )
        return Message(role="assistant", content=text or (None if calls else ""), tool_calls=calls or None)
    if isinstance(message, ToolMessage):
        return Message(role="tool", tool_call_id=message.tool_call_id, content=text)
    if isinstance(message, ChatMessage):
        return Message.from_openai({"role": message.role, "content": text})
    role = _ROLES.get(message.type)
    if role is None:
        return Message(role="user", content=text)
    return Message(role=role, content=text)


def to_langchain(message: Mapping[str, Any]) -> BaseMessage:
    """A chat-completions dict (as ``Ledger.context`` returns) as a LangChain message."""
    m = Message.from_openai(dict(message))
    if m.role == "assistant":
        calls, invalid = [], []
        for call in m.tool_calls or ():
            try:
                args = json.loads(call.function.arguments)
            except json.JSONDecodeError as exc:
                invalid.append(
                    {"name": call.function.name, "args": call.function.arguments, "id": call.id,
                     "error": str(exc), "type": "invalid_tool_call"}
                )
                continue
            calls.append({"name": call.function.name, "args": args, "id": call.id, "type": "tool_call"})
        return AIMessage(content=m.text, tool_calls=calls, invalid_tool_calls=invalid)
    if m.role == "tool":
        return ToolMessage(content=m.text, tool_call_id=m.tool_call_id or "")
    if m.role == "user":
        return HumanMessage(content=m.text)
    if m.role == "developer":
        return ChatMessage(role="developer", content=m.text)
    return SystemMessage(content=m.text)


class LedgerChatMessageHistory(SessionBinding, BaseChatMessageHistory):
    """A ``BaseChatMessageHistory`` kept in a contextledger ``Ledger``, keyed by session id.

    Constructed from a session id and either a ``ledger`` (shared, not closed here) or
    a database ``url`` (opened here, closed by ``close()``); the first use starts the
    conversation with ``policy``, ``model`` and ``system_prompt``.
    """

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The working memory as LangChain messages (summary first, as a SystemMessage)."""
        return [to_langchain(m) for m in self.ledger.context(self.conversation_id)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` atomically (one transaction)."""
        converted = [from_langchain(m) for m in messages]
        if converted:
            self.ledger.extend(self.conversation_id, converted)

    def clear(self) -> None:
        """Forget every message of this session: they are retracted from the working
        memory (the log keeps them for audits)."""
        self.ledger.clear(self.conversation_id)

    async def aget_messages(self) -> list[BaseMessage]:
        """``messages``, without blocking the event loop."""
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """``add_messages``, without blocking the event loop."""
        await asyncio.to_thread(self.add_messages, messages)

    async def aclear(self) -> None:
        """``clear``, without blocking the event loop."""
        await asyncio.to_thread(self.clear)

