"""One set of cases run against the Ledger and the AsyncLedger, on every store: string
keys, the openai SDK's objects appended as they come, tools, usage and placement."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage

from contextledger.application import ReductionPolicy
from contextledger.application.shared.addressing import KEY_NAMESPACE
from contextledger.application.shared.ports import SummaryResult
from contextledger.domain.values.errors import (
    ConversationNotFoundError,
    DuplicateConversationError,
    InvalidArgumentError,
    InvalidMessageError,
)
from contextledger.testing import assert_valid_openai_context as assert_valid
from tests.support.twins import open_twin

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "description": "The unit of temperature to return",
                         "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}


def completion(text: str | None = "Sunny.", *, prompt_tokens: int = 40, calls: list[Any] | None = None,
               **message: Any) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": text, "refusal": None,
                                 "annotations": [], "tool_calls": calls, **message}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5},
    })


@pytest.fixture(params=["sync", "async"])
def ledger(request: pytest.FixtureRequest, store_url: str) -> Iterator[Any]:
    with open_twin(request.param, store_url, run_policy=False) as ledger:
        yield ledger


def test_a_key_names_the_conversation_everywhere_an_id_does(ledger: Any) -> None:
    cid = ledger.start("Be brief.", key="chat-7")
    assert cid == uuid.uuid5(KEY_NAMESPACE, "chat-7")
    assert ledger.append("chat-7", {"role": "user", "content": "hi"}) == 0
    assert ledger.append(str(cid), {"role": "assistant", "content": "hello"}) == 1
    assert ledger.context("chat-7") == ledger.context(cid)
    assert [e.position for e in ledger.transcript("chat-7")] == [0, 1]
    assert ledger.totals("chat-7").key == "chat-7"
    assert ledger.totals(cid).messages == 2


def test_a_second_start_with_the_same_key_is_refused_with_the_key(ledger: Any) -> None:
    ledger.start(key="chat-8")
    with pytest.raises(DuplicateConversationError) as caught:
        ledger.start("other", key="chat-8")
    assert caught.value.key == "chat-8"


def test_get_or_start_starts_once_and_then_returns_the_same_id(ledger: Any) -> None:
    first = ledger.get_or_start("chat-9", system_prompt="Be brief.")
    ledger.append(first, {"role": "user", "content": "hi"})
    again = ledger.get_or_start("chat-9", system_prompt="ignored: it exists")
    assert first == again
    assert ledger.context(first)[0] == {"role": "system", "content": "Be brief."}
    assert ledger.totals(first).messages == 1


@pytest.mark.parametrize(("ref", "argument"), [
    (42, "conversation_id"), ("", "conversation_id"), ("x" * 201, "conversation_id"),
    ("bad\ud800key", "conversation_id"), (None, "conversation_id"), (b"chat", "conversation_id"),
])
def test_malformed_ids_and_keys_get_a_typed_error_naming_the_argument(ledger: Any, ref: Any, argument: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        ledger.append(ref, {"role": "user", "content": "hi"})
    assert caught.value.argument == argument


def test_a_key_that_reads_as_a_uuid_is_refused_and_an_unknown_key_is_not_found(ledger: Any) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        ledger.start(key=str(uuid.uuid4()))
    assert caught.value.argument == "key"
    with pytest.raises(ConversationNotFoundError):
        ledger.context("never-started")


def test_an_sdk_message_and_a_whole_completion_are_appended_and_usage_is_recorded(ledger: Any) -> None:
    cid = ledger.start("You answer about the weather.", key="sdk-1")
    ledger.append(cid, {"role": "user", "content": "Weather in Paris?"})
    estimate = ledger.totals(cid).context_tokens
    reply = completion("Sunny.", prompt_tokens=estimate + 2)
    assert ledger.append(cid, reply) == 1
    ledger.append(cid, {"role": "user", "content": "And tomorrow?"})
    message = ChatCompletionMessage.model_validate({"role": "assistant", "content": "Rain.", "refusal": None,
                                                   "annotations": None, "audio": None, "function_call": None})
    assert ledger.append(cid, message) == 3
    assert ledger.append(cid, {"role": "user", "content": "ok"}) == 4
    assert ledger.append(cid, message.model_dump()) == 5
    context = ledger.context(cid)
    assert context[2] == {"role": "assistant", "content": "Sunny."}
    assert context[4] == {"role": "assistant", "content": "Rain."}
    assert_valid(context)  # type: ignore[arg-type]
    totals = ledger.totals(cid)
    assert (totals.usage_records, totals.provider_prompt_tokens) == (1, estimate + 2)
    assert totals.estimated_prompt_tokens == estimate
    assert totals.estimate_error == -2


def test_a_completion_with_tool_calls_opens_a_group_the_tool_results_close(ledger: Any) -> None:
    cid = ledger.start("Tools.", tools=[WEATHER_TOOL])
    ledger.append(cid, {"role": "user", "content": "Weather in Paris?"})
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "get_current_weather", "arguments": '{"location": "Paris"}'}}]
    ledger.append(cid, completion(None, calls=calls))
    ledger.append(cid, {"role": "tool", "tool_call_id": "call_1", "content": "18C"})
    context = ledger.context(cid)
    assert context[2]["tool_calls"][0]["id"] == "call_1"  # type: ignore[typeddict-item]
    assert_valid(context)  # type: ignore[arg-type]


def test_an_unknown_response_field_is_refused_naming_it(ledger: Any) -> None:
    cid = ledger.start()
    ledger.append(cid, {"role": "user", "content": "hi"})
    with pytest.raises(InvalidMessageError) as caught:
        ledger.append(cid, {"role": "assistant", "content": "x", "reasoning": "hidden"})
    assert caught.value.field == "reasoning"
    with pytest.raises(InvalidMessageError) as caught:
        ledger.append(cid, {"role": "assistant", "content": "x", "audio": {"id": "audio_1"}})
    assert caught.value.field == "audio"
    refusal = ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "refusal": "No."})
    ledger.append(cid, refusal)
    assert ledger.context(cid)[-1] == {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}


def test_tools_are_stored_counted_in_the_context_and_changed_by_an_event(ledger: Any) -> None:
    cid = ledger.start("You are a helpful assistant that can answer to questions about the weather.",
                       model="gpt-4o-mini", tools=[WEATHER_TOOL])
    ledger.append(cid, {"role": "user", "content": "What's the weather like in San Francisco?"})
    assert ledger.tools(cid) == [WEATHER_TOOL]
    assert all("tools" not in m for m in ledger.context(cid))
    # The cookbook's example: 101 prompt tokens on gpt-4o-mini, as the API reports.
    assert ledger.totals(cid).context_tokens == 101
    tools_tokens = ledger.totals(cid).tools_tokens
    assert tools_tokens > 0
    assert ledger.change_tools(cid, None) is True
    assert ledger.change_tools(cid, None) is False
    assert ledger.tools(cid) == []
    assert ledger.totals(cid).context_tokens == 101 - tools_tokens
    kinds = [e.kind for e in ledger.replay(cid)]
    assert kinds[-1] == "ToolsChanged"
    assert ledger.tools(cid, version=2) == [WEATHER_TOOL]


@pytest.mark.parametrize("placement", ["system_message", "system_prompt", "user_message"])
def test_the_summary_stands_where_the_policy_places_it(ledger: Any, placement: str) -> None:
    policy = ReductionPolicy(trigger_messages=4, keep_messages=2, summary_placement=placement)
    cid = ledger.start("Be brief.", policy=policy)
    for i in range(6):
        ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
    request = ledger.pending_summary(cid)
    assert request is not None
    ledger.record_summary(request, SummaryResult(text="They said m0 to m3.", model="x", prompt_version="1"))
    context = ledger.context(cid)
    roles = [m["role"] for m in context]
    if placement == "system_prompt":
        assert roles[0] == "system" and roles.count("system") == 1
        assert "They said m0 to m3." in str(context[0]["content"])
    else:
        assert roles[:2] == ["system", "system" if placement == "system_message" else "user"]
    memory = ledger.working_memory(cid)
    assert memory.tokens == ledger.totals(cid).context_tokens
    assert_valid(context)  # type: ignore[arg-type]
