"""Responses-format items <-> chat-completions messages.

The OpenAI Responses API and the Agents SDK exchange *items* (``message``,
``function_call``, ``function_call_output``, ``reasoning``, hosted tool calls, ...);
the ledger keeps chat-completions ``Message``\\ s. ``messages_from_items`` groups items
into messages, each carrying the raw items it stands for (kept verbatim, ids
included), so ``items_of`` gives every item back exactly:

- ``message`` items (with or without ``type``) map to their role; content parts are
  joined into text (images, files and audio become a short description).
- A run of model-side items (assistant messages, reasoning, function calls, hosted
  tool calls) that holds ``function_call`` items becomes ONE assistant message whose
  ``tool_calls`` are the calls (``call_id`` -> id) and whose text is the rest of the
  run; so parallel calls are one group, and reasoning stays with the call it preceded.
- Each ``function_call_output`` becomes a ``tool`` message.
- Items the summarizer cannot read (reasoning, hosted tool calls, unknown types) are
  described (``[reasoning: ...]``) and attached to the next message of the run, or to
  the previous one at its end, or stand as their own message: counted, summarized by
  their description, never dropped.

``items_from_message`` is the other way, for messages appended in chat format (and
for summaries and placeholders): a conversation may hold both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import FunctionCall, Message, ToolCall

__all__ = [
    "Item",
    "ItemMessage",
    "describe_item",
    "item_text",
    "items_from_message",
    "items_from_messages",
    "messages_from_items",
]

Item = dict[str, Any]
#: A chat message and the raw items it stands for.
ItemMessage = tuple[Message, tuple[Item, ...]]

_MESSAGE_ROLES = ("system", "developer", "user", "assistant")
#: Input-side item types besides messages and function outputs (answers to hosted calls).
_INPUT_SIDE_SUFFIXES = ("_output", "_response")
_TEXT_PARTS = ("input_text", "output_text", "text")
_DESCRIPTION_LIMIT = 400


def _kind(item: Item) -> str:
    kind = item.get("type")
    if kind is None and item.get("role") in _MESSAGE_ROLES:
        return "message"
    return str(kind) if kind is not None else "unknown"


def _model_side(item: Item) -> bool:
    kind = _kind(item)
    if kind == "message":
        return item.get("role") == "assistant"
    if kind in ("function_call_output", "item_reference", "unknown"):
        return False
    return not kind.endswith(_INPUT_SIDE_SUFFIXES)


def _clip(text: str) -> str:
    return text if len(text) <= _DESCRIPTION_LIMIT else text[: _DESCRIPTION_LIMIT - 1] + "…"


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return f"[{type(part).__name__}]"
    kind = part.get("type")
    if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
        return str(part["text"])
    if kind == "refusal":
        return f"[refusal: {part.get('refusal', '')}]"
    if kind == "input_image":
        return "[image]"
    if kind == "input_file":
        return f"[file: {part.get('filename') or part.get('file_id') or 'attached'}]"
    if kind == "input_audio":
        return "[audio]"
    return f"[{kind or 'content'}]"


def item_text(content: Any) -> str:
    """The text of a message item's content (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return "\n".join(_part_text(p) for p in content)
    return _part_text(content)


def describe_item(item: Item) -> str:
    """A short readable stand-in for an item the summarizer cannot read."""
    kind = _kind(item)
    if kind == "reasoning":
        summary = item.get("summary") or []
        text = " ".join(str(s.get("text", "")) for s in summary if isinstance(s, dict) and s.get("text"))
        return f"[reasoning: {_clip(text)}]" if text else "[reasoning]"
    details = []
    for key in ("name", "action", "query", "queries", "status"):
        value = item.get(key)
        if value:
            details.append(value if isinstance(value, str) else json.dumps(value, default=str))
    text = _clip(" ".join(details))
    return f"[{kind}: {text}]" if text else f"[{kind}]"


def _output_text(output: Any) -> str:
    text = item_text(output)
    return text if text else "(empty output)"


def _message_text(item: Item) -> tuple[str, str]:
    """The role and text of a message item (``(empty)`` for no text)."""
    role = item.get("role")
    if role not in _MESSAGE_ROLES:
        raise InvalidMessageError(
            f"a message item needs a role among {', '.join(_MESSAGE_ROLES)}, not {str(role)[:40]!r}",
            field="role",
        )
    return str(role), item_text(item.get("content")) or "(empty)"


def _function_call(item: Item) -> ToolCall:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
        raise InvalidMessageError(
            "a function_call item needs string call_id, name and arguments", field="function_call"
        )
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def _model_run(run: Sequence[Item]) -> list[ItemMessage]:
    """Messages for a run of consecutive model-side items: the groups are drawn first,
    then each message is built once."""
    calls = [_function_call(i) for i in run if _kind(i) == "function_call"]
    if calls:
        described = [_run_text(i) for i in run if _kind(i) != "function_call"]
        content = "\n".join(t for t in described if t) or None
        return [(Message(role="assistant", content=content, tool_calls=tuple(calls)), tuple(run))]
    groups: list[tuple[list[str], list[Item]]] = []
    texts: list[str] = []
    pending: list[Item] = []
    for item in run:
        pending.append(item)
        texts.append(_run_text(item))
        if _kind(item) == "message":  # an assistant message closes a group
            groups.append((texts, pending))
            texts, pending = [], []
    if pending:  # what follows the last message joins it (or stands alone)
        if groups:
            groups[-1][0].extend(texts)
            groups[-1][1].extend(pending)
        else:
            groups.append((texts, pending))
    return [(Message(role="assistant", content="\n".join(t)), tuple(raw)) for t, raw in groups]


def _run_text(item: Item) -> str:
    if _kind(item) == "message":
        return _message_text(item)[1]
    return describe_item(item)


def messages_from_items(items: Iterable[Item]) -> list[ItemMessage]:
    """Group Responses items into chat messages, each with the items it stands for.
    ``items`` is read once, in order (it may be a generator), and each message is built
    once."""
    out: list[ItemMessage] = []
    run: list[Item] = []
    for item in items:
        if not isinstance(item, dict):
            raise InvalidMessageError(f"an item must be a dict, not {type(item).__name__}")
        if _model_side(item):
            run.append(item)
            continue
        if run:
            out.extend(_model_run(run))
            run = []
        kind = _kind(item)
        if kind == "message":
            role, text = _message_text(item)
            out.append((Message(role=role, content=text), (item,)))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise InvalidMessageError("a function_call_output item needs a string call_id")
            message = Message(role="tool", tool_call_id=call_id, content=_output_text(item.get("output")))
            out.append((message, (item,)))
        else:
            out.append((Message(role="user", content=describe_item(item)), (item,)))
    if run:
        out.extend(_model_run(run))
    return out


def items_from_message(message: Message) -> list[Item]:
    """Responses items for a chat message that carries no raw items."""
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": message.text}]
    out: list[Item] = []
    if message.content is not None and (message.text or not message.tool_calls):
        out.append({"type": "message", "role": message.role, "content": message.text})
    for call in message.tool_calls or ():
        out.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.function.name,
                "arguments": call.function.arguments,
            }
        )
    return out


def items_from_messages(messages: Iterable[ItemMessage | Message]) -> list[Item]:
    """Flatten messages back into items: raw items where kept, converted otherwise."""
    out: list[Item] = []
    for entry in messages:
        message, raw = entry if isinstance(entry, tuple) else (entry, ())
        out.extend(json.loads(json.dumps(raw)) if raw else items_from_message(message))
    return out
