"""Anthropic messages in (``formats.anthropic``) and the working memory out as a
``messages.create`` request (``formats.anthropic_render``), on ``ContextEntry`` values."""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.application.formats.anthropic import AnthropicAdapter
from contextledger.application.formats.anthropic_render import render_anthropic
from contextledger.application.formats.originals import ContextEntry
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.testing import anthropic_request_violations, assert_valid_anthropic_request

ADAPTER = AnthropicAdapter()
THINKING = {"type": "thinking", "thinking": "Two cities: call twice.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"}
ASK = {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?",
                                     "cache_control": {"type": "ephemeral"}}]}
CALLS = {"role": "assistant", "content": [
    THINKING,
    {"type": "text", "text": "Checking both."},
    {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Paris"}},
    {"type": "tool_use", "id": "toolu_02", "name": "weather", "input": {"city": "Rome", "units": None}},
]}
RESULTS = {"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C, clear"},
    {"type": "tool_result", "tool_use_id": "toolu_02",
     "content": [{"type": "text", "text": "22C"},
                 {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}}]},
    {"type": "text", "text": "And tomorrow?"},
]}
ANSWER = {"role": "assistant", "content": [
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    {"type": "text", "text": "Paris 18C, Rome 22C.", "citations": []},
]}
CONVERSATION = [ASK, CALLS, RESULTS, ANSWER]


def entries(messages: list[dict[str, Any]], *, system: str | None = "Be brief.",
            reduced: frozenset[str] = frozenset()) -> list[ContextEntry]:
    out = [] if system is None else [ContextEntry({"role": "system", "content": system}, None, False, None)]
    position = 1
    for message in messages:
        if "format" in message:  # an OpenAI-form message appended without an original
            chat = {k: v for k, v in message.items() if k != "format"}
            out.append(ContextEntry(chat, None, False, position))
            position += 1
            continue
        decoded = ADAPTER.decode(message)
        for chat, original in zip(decoded.messages, decoded.originals, strict=True):
            shown = chat.to_openai()
            hidden = chat.role == "tool" and chat.tool_call_id in reduced
            if hidden:
                shown["content"] = f"[weather result omitted from context: 9 tokens, message {position}]"
            out.append(ContextEntry(shown, original, hidden, position))
            position += 1
    return out


def request(rendered: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-haiku-4-5", "max_tokens": 100, **rendered}


# ------------------------------------------------------------------ decoding


def test_message_params_with_anthropic_blocks_and_reply_objects_are_accepted() -> None:
    reply = anthropic.types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1}})
    assert ADAPTER.name == "anthropic"
    assert all(ADAPTER.accepts(m) for m in (CALLS, RESULTS, ANSWER, ASK, reply))


