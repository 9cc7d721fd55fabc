"""Responses items <-> chat messages: grouping, descriptions, exact round trips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.domain.values.items import items_from_message, items_from_messages, messages_from_items

USER = {"role": "user", "content": "hi"}
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]}


def call(n: int, name: str = "f") -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"c{n}", "name": name, "arguments": "{}", "id": f"fc_{n}",
            "status": "completed"}


def output(n: int) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n}"}


def said(words: str) -> dict[str, Any]:
    return {"id": f"msg_{words}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": words, "annotations": []}]}


def test_parallel_calls_become_one_assistant_message_with_the_reasoning_before_them() -> None:
    grouped = messages_from_items([USER, REASONING, call(1), call(2, "g"), output(1), output(2)])
    messages = [m.to_openai() for m, _ in grouped]
    assert messages[1] == {
        "role": "assistant", "content": "[reasoning: plan]",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ],
    }
    assert grouped[1][1] == (REASONING, call(1), call(2, "g"))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]


def test_unreadable_items_are_described_never_dropped() -> None:
    image = {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                         {"type": "input_image", "image_url": "data:x"}]}
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed"}
    unknown = {"type": "mystery_output", "payload": 1}
    grouped = messages_from_items([image, search, said("found"), unknown, REASONING])
    texts = [m.text for m, _ in grouped]
    assert texts == ["look\n[image]", "[web_search_call: completed]\nfound", "[mystery_output]",
                     "[reasoning: plan]"]
    assert [i for _, raw in grouped for i in raw] == [image, search, said("found"), unknown, REASONING]


def test_chat_messages_become_items_and_back_to_the_same_messages() -> None:
    chat = [
        cl.Message(role="user", content="hi"),
        cl.Message.from_openai({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}),
        cl.Message(role="tool", tool_call_id="c1", content="done"),
        cl.Message(role="assistant", content="ok"),
    ]
    items = items_from_messages(chat)
    assert [m for m, _ in messages_from_items(items)] == chat
    assert items_from_message(chat[2]) == [{"type": "function_call_output", "call_id": "c1", "output": "done"}]


def test_a_bad_item_is_an_invalid_message_error() -> None:
    with pytest.raises(cl.InvalidMessageError):
        messages_from_items([{"type": "function_call", "call_id": 3}])
    with pytest.raises(cl.InvalidMessageError):
        messages_from_items(["text"])  # type: ignore[list-item]


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    n = 0
    for kind in draw(st.lists(st.sampled_from(["user", "said", "calls", "reasoning"]), max_size=12)):
        if kind == "user":
            items.append({"role": "user", "content": draw(st.text(max_size=20))})
        elif kind == "said":
            items.append(said(draw(st.text(min_size=1, max_size=20))))
        elif kind == "reasoning":
            items.append(REASONING)
        else:
            count = draw(st.integers(1, 3))
            ids = range(n, n + count)
            n += count
            items.extend(call(i) for i in ids)
            items.extend(output(i) for i in ids)
    return items


@settings(deadline=None)  # the first example loads the tiktoken encoding
@given(conversations())
def test_every_item_sequence_round_trips_exactly_through_the_ledger(items: list[dict[str, Any]]) -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(None)
        ledger.append_items(cid, items)
        assert ledger.transcript_items(cid) == items
        assert ledger.context_items(cid) == items
        assert ledger.verify(cid).ok


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_items_are_kept_as_the_log_gives_them_back_and_keys_json_would_change_are_refused(
    url: str, tmp_path: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'items.db'}" if url == "sqlite" else url
    parts = ({"type": "input_text", "text": "a"}, {"type": "input_image", "file_id": "file-1"})
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start(None)
        ledger.append_items(cid, [{"role": "user", "content": parts}])
        kept = [{"role": "user", "content": list(parts)}]
        assert ledger.context_items(cid) == ledger.transcript_items(cid) == kept  # lists, warm or cold
        cyclic: dict[str, Any] = {"role": "user", "content": "b"}
        cyclic["self"] = cyclic
        for bad in ({"role": "user", "content": "b", "meta": {1: "x", "1": "y"}},
                    {"role": "user", "content": "b", "meta": [{(1, 2): "x"}]}, cyclic):
            with pytest.raises(cl.InvalidArgumentError):
                ledger.append_items(cid, [bad])
        assert ledger.transcript_items(cid) == kept
