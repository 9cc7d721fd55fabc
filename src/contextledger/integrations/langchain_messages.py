"""LangChain messages <-> the ledger's chat messages, losslessly.

Every message is stored twice over in one event: as the chat-completions message the
model is sent (``from_langchain``: tool calls, ``ToolMessage`` <-> ``tool``, images
and files as OpenAI content parts) and as itself, every field and content block kept
(``MessageAppended.original``, ``{"format": "langchain", ...}``). ``langchain_memory``
reads the working memory back as LangChain messages; ``append_langchain`` appends
them. ``contextledger.integrations.langchain`` (the history) and
``langchain_middleware`` (the agent middleware) both build on this module.

Needs the ``langchain`` extra (``pip install contextledger[langchain]``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
    message_to_dict,
    messages_from_dict,
)

from contextledger.application.facade.ledger import Ledger
from contextledger.application.formats.originals import ContextEntry, context_entries, extend_with_originals
from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import Message

__all__ = [
    "FORMAT",
    "HIDDEN_KEY",
    "LEDGER_ID_PREFIX",
    "append_langchain",
    "from_langchain",
    "from_original",
    "hidden_from_model",
    "langchain_memory",
    "original_of",
    "to_langchain",
]

#: The ``"format"`` of the originals this integration stores.
FORMAT = "langchain"
_ENVELOPE_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_USER_PARTS = ("image_url", "input_audio", "file")
_CHAT_ROLES = ("system", "developer", "user", "assistant")
#: Ids of the messages the ledger makes itself (system prompt, summaries) start so.
LEDGER_ID_PREFIX = "contextledger-"
#: The ``response_metadata`` key that marks a ``ToolMessage`` as filtered from the model.
HIDDEN_KEY = "hidden_from_model"


def _parts(role: str, content: list[Any]) -> str | list[dict[str, Any]]:
    """Content parts as the Chat Completions API takes them for ``role``: text
    everywhere, images, audio and files in user messages (other blocks stay in the
    original only)."""
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif role == "user" and kind in _USER_PARTS and isinstance(part.get(kind), dict):
            parts.append({"type": kind, kind: part[kind]})
    return parts if parts else ""


def _plain_text(block: Mapping[str, Any]) -> str:
    """A ``text-plain`` block's text: its ``text`` (or its base64 data decoded), under
    its ``title``; a block that only points at a file (``url``, ``file_id``) says so."""
    text = block.get("text")
    if not isinstance(text, str) and isinstance(block.get("base64"), str):
        try:
            text = base64.b64decode(block["base64"], validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            text = None
    if not isinstance(text, str):
        where = block.get("url") or block.get("file_id") or block.get("id") or "no source"
        text = f"[text/plain file: {where}]"
    title = block.get("title")
    return f"{title}\n\n{text}" if isinstance(title, str) and title else text


def _is_plain(block: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(block, dict) and block.get("type") == "text-plain"


def _labelled(label: str, content: str | list[Any]) -> str | list[Any]:
    if isinstance(content, str):
        return f"{label}\n{content}"
    return [{"type": "text", "text": label}, *content]


def _sendable(message: BaseMessage) -> BaseMessage:
    """``message`` as a message the chat format takes: ``text-plain`` blocks as text
    blocks; a ``FunctionMessage`` (legacy function result, no call to answer) and a
    ``ChatMessage`` of a role the format lacks as a user message labelled with the
    function or the role."""
    content = message.content
    if isinstance(content, list) and any(_is_plain(b) for b in content):
        content = [{"type": "text", "text": _plain_text(b)} if _is_plain(b) else b for b in content]
        message = message.model_copy(update={"content": content})
    if isinstance(message, FunctionMessage):
        return HumanMessage(content=_labelled(f"[result of function {message.name}]", content))
    if isinstance(message, ChatMessage) and message.role not in _CHAT_ROLES:
        return HumanMessage(content=_labelled(f"[{message.role}]", content))
    return message


def from_langchain(message: BaseMessage) -> Message:
    """A LangChain message as the chat-completions ``Message`` the model is sent.

    As ``langchain-openai`` sends them, an ``AIMessage``'s ``invalid_tool_calls`` (a
    call whose arguments did not parse) follow its tool calls with their arguments
    verbatim, so that a ``ToolMessage`` can answer them. ``text-plain`` blocks are sent
    as text, a ``FunctionMessage`` and a ``ChatMessage`` of a role other than system,
    developer, user and assistant as a user message labelled ``[result of function
    NAME]`` or ``[ROLE]`` (the original keeps the message as it was)."""
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(f"a LangChain message is a BaseMessage, not {type(message).__name__}")
    source = message
    message = _sendable(message)
    try:
        data = convert_to_openai_messages(message)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidMessageError(
            f"the {message.type} message cannot be sent to a chat-completions model: {exc}",
            role=message.type,
            field="content",
        ) from None
    if not isinstance(data, dict):  # pragma: no cover - one message in, one dict out
        raise InvalidMessageError(f"the {message.type} message does not convert to one chat message")
    role = data.get("role")
    content = data.get("content")
    if isinstance(content, list):
        content = _parts(str(role), content)
    out: dict[str, Any] = {"role": role, "content": content}
    calls = list(data.get("tool_calls") or ())
    if isinstance(source, AIMessage):
        calls.extend(
            {
                "type": "function",
                "id": call["id"],
                "function": {"name": call.get("name") or "", "arguments": call.get("args") or ""},
            }
            for call in source.invalid_tool_calls
            if call.get("id")
        )
    if role == "assistant" and calls:
        out["tool_calls"] = calls
        if not content:
            out["content"] = None
    if role == "tool":
        out["tool_call_id"] = data.get("tool_call_id")
    name = data.get("name")
    if role != "tool" and isinstance(name, str) and _NAME.match(name):
        out["name"] = name
    return Message.from_openai(out)


def original_of(message: BaseMessage) -> dict[str, Any]:
    """The lossless form of ``message`` the ledger stores with it (every field and
    content block); ``InvalidMessageError`` if some value would not come back equal
    from JSON (a value that is not JSON data, a tuple, a NaN)."""
    data = message_to_dict(message)
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        same = messages_from_dict([json.loads(text)])[0] == message
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(
            f"the {message.type} message holds a value that cannot be stored as JSON: {exc}",
            role=message.type,
        ) from None
    if not same:
        raise InvalidMessageError(
            f"the {type(message).__name__} would not read back equal from JSON (a tuple, a "
            "custom message class, or another value JSON changes): store plain JSON data",
            role=message.type,
        )
    return {"format": FORMAT, "version": _ENVELOPE_VERSION, "message": json.loads(text)}


def from_original(original: Mapping[str, Any]) -> BaseMessage:
    """The LangChain message ``original_of`` stored."""
    if original.get("format") != FORMAT or not isinstance(original.get("message"), dict):
        raise InvalidMessageError(f"not a LangChain original: format {original.get('format')!r}")
    return messages_from_dict([original["message"]])[0]


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
                    {
                        "name": call.function.name,
                        "args": call.function.arguments,
                        "id": call.id,
                        "error": str(exc),
                        "type": "invalid_tool_call",
                    }
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


def _from_entry(entry: ContextEntry) -> BaseMessage:
    original = entry.original
    if original is not None and original.get("format") == FORMAT:
        message = from_original(original)
        if entry.reduced:  # the placeholder's text, the call id and the rest kept
            update: dict[str, Any] = {"content": entry.message["content"]}
            if isinstance(message, ToolMessage):
                update["artifact"] = None
            return message.model_copy(update=update)
        return message
    message = to_langchain(entry.message)
    digest = hashlib.sha256(Message.from_openai(entry.message).canonical_json().encode()).hexdigest()
    message.id = f"{LEDGER_ID_PREFIX}{digest[:32]}"
    return message


def langchain_memory(
    ledger: Ledger, conversation_id: Any, *, version: int | None = None
) -> tuple[list[BaseMessage], int]:
    """The working memory of a conversation as LangChain messages, and the aggregate
    version it was read at. Messages appended from LangChain come back as they were
    appended; the system prompt, summaries and chat-format messages are converted
    (with a stable id made from their content)."""
    memory = context_entries(ledger, conversation_id, version=version)
    return [_from_entry(e) for e in memory.entries], memory.version


def hidden_from_model(message: BaseMessage) -> bool:
    """Whether ``message`` is a ``ToolMessage`` marked as filtered from the model
    (``response_metadata={"hidden_from_model": True}``)."""
    return isinstance(message, ToolMessage) and message.response_metadata.get(HIDDEN_KEY) is True


def append_langchain(
    ledger: Ledger,
    conversation_id: Any,
    messages: Sequence[BaseMessage],
    hide: Callable[[ToolMessage], bool] | None = None,
) -> list[int]:
    """Append LangChain messages, each with its lossless original, in one transaction.
    A ``ToolMessage`` marked ``hidden_from_model``, or one ``hide`` picks, is stored as
    hidden from the model: the memory and the summarizer get its placeholder."""
    pairs = [(from_langchain(m), original_of(m)) for m in messages]
    hidden = {
        m.tool_call_id
        for m in messages
        if isinstance(m, ToolMessage) and (hidden_from_model(m) or (hide is not None and hide(m)))
    }
    return extend_with_originals(ledger, conversation_id, pairs, hidden_call_ids=hidden) if pairs else []