@pytest.mark.parametrize("obj", [
    {"role": "user", "content": "hi"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
    "hi", None,
])
def test_messages_that_read_the_same_in_openai_form_are_left_to_the_openai_adapter(obj: Any) -> None:
    assert not ADAPTER.accepts(obj)


def test_an_assistant_turn_becomes_one_message_with_its_parallel_calls_and_no_thinking() -> None:
    decoded = ADAPTER.decode(CALLS)
    assert [m.to_openai() for m in decoded.messages] == [{
        "role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "toolu_01", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
            {"id": "toolu_02", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Rome", "units": null}'}}]}]
    assert decoded.originals == ({"format": "anthropic", "version": 1, "message": CALLS, "parts": 1},)
    assert decoded.usage is None


def test_a_user_turn_becomes_its_tool_results_then_its_text_with_a_marker_on_each_after_the_first() -> None:
    decoded = ADAPTER.decode(RESULTS)
    assert [m.to_openai() for m in decoded.messages] == [
        {"role": "tool", "tool_call_id": "toolu_01", "content": "18C, clear"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "22C\n[image: image/png]"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert decoded.originals[0] == {"format": "anthropic", "version": 1, "message": RESULTS, "parts": 3}
    assert decoded.originals[1:] == ({"format": "anthropic", "version": 1, "part": 1},
                                     {"format": "anthropic", "version": 1, "part": 2})


def test_user_images_become_image_url_parts() -> None:
    decoded = ADAPTER.decode({"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}]})
    assert decoded.messages[0].to_openai()["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
        {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}}]


def test_a_reply_object_is_stored_as_the_param_it_is_sent_back_as_with_its_cache_usage() -> None:
    reply = anthropic.types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [THINKING, {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"a": None}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 30, "cache_creation_input_tokens": 100,
                  "cache_read_input_tokens": 2000}})
    decoded = ADAPTER.decode(reply)
    assert decoded.originals[0] is not None
    assert decoded.originals[0]["message"] == {"role": "assistant", "content": [
        THINKING, {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"a": None}}]}
    assert decoded.messages[0].content is None and decoded.messages[0].call_ids == ("toolu_9",)
    usage = decoded.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (2112, 30)
    assert (usage.cache_read_tokens, usage.cache_creation_tokens) == (2000, 100)


@pytest.mark.parametrize(("message", "field"), [
    ({"role": "system", "content": [{"type": "tool_use"}]}, "role"),
    ({"role": "user", "content": []}, "content"),
    ({"role": "user", "content": [{"text": "no type"}]}, "content"),
    ({"role": "user", "content": [{"type": "tool_result"}]}, "content"),
    ({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}, "content"),
    ({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "bad name", "input": {}}]},
     "tool_calls"),
    ({"role": "user", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}, "content"),
    ({"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}, "content"),
    ({"role": "user", "content": [{"type": "document", "source": {}, "cache_control": {}}], "extra": 1},
     "extra"),
    ({"role": "user", "content": [{"type": "text", "text": "x", "citations": [float("nan")]}]}, "content"),
])
def test_malformed_messages_are_refused_naming_the_field(message: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        ADAPTER.decode(message)
    assert caught.value.field == field


# ------------------------------------------------------------------ rendering


def test_whole_wire_messages_come_back_byte_identical_and_valid() -> None:
    rendered = render_anthropic(entries(CONVERSATION))
    assert json.dumps(rendered["messages"]) == json.dumps(CONVERSATION)
    assert rendered["system"] == [{"type": "text", "text": "Be brief."}]
    assert_valid_anthropic_request(request(rendered))


def test_a_reduced_tool_result_is_its_placeholder_inside_the_same_block() -> None:
    rendered = render_anthropic(entries(CONVERSATION, reduced=frozenset({"toolu_02"})))
    expected = copy.deepcopy(RESULTS)
    expected["content"][1]["content"] = "[weather result omitted from context: 9 tokens, message 4]"
    assert rendered["messages"][2] == expected
    assert rendered["messages"][1] == CALLS


def test_a_changed_chat_message_is_converted_instead_of_sent_as_its_stale_original() -> None:
    memory = entries(CONVERSATION)
    edited = {"role": "user", "content": "And the day after?"}
    memory[5] = ContextEntry(edited, memory[5].original, False, memory[5].position)
    rendered = render_anthropic(memory)
    assert rendered["messages"][2]["content"][-1] == {"type": "text", "text": "And the day after?"}
    assert rendered["messages"][2]["content"][0]["tool_use_id"] == "toolu_01"
    assert_valid_anthropic_request(request(rendered))


def test_openai_form_messages_are_converted_into_alternating_turns() -> None:
    openai_form = [
        {"format": None, "role": "user", "content": "Book it."},
        {"format": None, "role": "assistant", "content": None, "tool_calls": [
            {"id": "call.1", "type": "function", "function": {"name": "book", "arguments": '{"seat": "12A"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "pay", "arguments": "[1]"}}]},
        {"format": None, "role": "tool", "tool_call_id": "call.1", "content": "booked"},
        {"format": None, "role": "tool", "tool_call_id": "call_2", "content": ""},
        {"format": None, "role": "user", "content": "thanks"},
        {"format": None, "role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    ]
    rendered = render_anthropic(entries(openai_form))
    assert rendered["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Book it."}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "book", "input": {"seat": "12A"}},
            {"type": "tool_use", "id": "call_2", "name": "pay", "input": {"arguments": [1]}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "booked"},
            {"type": "tool_result", "tool_use_id": "call_2"},
            {"type": "text", "text": "thanks"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
    ]
    assert_valid_anthropic_request(request(rendered))


SUMMARY = "Summary of the earlier conversation (messages 1-8):\nAda flies on 12 May."


def summarized(messages: list[dict[str, Any]]) -> list[ContextEntry]:
    memory = entries(messages)
    return [memory[0], ContextEntry({"role": "system", "content": SUMMARY}, None, False, None), *memory[1:]]


def test_a_summary_is_a_system_block_or_a_leading_user_turn() -> None:
    as_system = render_anthropic(summarized([ANSWER]))
    assert as_system["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": SUMMARY}]
    assert as_system["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "(continued)"}]}
    as_user = render_anthropic(summarized([ANSWER]), summary="user")
    assert as_user["system"] == [{"type": "text", "text": "Be brief."}]
    assert as_user["messages"] == [{"role": "user", "content": [{"type": "text", "text": SUMMARY}]}, ANSWER]
    for rendered in (as_system, as_user):
        assert_valid_anthropic_request(request(rendered))


def test_orphan_tool_results_become_text_and_unanswered_tool_uses_are_dropped() -> None:
    rendered = render_anthropic(entries([RESULTS, CALLS]))
    assert rendered["messages"][0]["content"][0] == {
        "type": "text", "text": "[result of tool call toolu_01] 18C, clear"}
    assert rendered["messages"][1] == {"role": "assistant", "content": [THINKING, CALLS["content"][1]]}
    assert_valid_anthropic_request(request(rendered))


def test_cache_marks_the_prefix_and_the_newest_turn_within_four_breakpoints() -> None:
    marked = {"type": "ephemeral"}
    many = [{"role": "user", "content": [{"type": "text", "text": f"q{i}", "cache_control": marked}]} if i % 2 == 0
            else {"role": "assistant", "content": [{"type": "text", "text": f"a{i}", "cache_control": marked}]}
            for i in range(6)]
    rendered = render_anthropic(summarized(many), cache=True)
    assert rendered["system"][-1]["cache_control"] == marked
    assert rendered["messages"][-1]["content"][-1]["cache_control"] == marked
    assert [m["content"][0].get("cache_control") for m in rendered["messages"]] == [None] * 3 + [marked] * 3
    assert_valid_anthropic_request(request(rendered))
    again = render_anthropic(summarized([*many, {"role": "user", "content": "more"}]), cache=True)
    assert json.dumps(again["system"]) == json.dumps(rendered["system"])


def test_cache_skips_a_thinking_block_in_the_newest_turn() -> None:
    only_thinking = {"role": "assistant", "content": [{"type": "text", "text": "ok"}, THINKING]}
    rendered = render_anthropic(entries([ASK, only_thinking], system=None), cache=True)
    assert rendered["system"] == []
    assert rendered["messages"][-1]["content"] == [{"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}},
                                                   THINKING]
    assert_valid_anthropic_request(request(rendered))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        render_anthropic(entries([ASK]), summary="model")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        render_anthropic([{"role": "user", "content": "hi"}])  # type: ignore[list-item]


# ------------------------------------------------------------------ the checker itself


@pytest.mark.parametrize(("body", "problem"), [
    ({"messages": []}, "non-empty"),
    ({"messages": [{"role": "assistant", "content": "x"}]}, "first message"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]}, "alternate"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]}, "non-empty text"),
    ({"messages": [ASK, {"role": "assistant", "content": [{"type": "text", "text": " \n"}]}]}, "non-whitespace"),
    ({"messages": [{"role": "user", "content": "\t"}]}, "non-whitespace"),
    ({"messages": [ASK, {"role": "assistant", "content": [{**THINKING, "signature": ""}]}]}, "signature"),
    ({"messages": [ASK, CALLS]}, "never answered"),
    ({"messages": [ASK, CALLS, {"role": "user", "content": [RESULTS["content"][0]]}]}, "not answered"),
    ({"messages": [RESULTS]}, "answers no tool_use"),
    ({"messages": [ASK, CALLS, {"role": "user", "content": [RESULTS["content"][2], *RESULTS["content"][:2]]}]},
     "come before"),
    ({"messages": [ASK], "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}] * 4},
     "over 4"),
    ({"messages": [ASK, {"role": "assistant", "content": [{**THINKING, "cache_control": {"type": "ephemeral"}}]}]},
     "thinking block cannot"),
])
def test_the_checker_names_every_broken_rule(body: dict[str, Any], problem: str) -> None:
    found = anthropic_request_violations({"model": "m", "max_tokens": 1, **body})
    assert any(problem in p for p in found), found


def test_the_checker_wants_model_and_max_tokens_except_for_counting() -> None:
    assert len(anthropic_request_violations({"messages": [ASK]})) == 2
    assert anthropic_request_violations({"messages": [ASK]}, count_tokens=True) == []


# ------------------------------------------------------------------ the property


TEXT = st.text(alphabet="abc xyz", min_size=0, max_size=8)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[ContextEntry], str, bool]:
    """Random valid working memories: user and assistant text, tool groups (parallel
    calls, some results reduced), in Anthropic or OpenAI form, with summaries."""
    out: list[ContextEntry] = []
    if draw(st.booleans()):
        out.append(ContextEntry({"role": "system", "content": "sys " + draw(TEXT)}, None, False, None))
    for layer in range(draw(st.integers(0, 2))):
        role = draw(st.sampled_from(["system", "user"]))
        out.append(ContextEntry({"role": role, "content": f"{SUMMARY} {layer}"}, None, False, None))
    position, calls = 1, 0
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "chat"]))
        anthropic_form = draw(st.booleans())
        if kind == "chat":  # chat form: whitespace-only text, system messages anywhere, then a question
            role = draw(st.sampled_from(["assistant", "system", "developer"]))
            text = draw(st.sampled_from(["", " ", "\n\t "]) | TEXT)
            out.append(ContextEntry({"role": role, "content": text}, None, False, position))
            out.append(ContextEntry({"role": "user", "content": "next"}, None, False, position + 1))
            position += 2
            continue
        if kind == "tools":
            ids = [f"toolu_{calls + i}" for i in range(draw(st.integers(1, 3)))]
            calls += len(ids)
            blocks: list[dict[str, Any]] = []
            if draw(st.booleans()):
                blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": "sig"})
            text = draw(TEXT)
            if text.strip():
                blocks.append({"type": "text", "text": text})
            blocks += [{"type": "tool_use", "id": i, "name": "f", "input": {"n": n}} for n, i in enumerate(ids)]
            results = [{"type": "tool_result", "tool_use_id": i, "content": draw(TEXT)} for i in ids]
            if draw(st.booleans()):
                results.append({"type": "text", "text": "then " + draw(TEXT)})
            if draw(st.booleans()):
                results[-1]["cache_control"] = {"type": "ephemeral"}
            wire = [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
        else:
            body = draw(TEXT)
            if not body.strip():
                body = "x"
            wire = [{"role": kind, "content": [{"type": "text", "text": body,
                                               "cache_control": {"type": "ephemeral"}}]}]
        reduced = draw(st.booleans())
        for message in wire:
            decoded = ADAPTER.decode(message)
            for chat, original in zip(decoded.messages, decoded.originals, strict=True):
                shown = chat.to_openai()
                hide = reduced and chat.role == "tool"
                if hide:
                    shown["content"] = f"[f result omitted from context: 3 tokens, message {position}]"
                out.append(ContextEntry(shown, original if anthropic_form else None, hide, position))
                position += 1
    return out, draw(st.sampled_from(["system", "user"])), draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_rendering_never_breaks_the_api_rules(case: tuple[list[ContextEntry], str, bool]) -> None:
    memory, summary, cache = case
    rendered = render_anthropic(memory, summary=summary, cache=cache)  # type: ignore[arg-type]
    assert anthropic_request_violations(request(rendered)) == []
    if cache:
        assert any(b.get("cache_control") for b in rendered["messages"][-1]["content"])
