"""Anthropic and Gemini through the ledger's own ``append``/``extend`` and
``context(format=...)``: the real SDKs against the local fake servers, a SQLite file
and PostgreSQL; what crosses from one format to another and what is dropped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import pytest
from google.genai import types

import contextledger as cl
from contextledger.testing import (
    Blocks,
    FakeAnthropicServer,
    FakeGeminiServer,
    GeminiReply,
    anthropic_request_violations,
    gemini_request_violations,
    openai_context_violations,
)
from contextledger.testing.fake_anthropic import redacted_thinking, thinking
from tests.support.gemini_wire import gemini_client, weather_in_paris_and_rome

MODEL = "claude-haiku-4-5"
QUESTION = {
    "role": "user",
    "content": [
        {"type": "text", "text": "Weather in Paris and Rome?", "cache_control": {"type": "ephemeral"}}
    ],
}
RESULTS = {
    "role": "user",
    "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": "22C"}]},
        {"type": "text", "text": "Summarize please."},
    ],
}
TOOL_USE = [
    thinking("Two cities."),
    {"type": "text", "text": "Checking."},
    {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Paris"}},
    {"type": "tool_use", "id": "toolu_02", "name": "weather", "input": {"city": "Rome"}},
]


def _violations(ledger: cl.Ledger, cid: Any, **kwargs: Any) -> dict[str, list[str]]:
    """What each provider's rules checker finds in the context rendered for it."""
    anthropic_body = ledger.context(cid, format="anthropic", **kwargs)
    gemini_body = ledger.context(cid, format="gemini")
    return {
        "openai": openai_context_violations(ledger.context(cid)),
        "anthropic": anthropic_request_violations({"model": MODEL, "max_tokens": 10, **anthropic_body}),
        "gemini": gemini_request_violations(
            gemini_body["contents"], system_instruction=gemini_body["system_instruction"]
        ),
    }


def test_an_anthropic_conversation_round_trips_byte_identical_through_append_and_context(
    shared_url: str,
) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(shared_url, run_policy=False) as ledger:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        server.script(
            Blocks(TOOL_USE, input_tokens=30, output_tokens=9, cache_creation_input_tokens=40),
            Blocks(
                [redacted_thinking(), {"type": "text", "text": "Paris 18C, Rome 22C."}],
                input_tokens=5,
                output_tokens=7,
                cache_read_input_tokens=40,
            ),
        )
        cid = ledger.start("You answer about the weather.")
        assert ledger.append(cid, QUESTION) == 0
        sent: list[Any] = [QUESTION]
        for results in (RESULTS, None):
            reply = client.messages.create(
                model=MODEL, max_tokens=200, **ledger.context(cid, format="anthropic", cache=True)
            )
            position = ledger.append(cid, reply)
            sent.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(mode="json", exclude_none=True) for b in reply.content],
                }
            )
            if results:
                # One wire message, three chat messages; append gives the first's position.
                assert ledger.append(cid, results) == position + 1
                sent.append(results)
        assert server.violations == [] and len(server.requests) == 2
        rendered = ledger.context(cid, format="anthropic")
        assert json.dumps(rendered["messages"]) == json.dumps(sent)
        assert rendered["system"] == [{"type": "text", "text": "You answer about the weather."}]
        assert [m["role"] for m in ledger.context(cid)] == [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "user",
            "assistant",
        ]
        # Each reply's usage is recorded, cache reads and writes in the prompt tokens.
        totals = ledger.totals(cid)
        assert totals.provider_prompt_tokens == 30 + 40 + 5 + 40
        assert totals.provider_completion_tokens == 9 + 7
        version = ledger.conversation(cid).version
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:  # stored, not held in memory
        assert json.dumps(ledger.context(cid, version=version, format="anthropic")["messages"]) == json.dumps(
            sent
        )


