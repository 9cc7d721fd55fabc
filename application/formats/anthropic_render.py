"""The working memory as an Anthropic ``messages.create`` request: ``system`` and ``messages``.

``render_anthropic(entries)`` takes ``ContextEntry`` values (``context_entries``) and
gives ``{"system": [...blocks], "messages": [...]}``:

- A wire message decoded by ``formats.anthropic`` whose chat messages are all in the
  working memory, unchanged and unreduced, comes back as a deep copy of its original,
  byte for byte (thinking and redacted_thinking blocks with their signatures,
  parallel ``tool_use``, images, ``cache_control``, citations). A reduced tool result
  (an old one, or a hidden one) becomes its placeholder text inside the same
  ``tool_result`` block; the rest of the wire message is kept.
- Everything else is converted from its chat form: the system prompt and the system or
  developer messages before the first other message become ``system`` text blocks (a
  later one stays in its place, as a user turn's text block ``[system] ...`` or
  ``[developer] ...``: ``system`` is not part of the turns); a summary becomes a ``system``
  text block (``summary="system"``), a leading user turn (``summary="user"``) or a
  leading assistant turn after the short user turn below (``summary="assistant"``); a user
  message becomes text and image blocks (``image_url`` parts as ``base64`` or ``url``
  image sources) and document blocks (a ``file`` part holding a PDF as a ``base64``
  source, plain text as a ``text`` source; other files named in a text block); text
  that is only whitespace is left out (the API refuses it); an assistant message
  becomes a text block and one ``tool_use`` block per call
  (``input=json.loads(arguments)``); a tool message becomes a ``tool_result`` block in
  a user turn.
- The result obeys the API's rules: adjacent turns of one role are merged (a user
  turn's ``tool_result`` blocks first), the first message is from the user (a short
  user turn is put first when needed), a ``tool_use`` left without a ``tool_result``
  in the very next user turn is dropped, and a ``tool_result`` answering no
  ``tool_use`` of the turn before becomes a text block. Tool ids converted from chat
  form keep to ``[A-Za-z0-9_-]`` (other characters become ``_``).
- A compaction Anthropic made (a native summary) is sent as it came: the assistant turn
  holding its ``compaction`` block comes first (the API reads a request from its newest
  compaction block on), followed by the messages after it. Any other format gets its
  summary text.
- ``cache=True`` marks ``cache_control: {"type": "ephemeral"}`` on the last block of
  the stable prefix (system and summary: the same block, unchanged, while they are
  unchanged) and on the last block of the newest turn that can carry one. At most 4
  breakpoints are sent in all: breakpoints the originals already carry count, and the
  oldest of theirs are dropped when there would be more.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from contextledger.application.formats.anthropic import chat_messages, describe, is_head, is_part
from contextledger.application.formats.base import labelled_instruction
from contextledger.application.formats.originals import NATIVE_FORMAT, ContextEntry
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.domain.values.messages import Message

__all__ = ["MAX_BREAKPOINTS", "render_anthropic"]

#: The most ``cache_control`` breakpoints one request may carry.
MAX_BREAKPOINTS = 4
#: The user turn put first when the working memory would start with the assistant.
CONTINUED = "(continued)"
_SUMMARY_PREFIX = "Summary of the earlier conversation"
_EPHEMERAL = {"type": "ephemeral"}
_UNCACHEABLE = ("thinking", "redacted_thinking")
_BAD_ID = re.compile(r"[^A-Za-z0-9_-]")

Block = dict[str, Any]
Turn = dict[str, Any]


def render_anthropic(
    entries: Sequence[ContextEntry],
    *,
    summary: Literal["system", "user", "assistant"] = "system",
    cache: bool = False,
) -> dict[str, Any]:
    """The working memory ``entries`` as ``{"system": [...], "messages": [...]}`` for
    ``messages.create`` (see the module docstring)."""
    if summary not in ("system", "user", "assistant"):
        raise InvalidArgumentError(
            f'summary must be "system", "user" or "assistant", not {summary!r}', argument="summary"
        )
    if isinstance(cache, bool) is False:
        raise InvalidArgumentError("cache must be True or False", argument="cache")
    system: list[Block] = []
    summaries: list[Block] = []
    compaction: Turn | None = None
    body: list[ContextEntry] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, ContextEntry):
            raise InvalidArgumentError(
                f"entries[{index}] is a {type(entry).__name__}, not a ContextEntry", argument="entries"
            )
        role = entry.message.get("role")
        if entry.position is None and _native_blocks(entry) is not None:
            compaction = {"role": "assistant", "content": _native_blocks(entry)}
        elif entry.position is None:
            text = Message.from_openai(entry.message).text
            if role in ("system", "developer") and index == 0 and not text.startswith(_SUMMARY_PREFIX):
                system.append({"type": "text", "text": text})
            elif text:
                summaries.append({"type": "text", "text": text})
        elif role in ("system", "developer") and not body:
            text = Message.from_openai(entry.message).text
            if text.strip():
                system.append({"type": "text", "text": text})
        else:  # a system message inside the conversation stays where it is (see _from_chat)
            body.append(entry)
    turns = _turns(body)
    if compaction is not None:  # the API reads the request from its compaction block on
        turns.insert(0, compaction)
    if summary == "system":
        system.extend(summaries)
    elif summaries:
        # As the assistant's, it follows the short user turn the API needs first.
        turns.insert(0, {"role": summary, "content": summaries})
    prefix = summaries[-1] if summaries else (system[-1] if system else None)
    if cache and prefix is not None:
        prefix["cache_control"] = dict(_EPHEMERAL)
    messages = _normalize(turns)
    ours: list[Block] = [prefix] if cache and prefix is not None else []
    if cache and messages:
        newest = _cache_newest(messages[-1])
        if newest is not None:
            ours.append(newest)
    _cap_breakpoints(system, messages, keep=ours)
    return {"system": system, "messages": messages}


# ------------------------------------------------------------------ grouping


def _turns(body: list[ContextEntry]) -> list[Turn]:
    turns: list[Turn] = []
    index = 0
    while index < len(body):
        size = _whole_group(body, index)
        if size:
            turns.append(_from_original(body[index : index + size]))
            index += size
        else:
            turns.append(_from_chat(body[index].message))
            index += 1
    return turns


def _whole_group(body: list[ContextEntry], index: int) -> int:
    """How many entries from ``index`` make one whole, unchanged wire message (0: none)."""
    head = body[index]
    if not is_head(head.original) or head.position is None:
        return 0
    assert head.original is not None
    parts = int(head.original["parts"])
    if parts < 1 or index + parts > len(body):
        return 0
    group = body[index : index + parts]
    for number, entry in enumerate(group[1:], start=1):
        if not is_part(entry.original) or entry.original is None or entry.original["part"] != number:
            return 0
        if entry.position != head.position + number:
            return 0
    try:
        decoded = chat_messages(head.original["message"])
    except InvalidMessageError:
        return 0
    if len(decoded) != parts:
        return 0
    for entry, message in zip(group, decoded, strict=True):
        try:
            shown = Message.from_openai(entry.message)
        except InvalidMessageError:
            return 0
        if entry.reduced:
            if shown.role != "tool" or shown.tool_call_id != message.tool_call_id:
                return 0
        elif shown != message:
            return 0
    return parts


def _from_original(group: list[ContextEntry]) -> Turn:
    head = group[0].original
    assert head is not None
    turn: Turn = copy.deepcopy(head["message"])
    for entry in group:
        if not entry.reduced:
            continue
        call_id = entry.message.get("tool_call_id")
        for block in turn["content"]:
            if block.get("type") == "tool_result" and block.get("tool_use_id") == call_id:
                block["content"] = Message.from_openai(entry.message).text
    return turn


# ------------------------------------------------------------------ chat form


def _tool_id(call_id: str) -> str:
    return _BAD_ID.sub("_", call_id)


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _file_block(file: dict[str, Any]) -> Block:
    """An OpenAI ``file`` part as a ``document`` block: a PDF (a data URI, or bare
    base64 named ``*.pdf``) as a base64 source, plain text as a text source; a file
    Anthropic cannot be given (an OpenAI ``file_id``, another type) as a line naming it."""
    data = str(file.get("file_data") or "")
    name = file.get("filename")
    found = re.match(r"data:([^;,]+);base64,(.*)", data, re.DOTALL)
    media, payload = (found.group(1), found.group(2)) if found else (None, data)
    if media is None and payload and isinstance(name, str) and name.lower().endswith(".pdf"):
        media = "application/pdf"
    block: Block | None = None
    if media == "application/pdf" and payload:
        block = {"type": "document", "source": {"type": "base64", "media_type": media, "data": payload}}
    elif media == "text/plain" and payload:
        try:
            text = base64.b64decode(payload, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            text = ""
        if text.strip():
            block = {"type": "document", "source": {"type": "text", "media_type": media, "data": text}}
    if block is None:
        return {"type": "text", "text": f"[file: {name or file.get('file_id') or media or 'file'}]"}
    if isinstance(name, str) and name:
        block["title"] = name
    return block


def _part_block(part: dict[str, Any]) -> Block | None:
    kind = part.get("type")
    if kind == "text":
        text = str(part.get("text") or "")
        return {"type": "text", "text": text} if text.strip() else None
    if kind == "file" and isinstance(part.get("file"), dict):
        return _file_block(part["file"])
    if kind == "image_url":
        url = str((part.get("image_url") or {}).get("url") or "")
        found = re.match(r"data:([^;,]+);base64,(.*)", url, re.DOTALL)
        if found:
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": found.group(1), "data": found.group(2)},
            }
        return {"type": "image", "source": {"type": "url", "url": url}}
    return {"type": "text", "text": f"[{kind}]"}


def _from_chat(message: dict[str, Any]) -> Turn:
    chat = Message.from_openai(message)
    blocks: list[Block] = []
    if chat.role == "tool":
        block: Block = {"type": "tool_result", "tool_use_id": _tool_id(chat.tool_call_id or "")}
        if chat.text.strip():
            block["content"] = chat.text
        return {"role": "user", "content": [block]}
    if chat.role in ("system", "developer"):
        text = labelled_instruction(chat.role, chat.text)
        return {"role": "user", "content": [{"type": "text", "text": text}] if text else []}
    if chat.role == "assistant":
        if chat.text.strip():  # the API refuses whitespace-only text blocks
            blocks.append({"type": "text", "text": chat.text})
        for call in chat.tool_calls or ():
            blocks.append(
                {
                    "type": "tool_use",
                    "id": _tool_id(call.id),
                    "name": call.function.name,
                    "input": _input(call.function.arguments),
                }
            )
        return {"role": "assistant", "content": blocks}
    if isinstance(chat.content, tuple):
        blocks = [b for b in (_part_block(dict(p)) for p in chat.content) if b is not None]
    elif chat.text.strip():
        blocks = [{"type": "text", "text": chat.text}]
    return {"role": "user", "content": blocks}


# ------------------------------------------------------------------ the API's rules


def _blocks(turn: Turn) -> list[Block]:
    """The turn's content as a list of blocks (a string content becomes one text block)."""
    content = turn.get("content")
    if isinstance(content, str):
        turn["content"] = [{"type": "text", "text": content}] if content else []
    return list(turn["content"])


