"""OpenAI chat-completions ordering rules, checked independently of the library."""

from __future__ import annotations

from typing import Any


def violations(messages: list[dict[str, Any]]) -> list[str]:
    """Every rule the prompt breaks (empty: OpenAI would accept its order)."""
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
            ids = [c["id"] for c in message["tool_calls"]]
            if len(set(ids)) != len(ids):
                problems.append(f"{index}: duplicate call ids {ids}")
            open_calls = set(ids)
            in_group = True
        elif message.get("content") is None:
            problems.append(f"{index}: {role} message without content")
    if open_calls:
        problems.append(f"end: calls {sorted(open_calls)} never answered")
    return problems


def assert_valid(messages: list[dict[str, Any]]) -> None:
    found = violations(messages)
    assert not found, "; ".join(found)
