"""The Anthropic Messages API's rules for a ``messages.create`` request, checked
independently of the library: what a user asserts about whatever they are about to send.

``anthropic_request_violations(request)`` lists every rule the request breaks:

- ``messages`` is a non-empty list; each message is ``user`` or ``assistant`` with a
  string or a non-empty list of blocks; the first is from the user; roles alternate.
- Text blocks (and string contents) carry text that is not only whitespace; ``system``
  is a string or a list of text blocks with non-empty text.
- ``thinking`` blocks carry a non-empty ``signature``, ``redacted_thinking`` blocks
  non-empty ``data``, and both stand only in assistant turns.
- Tool ids match ``^[A-Za-z0-9_-]+$`` and are unique; tool names match
  ``^[A-Za-z0-9_-]{1,128}$``; ``input`` is an object.
- Every ``tool_use`` is answered by a ``tool_result`` in the very next (user) turn;
  every ``tool_result`` answers a ``tool_use`` of the turn just before, once; a user
  turn's ``tool_result`` blocks come before its other blocks.
- At most 4 ``cache_control`` breakpoints (system, tools and messages), each
  ``{"type": "ephemeral"}`` (with an optional ``ttl`` of ``"5m"`` or ``"1h"``), none
  on a thinking block.
- For ``messages.create`` (not ``count_tokens``): a string ``model`` and a positive
  integer ``max_tokens``.
- A ``compaction`` block stands only in an assistant turn, its ``content`` a non-empty
  string or null. The API reads a request from its newest compaction block on (every
  block before it is dropped), so the rules apply to that part, which may start with
  the assistant turn holding the block.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from contextledger.testing.compaction import after_compaction

__all__ = ["MAX_BREAKPOINTS", "anthropic_request_violations", "assert_valid_anthropic_request"]

#: The most ``cache_control`` breakpoints a request may carry.
MAX_BREAKPOINTS = 4
_TOOL_ID = re.compile(r"^[A-Za-z0-9_-]+$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_USER_ONLY = ("tool_result", "image", "document", "search_result")
_ASSISTANT_ONLY = ("tool_use", "thinking", "redacted_thinking", "server_tool_use", "compaction")


def _breakpoints(blocks: Any, where: str, problems: list[str]) -> int:
    """How many ``cache_control`` marks ``blocks`` carry (nested ones included)."""
    if not isinstance(blocks, list):
        return 0
    count = 0
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        mark = block.get("cache_control")
        if mark is not None:
            count += 1
            if (
                not isinstance(mark, dict)
                or mark.get("type") != "ephemeral"
                or set(mark) - {"type", "ttl"}
                or mark.get("ttl", "5m") not in ("5m", "1h")
            ):
                problems.append(f"{where}[{index}]: cache_control must be {{'type': 'ephemeral'}}")
            if block.get("type") in ("thinking", "redacted_thinking"):
                problems.append(f"{where}[{index}]: a thinking block cannot carry cache_control")
        count += _breakpoints(block.get("content"), f"{where}[{index}].content", problems)
    return count


def _check_block(block: Any, role: str, where: str, problems: list[str]) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        problems.append(f"{where}: a block must be an object with a string type")
        return
    kind = block["type"]
    if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
        problems.append(f"{where}: text blocks must have non-empty text")
    elif kind == "text" and not block["text"].strip():
        problems.append(f"{where}: text content blocks must contain non-whitespace text")
    if role == "assistant" and kind in _USER_ONLY:
        problems.append(f"{where}: {kind} blocks belong to user turns")
    if role == "user" and kind in _ASSISTANT_ONLY:
        problems.append(f"{where}: {kind} blocks belong to assistant turns")
    if kind == "thinking" and (not isinstance(block.get("signature"), str) or not block["signature"]):
        problems.append(f"{where}: a thinking block needs its signature")
    if kind == "redacted_thinking" and (not isinstance(block.get("data"), str) or not block["data"]):
        problems.append(f"{where}: a redacted_thinking block needs its data")
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not _TOOL_ID.match(block["id"]):
            problems.append(f"{where}: tool_use id must match ^[A-Za-z0-9_-]+$")
        if not isinstance(block.get("name"), str) or not _TOOL_NAME.match(block["name"]):
            problems.append(f"{where}: tool_use name must match ^[A-Za-z0-9_-]{{1,128}}$")
        if not isinstance(block.get("input"), dict):
            problems.append(f"{where}: tool_use input must be an object")
    text = block.get("content")
    if kind == "compaction" and text is not None and (not isinstance(text, str) or not text):
        problems.append(f"{where}: a compaction block's content is a non-empty string or null")
    if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
        problems.append(f"{where}: tool_result needs a string tool_use_id")


def _blocks_of(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def anthropic_request_violations(request: Mapping[str, Any], *, count_tokens: bool = False) -> list[str]:
    """Every rule the request breaks (empty: the API would accept its shape); with
    ``count_tokens`` the request is one for ``messages/count_tokens`` (no
    ``max_tokens``)."""
    problems: list[str] = []
    if not count_tokens:
        if not isinstance(request.get("model"), str) or not request.get("model"):
            problems.append("model must be a non-empty string")
        tokens = request.get("max_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            problems.append("max_tokens must be a positive integer")
    system = request.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            problems.append("system must be a string or a list of text blocks")
        else:
            for index, block in enumerate(system):
                if not isinstance(block, dict) or block.get("type") != "text":
                    problems.append(f"system[{index}]: system blocks must be text blocks")
                elif not isinstance(block.get("text"), str) or not block["text"]:
                    problems.append(f"system[{index}]: text blocks must have non-empty text")
    breakpoints = _breakpoints(system, "system", problems)
    breakpoints += _breakpoints(request.get("tools"), "tools", problems)
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages must be a non-empty list")
        return problems
    for index, message in enumerate(messages):
        for number, block in enumerate(_blocks_of(message) if isinstance(message, dict) else []):
            if (
                isinstance(block, dict)
                and block.get("type") == "compaction"
                and message.get("role") != "assistant"
            ):
                problems.append(
                    f"messages[{index}].content[{number}]: compaction blocks belong to assistant turns"
                )
    kept = after_compaction(messages)
    skipped = len(messages) - len(kept)
    first = _blocks_of(kept[0]) if kept and isinstance(kept[0], dict) else []
    compacted = bool(first) and isinstance(first[0], dict) and first[0].get("type") == "compaction"
    seen_ids: set[str] = set()
    open_ids: list[str] = []
    previous_role: Any = None
    for index, message in enumerate(kept, start=skipped):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            problems.append(f"{where}: a message must be an object")
            continue
        role = message.get("role")
        content = message.get("content")
        if role not in ("user", "assistant"):
            problems.append(f"{where}: role must be user or assistant, not {role!r}")
        if index == skipped and role != "user" and not compacted:
            problems.append(f"{where}: the first message must be from the user")
        if index > skipped and role == previous_role:
            problems.append(f"{where}: two {role} turns in a row (roles must alternate)")
        if isinstance(content, str):
            if not content:
                problems.append(f"{where}: content must not be empty")
            elif not content.strip():
                problems.append(f"{where}: text content blocks must contain non-whitespace text")
        elif not isinstance(content, list) or not content:
            problems.append(f"{where}: content must be a string or a non-empty list of blocks")
        blocks = _blocks_of(message)
        for number, block in enumerate(blocks):
            if not (isinstance(block, dict) and block.get("type") == "compaction" and role != "assistant"):
                _check_block(block, str(role), f"{where}.content[{number}]", problems)
        breakpoints += _breakpoints(blocks, f"{where}.content", problems)
        results = [
            b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if open_ids:
            missing = [i for i in open_ids if i not in results]
            if role != "user" or missing:
                problems.append(f"{where}: tool_use {missing or open_ids} not answered in this turn")
        answered: set[Any] = set()
        for call_id in results:
            if call_id not in open_ids:
                problems.append(f"{where}: tool_result {call_id!r} answers no tool_use of the turn before")
            if call_id in answered:
                problems.append(f"{where}: tool_result {call_id!r} appears twice")
            answered.add(call_id)
        kinds = [b.get("type") for b in blocks if isinstance(b, dict)]
        if "tool_result" in kinds and any(
            k != "tool_result" for k in kinds[: len(kinds) - kinds[::-1].index("tool_result")]
        ):
            problems.append(f"{where}: tool_result blocks must come before any other block")
        open_ids = []
        if role == "assistant":
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    call_id = str(block.get("id"))
                    if call_id in seen_ids:
                        problems.append(f"{where}: tool_use id {call_id!r} used twice")
                    seen_ids.add(call_id)
                    open_ids.append(call_id)
        previous_role = role
    if open_ids:
        problems.append(f"end: tool_use {open_ids} never answered")
    if breakpoints > MAX_BREAKPOINTS:
        problems.append(f"{breakpoints} cache_control breakpoints, over {MAX_BREAKPOINTS}")
    return problems


def assert_valid_anthropic_request(request: Mapping[str, Any], *, count_tokens: bool = False) -> None:
    """Raise ``AssertionError`` naming every broken rule unless the API would accept
    the shape of ``request`` (e.g. ``{"model": ..., "max_tokens": ..., **rendered}``)."""
    found = anthropic_request_violations(request, count_tokens=count_tokens)
    if found:
        raise AssertionError("; ".join(found))