def _empty(turn: Turn) -> bool:
    content = turn.get("content")
    return not content


def _results_first(turn: Turn) -> None:
    if turn["role"] != "user" or isinstance(turn.get("content"), str):
        return
    content = turn["content"]
    results = [b for b in content if b.get("type") == "tool_result"]
    ordered = results + [b for b in content if b.get("type") != "tool_result"]
    if any(a is not b for a, b in zip(ordered, content, strict=True)):
        turn["content"] = ordered


def _merge(turns: list[Turn]) -> list[Turn]:
    out: list[Turn] = []
    for turn in turns:
        if _empty(turn):
            continue
        if out and out[-1]["role"] == turn["role"]:
            out[-1] = {"role": turn["role"], "content": _blocks(out[-1]) + _blocks(turn)}
        else:
            out.append(turn)
    for turn in out:
        _results_first(turn)
    return out


def _result_text(block: Block) -> str:
    content = block.get("content")
    if isinstance(content, list):
        text = "\n".join(describe(b) for b in content if isinstance(b, dict))
    else:
        text = str(content or "")
    return f"[result of tool call {block.get('tool_use_id')}] {text}".rstrip()


def _pair_tools(turns: list[Turn]) -> bool:
    """Drop unanswered ``tool_use`` blocks, turn orphan ``tool_result`` blocks into
    text; True when anything changed."""
    changed = False
    for index, turn in enumerate(turns):
        if isinstance(turn.get("content"), str):
            continue
        if turn["role"] == "assistant":
            following = turns[index + 1] if index + 1 < len(turns) else None
            answered = set()
            if following is not None and not isinstance(following.get("content"), str):
                answered = {
                    b.get("tool_use_id") for b in following["content"] if b.get("type") == "tool_result"
                }
            kept = [b for b in turn["content"] if b.get("type") != "tool_use" or b.get("id") in answered]
            if len(kept) != len(turn["content"]):
                turn["content"], changed = kept, True
            continue
        before = turns[index - 1] if index else None
        open_ids = set()
        if before is not None and before["role"] == "assistant" and not isinstance(before["content"], str):
            open_ids = {b.get("id") for b in before["content"] if b.get("type") == "tool_use"}
        seen: set[Any] = set()
        content = []
        for block in turn["content"]:
            if block.get("type") == "tool_result":
                call_id = block.get("tool_use_id")
                if call_id not in open_ids or call_id in seen:
                    block, changed = {"type": "text", "text": _result_text(block)}, True
                seen.add(call_id)
            content.append(block)
        if changed:
            turn["content"] = content
    return changed


