"""Gemini's rules for the ``contents`` of a ``generateContent`` request, checked
independently of the library: what a user asserts about whatever they are about to
send, and what ``FakeGeminiServer`` answers 400 to.

Keys may be spelled as google-genai's JSON dump spells them (``function_call``) or as
the REST API does (``functionCall``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["assert_valid_gemini_request", "gemini_request_violations"]

_DATA = {
    "text": "text",
    "inline_data": "inline_data",
    "inlineData": "inline_data",
    "file_data": "file_data",
    "fileData": "file_data",
    "function_call": "function_call",
    "functionCall": "function_call",
    "function_response": "function_response",
    "functionResponse": "function_response",
    "executable_code": "executable_code",
    "executableCode": "executable_code",
    "code_execution_result": "code_execution_result",
    "codeExecutionResult": "code_execution_result",
}


def _data(part: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(_DATA[key], value) for key, value in part.items() if key in _DATA and value is not None]


def _part_problems(
    where: str, role: str, part: Any
) -> tuple[list[str], list[tuple[str | None, str]], list[Any]]:
    """(problems, calls as (id, name), responses) of one part."""
    if not isinstance(part, Mapping):
        return [f"{where}: a part must be an object"], [], []
    data = _data(part)
    if len(data) != 1:
        return [f"{where}: a part must hold exactly one kind of data, not {[k for k, _ in data]}"], [], []
    kind, value = data[0]
    problems: list[str] = []
    calls: list[tuple[str | None, str]] = []
    responses: list[Any] = []
    if kind == "text" and not isinstance(value, str):
        problems.append(f"{where}: text must be a string")
    if kind in ("function_call", "function_response"):
        if not isinstance(value, Mapping) or not isinstance(value.get("name"), str) or not value["name"]:
            return [f"{where}: {kind} needs a name"], [], []
        if kind == "function_call":
            if role != "model":
                problems.append(f"{where}: a function_call in a {role} turn")
            if not isinstance(value.get("args", {}), Mapping):
                problems.append(f"{where}: function_call args must be an object")
            calls.append((value.get("id"), value["name"]))
        else:
            if role != "user":
                problems.append(f"{where}: a function_response in a {role} turn")
            if not isinstance(value.get("response", {}), Mapping):
                problems.append(f"{where}: function_response response must be an object")
            responses.append(value)
    return problems, calls, responses


def _match(where: str, calls: list[tuple[str | None, str]], responses: list[Any]) -> list[str]:
    """Every call answered exactly once, by id where the response names one, else by name."""
    problems: list[str] = []
    waiting = list(calls)
    for response in responses:
        call_id, name = response.get("id"), response["name"]
        if call_id is not None:
            found = next((i for i, (wanted, _) in enumerate(waiting) if wanted == call_id), None)
        else:  # by name, an id-less call first
            named = [i for i, (_, wanted) in enumerate(waiting) if wanted == name]
            found = next((i for i in named if waiting[i][0] is None), named[0] if named else None)
        if found is None:
            problems.append(
                f"{where}: function_response {name!r} ({call_id}) answers no call of the turn before"
            )
            continue
        if waiting[found][1] != name:
            problems.append(f"{where}: function_response {name!r} answers a call of {waiting[found][1]!r}")
        del waiting[found]
    if waiting:
        problems.append(f"{where}: calls {[f'{n}({i})' for i, n in waiting]} never answered")
    return problems


def gemini_request_violations(
    contents: Sequence[Mapping[str, Any]], *, system_instruction: Any = None
) -> list[str]:
    """Every rule ``contents`` breaks (empty: Gemini would accept them).

    At least one turn; roles ``user`` and ``model`` only; the first turn a user turn;
    every turn has parts, each holding exactly one kind of data; function calls only
    in model turns, function responses only in user turns; the turn after a model
    turn with calls is a user turn answering every call once (by id when the response
    has one, else by name), and no function response stands anywhere else. A
    ``system_instruction`` holds text parts only.
    """
    problems: list[str] = []
    if system_instruction is not None:
        parts = system_instruction.get("parts") if isinstance(system_instruction, Mapping) else None
        if isinstance(system_instruction, str):
            parts = [{"text": system_instruction}]
        if not isinstance(parts, list) or not all(
            isinstance(p, Mapping) and [k for k, _ in _data(p)] == ["text"] for p in parts
        ):
            problems.append("system_instruction: text parts only")
    if not contents:
        return [*problems, "contents: no turns"]
    calls_before: list[tuple[str | None, str]] = []
    for index, turn in enumerate(contents):
        where = f"contents[{index}]"
        role = turn.get("role") if isinstance(turn, Mapping) else None
        if role not in ("user", "model"):
            problems.append(f"{where}: role must be 'user' or 'model', not {role!r}")
        if index == 0 and role != "user":
            problems.append(f"{where}: the first turn must be a user turn")
        parts = turn.get("parts") if isinstance(turn, Mapping) else None
        if not isinstance(parts, list) or not parts:
            problems.append(f"{where}: a turn needs at least one part")
            parts = []
        calls: list[tuple[str | None, str]] = []
        responses: list[Any] = []
        for number, part in enumerate(parts):
            found, part_calls, part_responses = _part_problems(f"{where}.parts[{number}]", str(role), part)
            problems.extend(found)
            calls.extend(part_calls)
            responses.extend(part_responses)
        if calls_before:
            if role != "user" or not responses:
                problems.append(f"{where}: the calls of the turn before are not answered here")
            else:
                problems.extend(_match(where, calls_before, responses))
        elif responses:
            problems.append(f"{where}: function responses without calls in the turn before")
        calls_before = calls
    if calls_before:
        problems.append(f"end: calls {[name for _, name in calls_before]} never answered")
    return problems


def assert_valid_gemini_request(
    contents: Sequence[Mapping[str, Any]], *, system_instruction: Any = None
) -> None:
    """Raise ``AssertionError`` naming every broken rule unless Gemini would accept
    ``contents`` (e.g. ``render_gemini(...)["contents"]``)."""
    found = gemini_request_violations(contents, system_instruction=system_instruction)
    if found:
        raise AssertionError("; ".join(found))
