"""Anthropic Messages API messages in: a message param or a whole reply, as chat messages.

One Anthropic message stands for one or several chat-completions messages (the
ledger counts, reduces, summarizes and sends those):

| Anthropic block                              | chat form                                  |
|----------------------------------------------|--------------------------------------------|
| assistant ``text``                           | the assistant message's ``content``        |
| assistant ``tool_use``                       | a ``tool_calls`` entry (``arguments`` is   |
|                                              | ``json.dumps(input)``)                     |
| assistant ``thinking``, ``redacted_thinking``, | nothing: kept only in the original       |
| server tool blocks                           |                                            |
| user ``tool_result``                         | one ``tool`` message each, first, in order |
|                                              | (its text; images and documents described) |
| user ``text``                                | a text part of one trailing user message   |
| user ``image`` (base64 or url source)        | an ``image_url`` part of it                |
| user ``document``, other blocks              | a text part describing it                  |

The first chat message of a wire message carries the original ``{"format":
"anthropic", "version": 1, "message": <the message param exactly as given>, "parts":
n}``; each of the n - 1 others carries ``{"format": "anthropic", "version": 1,
"part": i}``, so ``anthropic_render.render_anthropic`` can regroup them and give the
wire message back byte for byte. A reply object (``anthropic.types.Message``, or its
dump) is stored as the assistant message param it becomes when sent back
(``{"role": "assistant", "content": [...]}``, ``None`` fields left out) and reports
its usage. The SDK is never imported here: SDK objects are read through
``model_dump()``.
"""

from __future__ import annotations

import json
from typing import Any

from contextledger.application.formats.base import Decoded, ProviderUsage, sdk_dump
from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import Message

__all__ = ["FORMAT", "VERSION", "AnthropicAdapter", "chat_messages", "describe", "is_head", "is_part"]

#: The ``"format"`` of the originals this adapter stores.
FORMAT = "anthropic"
#: Their ``"version"``: the layout described in the module docstring.
VERSION = 1

#: Block types only the Anthropic format has (server tool blocks are matched by suffix).
_ANTHROPIC_BLOCKS = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "document",
        "server_tool_use",
        "mcp_tool_use",
        "mcp_tool_result",
        "search_result",
        "container_upload",
    }
)
_MESSAGE_KEYS = frozenset({"role", "content"})


def is_head(original: Any) -> bool:
    """True for the original that holds a whole Anthropic message."""
    return (
        isinstance(original, dict)
        and original.get("format") == FORMAT
        and original.get("version") == VERSION
        and isinstance(original.get("message"), dict)
        and isinstance(original.get("parts"), int)
    )


def is_part(original: Any) -> bool:
    """True for the marker of a chat message after the first of an Anthropic message."""
    return (
        isinstance(original, dict)
        and original.get("format") == FORMAT
        and original.get("version") == VERSION
        and isinstance(original.get("part"), int)
        and "message" not in original
    )


def _dump(obj: Any) -> Any:
    return sdk_dump(obj, keep=dict, exclude_none=True)


def _is_reply(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and data.get("type") == "message"
        and data.get("role") == "assistant"
        and "stop_reason" in data
        and isinstance(data.get("usage"), dict)
    )