def test_a_gemini_conversation_appended_with_append_matches_open_calls_without_ids(sqlite_url: str) -> None:
    with FakeGeminiServer() as server, cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        client = gemini_client(server)
        server.script(
            weather_in_paris_and_rome(
                thought="Two lookups.",
                thought_signature=b"sig",
                prompt_tokens=11,
                completion_tokens=3,
                thoughts_tokens=2,
            ),
            GeminiReply("Rome is warmer."),
        )
        cid = ledger.start("Be brief.")
        question = types.Content(role="user", parts=[types.Part(text="Paris or Rome?")])
        ledger.append(cid, question)
        for step in range(2):
            body = ledger.context(cid, format="gemini")
            reply = client.models.generate_content(
                model="gemini-2.5-flash",
                contents=body["contents"],
                config={"system_instruction": body["system_instruction"]},
            )
            ledger.append(cid, reply)
            if step == 0:
                answers = {
                    "role": "user",
                    "parts": [
                        {"function_response": {"name": "weather", "response": {"c": 20}}},
                        {"function_response": {"name": "weather", "response": {"c": 25}}},
                    ],
                }
                assert ledger.extend(cid, [answers]) == [2, 3]
        assert server.rejected == []
        chat = ledger.context(cid)
        calls = [c["id"] for c in chat[2]["tool_calls"]]  # type: ignore[typeddict-item]
        assert [m.get("tool_call_id") for m in chat[3:5]] == calls
        assert json.loads(chat[3]["content"]) == {"c": 20}  # type: ignore[arg-type]
        contents = ledger.context(cid, format="gemini")["contents"]
        assert contents[2] == answers  # given back as given: no ids added
        assert (
            ledger.totals(cid).provider_prompt_tokens
            == 11 + server.answers[1]["usageMetadata"]["promptTokenCount"]
        )


def test_a_response_answering_no_open_call_writes_nothing(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        stray = {"role": "user", "parts": [{"function_response": {"name": "f", "response": {}}}]}
        with pytest.raises(cl.InvalidMessageError, match="answers no open call"):
            ledger.extend(cid, [{"role": "user", "content": "hi"}, stray])
        with pytest.raises(cl.InvalidMessageError):
            ledger.append(
                cid,
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                        {"type": "tool_result"},
                    ],
                },
            )
        assert ledger.context(cid) == [{"role": "system", "content": "s"}]
        assert ledger.conversation(cid).version == 1


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"format": "claude"}, "format"),
        ({"format": "openai", "cache": True}, "cache"),
        ({"format": "gemini", "cache": True}, "cache"),
        ({"format": "openai", "summary": "user"}, "summary"),
        ({"format": "anthropic", "summary": "model"}, "summary"),
        ({"format": "anthropic", "cache": 1}, "cache"),
    ],
)
def test_an_unknown_format_or_a_bad_combination_is_refused(kwargs: dict[str, Any], argument: str) -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s")
        with pytest.raises(cl.InvalidArgumentError) as caught:
            ledger.context(cid, **kwargs)
        assert caught.value.argument == argument


def test_a_retried_gemini_append_with_a_client_id_is_a_no_op(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "go"})
        turn = {"role": "model", "parts": [{"function_call": {"name": "f", "args": {}}}]}
        first = ledger.append(cid, turn, client_message_id="m-1")
        assert ledger.append(cid, turn, client_message_id="m-1") == first  # the id-less call got the same id
        assert ledger.conversation(cid).state.next_position == 2  # one model turn, its call open