def _normalize(turns: list[Turn]) -> list[Turn]:
    turns = _merge(turns)
    for _ in range(len(turns) + 1):
        if not _pair_tools(turns):
            break
        turns = _merge(turns)
    if turns and turns[0]["role"] != "user" and not _starts_compacted(turns[0]):
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUED}]})
    return turns


def _native_blocks(entry: ContextEntry) -> list[Block] | None:
    """A copy of the compaction blocks an Anthropic native summary stands as (None: the
    entry is not one)."""
    original = entry.original
    if not original or original.get("format") != NATIVE_FORMAT or original.get("native") != "anthropic":
        return None
    return copy.deepcopy(list(original.get("payload") or []))


def _starts_compacted(turn: Turn) -> bool:
    blocks = _blocks(turn)
    return bool(blocks) and blocks[0].get("type") == "compaction"


# ------------------------------------------------------------------ prompt caching


def _cache_newest(turn: Turn) -> Block | None:
    """Mark the newest turn's last block that can carry a breakpoint; that block."""
    for block in reversed(_blocks(turn)):
        if block.get("type") in _UNCACHEABLE:
            continue
        if not block.get("cache_control"):
            block["cache_control"] = dict(_EPHEMERAL)
        return block
    return None


def _marked(blocks: Any, found: list[Block]) -> None:
    if not isinstance(blocks, list):
        return
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("cache_control"):
            found.append(block)
        _marked(block.get("content"), found)


def _cap_breakpoints(system: list[Block], messages: list[Turn], *, keep: list[Block]) -> None:
    """Drop the oldest breakpoints not in ``keep`` until at most ``MAX_BREAKPOINTS`` are left."""
    found: list[Block] = []
    _marked(system, found)
    for turn in messages:
        _marked(turn.get("content"), found)
    extra = len(found) - MAX_BREAKPOINTS
    kept_ids = {id(b) for b in keep}
    for block in found:
        if extra <= 0:
            break
        if id(block) not in kept_ids:
            del block["cache_control"]
            extra -= 1