def _is_anthropic_block(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if "cache_control" in block or "citations" in block:
        return True
    if kind == "image":
        return "source" in block
    return isinstance(kind, str) and (kind in _ANTHROPIC_BLOCKS or kind.endswith("_tool_result"))


class AnthropicAdapter:
    """Decodes Anthropic message params and reply objects (``name = "anthropic"``)."""

    name = FORMAT

    def accepts(self, obj: Any) -> bool:
        """True for an ``anthropic.types.Message`` (or its dump) and for a message param
        with a block only Anthropic has; plain text messages are left to the OpenAI
        adapter (they read the same in both formats)."""
        data = _dump(obj)
        if _is_reply(data):
            return True
        if not isinstance(data, dict) or data.get("role") not in ("user", "assistant"):
            return False
        content = data.get("content")
        return isinstance(content, list) and any(_is_anthropic_block(b) for b in content)

    def decode(self, obj: Any) -> Decoded:
        """The chat messages ``obj`` stands for, with their originals and the usage of
        a reply; ``InvalidMessageError`` (naming the ``field``) if it is malformed."""
        data = _dump(obj)
        usage = None
        if _is_reply(data):
            usage = _usage(data["usage"])
            param: Any = {"role": "assistant", "content": data.get("content")}
        else:
            param = data
        messages = chat_messages(param)
        try:
            original_message = json.loads(json.dumps(param, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidMessageError(f"the Anthropic message is not JSON: {exc}", field="content") from None
        head = {"format": FORMAT, "version": VERSION, "message": original_message, "parts": len(messages)}
        originals = [head] + [
            {"format": FORMAT, "version": VERSION, "part": i} for i in range(1, len(messages))
        ]
        return Decoded(tuple(messages), tuple(originals), usage)


def _usage(raw: dict[str, Any]) -> ProviderUsage:
    def count(key: str) -> int | None:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    given = count("input_tokens") or 0
    created, read = count("cache_creation_input_tokens"), count("cache_read_input_tokens")
    return ProviderUsage(
        prompt_tokens=given + (created or 0) + (read or 0),
        completion_tokens=count("output_tokens") or 0,
        cache_read_tokens=read,
        cache_creation_tokens=created,
    )


def _invalid(text: str, *, role: Any = None, field: str = "content") -> InvalidMessageError:
    return InvalidMessageError(text, role=role if isinstance(role, str) else None, field=field)


def _blocks(param: dict[str, Any], role: str) -> list[dict[str, Any]]:
    content = param.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise _invalid(
            "an Anthropic message's content must be a string or a non-empty list of blocks", role=role
        )
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _invalid(f"content[{index}] must be a block with a string 'type'", role=role)
        kind = block["type"]
        if kind == "text" and not isinstance(block.get("text"), str):
            raise _invalid(f"content[{index}]: a text block needs a string 'text'", role=role)
        if kind == "tool_use" and (
            not isinstance(block.get("id"), str)
            or not isinstance(block.get("name"), str)
            or not isinstance(block.get("input"), dict)
        ):
            raise _invalid(
                f"content[{index}]: a tool_use block needs a string 'id' and 'name' and an object 'input'",
                role=role,
            )
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise _invalid(f"content[{index}]: a tool_result block needs a string 'tool_use_id'", role=role)
        if kind in ("tool_use", "thinking", "redacted_thinking") and role != "assistant":
            raise _invalid(f"content[{index}]: {kind} blocks belong to assistant messages", role=role)
        if kind == "tool_result" and role != "user":
            raise _invalid(f"content[{index}]: tool_result blocks belong to user messages", role=role)
    return content


def describe(block: dict[str, Any]) -> str:
    """The text a block stands as in chat form (text itself; other blocks described)."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    raw = block.get("source")
    source: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if kind == "image":
        what = source.get("media_type") or source.get("url") or source.get("file_id") or "image"
        return f"[image: {what}]"
    if kind == "document":
        if source.get("type") == "text" and isinstance(source.get("data"), str):
            return str(source["data"])
        if source.get("type") == "content" and isinstance(source.get("content"), list):
            return "\n".join(describe(b) for b in source["content"] if isinstance(b, dict))
        what = block.get("title") or source.get("media_type") or source.get("url") or "document"
        return f"[document: {what}]"
    if kind == "search_result":
        texts = [describe(b) for b in block.get("content") or [] if isinstance(b, dict)]
        return "\n".join([str(block.get("title") or ""), *texts]).strip()
    return f"[{kind}]"


def _tool_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(describe(b) for b in content if isinstance(b, dict))
    return ""


def _user_part(block: dict[str, Any]) -> dict[str, Any]:
    source = block.get("source")
    if block.get("type") == "image" and isinstance(source, dict):
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            url = f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
            return {"type": "image_url", "image_url": {"url": url}}
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return {"type": "image_url", "image_url": {"url": source["url"]}}
    return {"type": "text", "text": describe(block)}


def chat_messages(param: Any) -> list[Message]:
    """The chat messages one Anthropic message param stands for (see the module
    docstring); ``InvalidMessageError`` if it is malformed."""
    if not isinstance(param, dict):
        raise InvalidMessageError(
            f"an Anthropic message must be a dict or a reply object, not {type(param).__name__}"
        )
    role = param.get("role")
    if role not in ("user", "assistant"):
        raise _invalid(
            f"an Anthropic message's role is user or assistant, not {str(role)[:40]!r}", field="role"
        )
    unknown = sorted(map(str, set(param) - _MESSAGE_KEYS))
    if unknown:
        raise _invalid(f"unknown Anthropic message keys: {unknown}", role=role, field=unknown[0])
    blocks = _blocks(param, role)
    if role == "assistant":
        return [_assistant(blocks)]
    out = [
        Message.from_openai({"role": "tool", "tool_call_id": b["tool_use_id"], "content": _tool_text(b)})
        for b in blocks
        if b["type"] == "tool_result"
    ]
    parts = [_user_part(b) for b in blocks if b["type"] != "tool_result"]
    if parts or not out:
        if all(p["type"] == "text" for p in parts):
            out.append(Message(role="user", content="\n".join(p["text"] for p in parts)))
        else:
            out.append(Message.from_openai({"role": "user", "content": parts}))
    return out


def _assistant(blocks: list[dict[str, Any]]) -> Message:
    pieces: list[str] = []
    calls: list[dict[str, Any]] = []
    adjacent = False
    for block in blocks:
        if block["type"] == "text":
            if pieces and not adjacent:
                pieces.append("\n\n")
            pieces.append(block["text"])
            adjacent = True
            continue
        adjacent = False
        if block["type"] == "tool_use":
            arguments = json.dumps(block["input"], ensure_ascii=False)
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }
            )
    text = "".join(pieces)
    if calls:
        return Message.from_openai({"role": "assistant", "content": text or None, "tool_calls": calls})
    return Message(role="assistant", content=text)
