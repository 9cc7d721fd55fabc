"""``context(cid, format="responses")``: the working memory as a Responses request, sent
with the real ``openai`` SDK to the local fake server, on a SQLite file and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.testing import (
    Call,
    FakeOpenAIServer,
    Reply,
    ScriptedSummarizer,
    responses_input_violations,
)

MODEL = "gpt-4o-mini"


def _weather_loop(ledger: cl.Ledger, server: FakeOpenAIServer, cid: Any, turns: int) -> list[int]:
    """``turns`` user turns, each answered by a reasoning item and a function call, its
    output, then a text answer; the version each request was rendered at."""
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test")
    versions: list[int] = []
    for turn in range(turns):
        ledger.append(cid, {"type": "message", "role": "user", "content": f"Weather in city {turn}?"})
        while True:
            memory = ledger.working_memory(cid)
            versions.append(memory.version)
            reply = client.responses.create(
                model=MODEL, **ledger.context(cid, version=memory.version, format="responses")
            )
            ledger.append(cid, reply)
            calls = [item for item in reply.output if item.type == "function_call"]
            if not calls:
                break
            ledger.extend(
                cid, [{"type": "function_call_output", "call_id": c.call_id, "output": "5C"} for c in calls]
            )
    return versions


def test_a_responses_loop_sends_what_context_renders_at_each_version(store_url: str) -> None:
    with FakeOpenAIServer() as server, cl.Ledger.open(store_url, run_policy=False) as ledger:
        turns = 3
        for turn in range(turns):
            server.script(
                Reply(reasoning="look it up", tool_calls=[Call("weather", {"city": turn})]),
                Reply(f"It is 5C in city {turn}."),
            )
        cid = ledger.start("You answer about the weather.", model=MODEL)
        versions = _weather_loop(ledger, server, cid, turns)
        requests = server.requests_to("responses")
        assert len(requests) == len(versions) == 2 * turns
        for request, version in zip(requests, versions, strict=True):
            sent = {k: request.body[k] for k in ("instructions", "input")}
            assert ledger.context(cid, version=version, format="responses") == sent
            assert responses_input_violations(sent["input"]) == []
        last = ledger.context(cid, format="responses")["input"]
        # The reply's own items come back as they came: reasoning with its id first.
        kinds = [item.get("type") for item in last[:4]]
        assert kinds == ["message", "reasoning", "function_call", "function_call_output"]
        assert last[1] == server.answers[0]["output"][0]
        totals = ledger.totals(cid)
        assert totals.usage_records == 2 * turns  # each Response recorded its usage
        assert totals.provider_prompt_tokens == sum(a["usage"]["input_tokens"] for a in server.answers)


def test_chat_messages_are_converted_and_the_system_prompt_is_the_instructions() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("Be brief.")
        ledger.append(cid, {"role": "user", "content": "Add 2 and 3."})
        ledger.append(
            cid,
            {
                "role": "assistant",
                "content": "Adding.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
                ],
            },
        )
        ledger.append(cid, {"role": "tool", "tool_call_id": "call_1", "content": "5"})
        ledger.append(cid, {"role": "assistant", "content": "5."})
        assert ledger.context(cid, format="responses") == {
            "instructions": "Be brief.",
            "input": [
                {"type": "message", "role": "user", "content": "Add 2 and 3."},
                {"type": "message", "role": "assistant", "content": "Adding."},
                {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 2}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "5"},
                {"type": "message", "role": "assistant", "content": "5."},
            ],
        }
        bare = ledger.start()
        ledger.append(bare, {"role": "user", "content": "hi"})
        assert ledger.context(bare, format="responses") == {
            "input": [{"type": "message", "role": "user", "content": "hi"}]
        }


def test_an_open_call_stays_out_until_it_is_answered() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append_items(
            cid,
            [
                {"type": "message", "role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            ],
        )
        assert ledger.context(cid, format="responses")["input"] == [
            {"type": "message", "role": "user", "content": "go"}
        ]
        ledger.append(cid, {"type": "function_call_output", "call_id": "c1", "output": "ok"})
        assert [i["type"] for i in ledger.context(cid, format="responses")["input"]] == [
            "message",
            "function_call",
            "function_call_output",
        ]


def _summarized(placement: str) -> tuple[cl.Ledger, Any]:
    policy = cl.ReductionPolicy(
        trigger_messages=6, keep_messages=2, keep_tool_results=1, summary_placement=placement
    )
    ledger = cl.Ledger.open("memory://", summarizer=ScriptedSummarizer(), run_policy=False)
    cid = ledger.start("Be brief.", policy=policy)
    for n in range(3):
        ledger.append(cid, {"type": "message", "role": "user", "content": f"q{n}"})
        ledger.append(cid, {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"})
        ledger.append(cid, {"type": "function_call_output", "call_id": f"c{n}", "output": f"long output {n}"})
    request = ledger.pending_summary(cid)
    assert request is not None
    ledger.record_summary(request, ledger.summarizer.summarize(request))
    return ledger, cid


@pytest.mark.parametrize("placement", ["system_message", "system_prompt", "user_message"])
def test_summaries_stand_where_the_chat_format_puts_them(placement: str) -> None:
    ledger, cid = _summarized(placement)
    with ledger:
        chat = ledger.context(cid)
        body = ledger.context(cid, format="responses")
        assert responses_input_violations(body["input"]) == []
        if placement == "system_prompt":
            assert body["instructions"] == chat[0]["content"]
            assert "Summary of the earlier" in body["instructions"]
            assert body["input"][0] == {"type": "message", "role": "user", "content": "q2"}
            return
        summary = next(m for m in chat if str(m.get("content", "")).startswith("Summary of the earlier"))
        assert body["instructions"] == "Be brief."
        role = "user" if placement == "user_message" else "system"
        assert {"type": "message", "role": role, "content": summary["content"]} in body["input"]
        # The same messages in the same order: each chat message is one item or a call group.
        said = [m["content"] for m in chat[1:] if m.get("content")]
        shown = [i.get("content", i.get("output")) for i in body["input"] if i["type"] != "function_call"]
        assert shown == said
        user = ledger.context(cid, format="responses", summary="user")
        assert any(i.get("role") == "user" and i["content"] == summary["content"] for i in user["input"])


def test_a_reduced_tool_result_keeps_its_call_id_with_the_placeholder_text() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"type": "message", "role": "user", "content": "read it"})
        ledger.append(cid, {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"})
        output = {"type": "function_call_output", "call_id": "c1", "output": "secret file body", "id": "o1"}
        ledger.append(cid, output, hidden=True)
        chat = ledger.context(cid)
        items = ledger.context(cid, format="responses")["input"]
        assert chat[-1]["content"] != "secret file body"
        assert items[-1] == {**output, "output": chat[-1]["content"]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(["user", "assistant", "call", "calls", "reasoning_call"]), min_size=1, max_size=12
    ),
    st.integers(min_value=2, max_value=6),
)
def test_any_conversation_renders_an_input_the_api_accepts(shape: list[str], keep: int) -> None:
    policy = cl.ReductionPolicy(trigger_messages=keep + 2, keep_messages=keep, keep_tool_results=1)
    with cl.Ledger.open("memory://", summarizer=ScriptedSummarizer(), run_policy=False) as ledger:
        cid = ledger.start("s", policy=policy)
        for n, step in enumerate(shape):
            if step in ("user", "assistant"):
                ledger.append(cid, {"role": step, "content": f"{step} {n}"})
                continue
            calls = [f"c{n}_{k}" for k in range(2 if step == "calls" else 1)]
            items: list[dict[str, Any]] = []
            if step == "reasoning_call":
                items.append({"type": "reasoning", "id": f"rs_{n}", "summary": []})
            items += [{"type": "function_call", "call_id": c, "name": "f", "arguments": "{}"} for c in calls]
            items += [{"type": "function_call_output", "call_id": c, "output": "r"} for c in calls]
            ledger.append_items(cid, items)
            request = ledger.pending_summary(cid)
            if request is not None:
                ledger.record_summary(request, ledger.summarizer.summarize(request))
        body = ledger.context(cid, format="responses")
        assert responses_input_violations(body["input"]) == []
        chat = ledger.context(cid)
        outputs = [i["call_id"] for i in body["input"] if i["type"] == "function_call_output"]
        assert outputs == [m["tool_call_id"] for m in chat if m["role"] == "tool"]


def test_cache_with_the_responses_format_is_refused() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s")
        with pytest.raises(cl.InvalidArgumentError) as caught:
            ledger.context(cid, format="responses", cache=True)  # type: ignore[call-overload]
        assert caught.value.argument == "cache"


def test_the_async_ledger_gives_the_responses_format(sqlite_url: str) -> None:
    async def main() -> dict[str, Any]:
        async with cl.AsyncLedger.open(sqlite_url, run_policy=False) as ledger:
            cid = await ledger.start("s")
            await ledger.append(cid, {"role": "user", "content": "hi"})
            await ledger.append(cid, {"role": "assistant", "content": "hello"})
            assert (await ledger.context(cid, version=2, format="responses"))["input"] == [
                {"type": "message", "role": "user", "content": "hi"}
            ]
            return await ledger.context(cid, format="responses")

    body = asyncio.run(main())
    assert json.loads(json.dumps(body)) == {
        "instructions": "s",
        "input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "message", "role": "assistant", "content": "hello"},
        ],
    }
