"""OpenAI's ordering rules for a chat-completions prompt, checked independently of the
library: what a user asserts about whatever they are about to send."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["assert_valid_openai_context", "openai_context_violations"]


def openai_context_violations(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every rule the prompt breaks (empty: OpenAI would accept its order).

    Every ``tool`` message answers an open call of the immediately preceding assistant
    message, every call is answered before anything else is said, call ids are unique
    within their group, and every message but a calling assistant's has content.
    """
    problems: list[str] = []
    open_calls: set[str] = set()
    in_group = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not in_group:
                problems.append(f"{index}: tool message outside a tool-call group")
            elif call_id not in open_calls:
                problems.append(f"{index}: tool message answers no open call ({call_id})")
            else:
                open_calls.discard(call_id)
            continue
        if open_calls:
            problems.append(f"{index}: {role} message before calls {sorted(open_calls)} were answered")
        open_calls = set()
        in_group = False
        if role == "assistant" and message.get("tool_calls"):
            ids = [str(call["id"]) for call in message["tool_calls"]]
            if len(set(ids)) != len(ids):
                problems.append(f"{index}: duplicate call ids {ids}")
            open_calls = set(ids)
            in_group = True
        elif message.get("content") is None:
            problems.append(f"{index}: {role} message without content")
    if open_calls:
        problems.append(f"end: calls {sorted(open_calls)} never answered")
    return problems


def assert_valid_openai_context(messages: Sequence[Mapping[str, Any]]) -> None:
    """Raise ``AssertionError`` naming every broken rule unless OpenAI would accept the
    order of ``messages`` (e.g. ``ledger.context(cid)``)."""
    found = openai_context_violations(messages)
    if found:
        raise AssertionError("; ".join(found))