def _mixed(ledger: cl.Ledger) -> Any:
    """One conversation in three formats: OpenAI tool calls, Anthropic thinking and
    parallel tool use, Gemini thought signatures and id-less calls."""
    cid = ledger.start("You help.")
    ledger.append(cid, {"role": "user", "content": "Plan a trip."})
    ledger.append(
        cid,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "x"}'},
                }
            ],
        },
    )
    ledger.append(cid, {"role": "tool", "tool_call_id": "call_a", "content": "found"})
    ledger.append(cid, {"role": "assistant", "content": "Noted."})
    ledger.append(cid, QUESTION)
    ledger.append(cid, {"role": "assistant", "content": TOOL_USE})
    ledger.append(cid, RESULTS)
    ledger.append(
        cid, {"role": "assistant", "content": [redacted_thinking(), {"type": "text", "text": "Warm."}]}
    )
    ledger.append(cid, {"role": "user", "parts": [{"text": "And Oslo?"}]})
    ledger.append(
        cid,
        {
            "role": "model",
            "parts": [
                {"text": "thinking", "thought": True},
                {"function_call": {"name": "weather", "args": {"city": "Oslo"}}, "thought_signature": "c2ln"},
            ],
        },
    )
    ledger.append(
        cid, {"role": "user", "parts": [{"function_response": {"name": "weather", "response": {"c": 5}}}]}
    )
    ledger.append(cid, {"role": "model", "parts": [{"text": "Cold.", "thought_signature": "c2ln"}]})
    return cid


def test_every_format_reads_a_conversation_appended_in_all_three(store_url: str) -> None:
    with cl.Ledger.open(store_url, run_policy=False) as ledger:
        cid = _mixed(ledger)
        assert _violations(ledger, cid) == {"openai": [], "anthropic": [], "gemini": []}
        assert _violations(ledger, cid, cache=True, summary="user")["anthropic"] == []
        anthropic_body = json.dumps(ledger.context(cid, format="anthropic"))
        gemini_body = json.dumps(ledger.context(cid, format="gemini"))
        openai_body = json.dumps(ledger.context(cid))
        # Anthropic's own messages come back whole; Gemini's thought parts and
        # signatures do not cross to Anthropic, nor to OpenAI.
        assert '"signature"' in anthropic_body and "redacted_thinking" in anthropic_body
        assert "thought" not in anthropic_body and "c2ln" not in anthropic_body
        # Gemini's own Contents come back whole; Anthropic's thinking does not cross.
        assert "c2ln" in gemini_body and "Two cities." not in gemini_body and "redacted" not in gemini_body
        assert (
            "signature" not in openai_body and "Two cities." not in openai_body and "c2ln" not in openai_body
        )
        # The text and the tool calls cross: every call answered under the same id.
        gemini = ledger.context(cid, format="gemini")["contents"]
        calls = [p["function_call"] for c in gemini for p in c["parts"] if "function_call" in p]
        assert [c["name"] for c in calls] == ["search", "weather", "weather", "weather"]
        assert [c.get("id") for c in calls][:3] == ["call_a", "toolu_01", "toolu_02"]


def test_reasoning_items_cross_to_anthropic_as_their_summary_text_only(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append_items(
            cid,
            [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "secret plan"}],
                    "encrypted_content": "gAAA",
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"},
                {"type": "function_call_output", "call_id": "c1", "output": "done"},
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_1",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                },
            ],
        )
        violations = _violations(ledger, cid)
        assert violations == {"openai": [], "anthropic": [], "gemini": []}
        body = json.dumps(ledger.context(cid, format="anthropic"))
        # The encrypted reasoning stays behind; its summary crosses as the chat form's text.
        assert (
            "gAAA" not in body
            and "encrypted" not in body
            and "reasoning" not in body.replace("[reasoning:", "")
        )
        assert '"text": "[reasoning: secret plan]"' in body and '"type": "tool_use"' in body


def test_the_async_ledger_takes_and_gives_the_new_formats(sqlite_url: str) -> None:
    async def main() -> None:
        async with cl.AsyncLedger.open(sqlite_url, run_policy=False) as ledger:
            cid = await ledger.start("s")
            assert await ledger.append(cid, QUESTION) == 0
            assert await ledger.extend(cid, [{"role": "assistant", "content": TOOL_USE}, RESULTS]) == [
                1,
                2,
                3,
                4,
            ]
            body = await ledger.context(cid, format="anthropic")
            assert body["messages"][1]["content"] == TOOL_USE
            gemini = await ledger.context(cid, version=2, format="gemini")
            assert [c["role"] for c in gemini["contents"]] == ["user"]
            with pytest.raises(cl.InvalidArgumentError):
                await ledger.context(cid, format="gemini", cache=True)

    asyncio.run(main())
