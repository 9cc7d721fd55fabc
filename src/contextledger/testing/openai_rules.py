"""OpenAI's rules for a chat-completions prompt and for a Responses ``input``, checked
independently of the library: what a user asserts about whatever they are about to
send."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "assert_valid_openai_context",
    "assert_valid_responses_input",
    "openai_context_violations",
    "responses_input_violations",
]


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


def responses_input_violations(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every rule a Responses ``input`` breaks (empty: the API would accept it).

    Every item is an object with a known shape (a message with a role and content, a
    ``function_call`` with ``call_id``, ``name`` and string ``arguments``, a
    ``function_call_output`` with ``call_id`` and ``output``), every
    ``function_call_output`` answers a ``function_call`` sent before it (once), every
    call is answered, call ids are unique, and a ``reasoning`` item is followed by the
    item it produced (it is never last, nor followed by an input-side item).
    """
    problems: list[str] = []
    called: set[str] = set()
    answered: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            problems.append(f"{index}: not an object")
            continue
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            if item.get("role") not in ("system", "developer", "user", "assistant"):
                problems.append(f"{index}: message with role {item.get('role')!r}")
            if not isinstance(item.get("content"), str | list):
                problems.append(f"{index}: message without content")
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not isinstance(item.get("name"), str):
                problems.append(f"{index}: function_call without call_id or name")
            elif call_id in called:
                problems.append(f"{index}: duplicate call_id {call_id}")
            if not isinstance(item.get("arguments"), str):
                problems.append(f"{index}: function_call arguments are not a string")
            called.add(str(call_id))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in called:
                problems.append(
                    f"{index}: No tool call found for function call output with call_id {call_id}"
                )
            elif call_id in answered:
                problems.append(f"{index}: second output for call_id {call_id}")
            if "output" not in item:
                problems.append(f"{index}: function_call_output without output")
            answered.add(str(call_id))
        elif kind == "reasoning":
            following = items[index + 1] if index + 1 < len(items) else None
            if not isinstance(following, Mapping) or not _model_output(following):
                problems.append(f"{index}: reasoning item provided without its required following item")
        elif not isinstance(kind, str):
            problems.append(f"{index}: item without a type")
    for call_id in sorted(called - answered):
        problems.append(f"end: No tool output found for function call {call_id}")
    return problems


def _model_output(item: Mapping[str, Any]) -> bool:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return item.get("role") == "assistant"
    return isinstance(kind, str) and kind != "function_call_output" and not kind.endswith("_output")


def assert_valid_responses_input(items: Sequence[Mapping[str, Any]]) -> None:
    """Raise ``AssertionError`` naming every broken rule unless the Responses API would
    accept ``items`` as ``input`` (e.g. ``ledger.context(cid, format="responses")["input"]``)."""
    found = responses_input_violations(items)
    if found:
        raise AssertionError("; ".join(found))
