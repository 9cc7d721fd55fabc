"""The Agents SDK's own ``Runner`` drives an agent with two function tools for many turns
against a local Responses server, with ``LedgerSession`` as its memory; every request
the server receives is checked."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.domain.values.items import messages_from_items
from contextledger.integrations.agents import LedgerSession
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply

set_tracing_disabled(True)

# The openai client encodes every input item of every request against each item type
# the Responses API knows (a few ms an item, in Python): the request size, not the
# ledger, sets this test's pace. A tight policy keeps requests short and makes the
# ledger summarize, placeholder and cap often. The scripted turns repeat every three
# (text, one call, two parallel calls after reasoning) and a summary is made every
# three turns from turn 3; the summary grows until the working memory meets the
# 1,500-token bound (1,495 tokens from about turn 24 on), and from there every turn
# is capped. 50 turns run that capped state for 26 more turns and make 16 summaries;
# 150 turns only repeated it.
POLICY = cl.ReductionPolicy(
    trigger_messages=12, keep_messages=4, keep_tool_results=2, max_context_tokens=1500
)
SUMMARY_PREFIX = "Summary of the earlier conversation"


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21C in {city}"


@function_tool
def lookup(topic: str) -> str:
    """Facts about a topic (long answers)."""
    return " ".join(f"fact {n} about {topic}." for n in range(40))


def scripted_model(request: RecordedRequest) -> Reply:
    """Answers by turn number: text, one call, or parallel calls after reasoning."""
    last = request.body["input"][-1]
    if last.get("type") == "function_call_output":
        return Reply(f"Tools said: {str(last['output'])[:60]}")
    turn = int(str(last["content"]).rsplit(" ", 1)[-1])
    if turn % 3 == 1:
        return Reply(tool_calls=[Call("weather", {"city": f"city{turn}"})])
    if turn % 3 == 2:
        return Reply(
            reasoning=f"turn {turn} needs two tools",
            tool_calls=[Call("weather", {"city": "Oslo"}), Call("lookup", {"topic": f"topic{turn}"})],
        )
    return Reply(f"Answer to turn {turn}: " + "words " * 30)


COUNTER = cl.TiktokenCounter("gpt-4o-mini")


def _tokens(items: list[dict[str, Any]]) -> int:
    counter = COUNTER
    return counter.reply_priming + sum(counter.count_message(m) for m, _ in messages_from_items(items))


def _assert_valid(items: list[dict[str, Any]]) -> None:
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called, f"orphan output {item['call_id']}"
            answered.add(item["call_id"])
    assert called == answered, f"unanswered calls {called - answered}"


def _run(url: str, turns: int) -> None:
    with FakeOpenAIServer(default=Func(scripted_model)) as server, cl.Ledger.open(url) as ledger:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        agent = Agent(
            name="assistant",
            instructions="Answer briefly.",
            tools=[weather, lookup],
            model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
        )
        session = LedgerSession("user-1", ledger, policy=POLICY)
        runs: list[tuple[int, int]] = []  # (index of the run's first request, version before it)

        async def converse() -> None:
            for turn in range(turns):
                runs.append((server.request_count, session.version()))
                await Runner.run(agent, f"turn {turn}", session=session)
                ledger.wait_idle()

        asyncio.run(converse())

        requests = [r.body for r in server.requests_to("responses")]
        assert len(requests) == server.request_count
        # Every item the model sent, exactly as the client received it (ids included).
        outputs = [item for answer in server.answers for item in answer["output"]]
        assert {i["type"] for i in outputs} == {"message", "function_call", "reasoning"}
        summaries_seen = 0
        for index, (first, version) in enumerate(runs):
            history = requests[first]["input"][:-1]
            assert requests[first]["input"][-1] == {"content": f"turn {index}", "role": "user"}
            if index % 5 == 0 or index == len(runs) - 1:  # replay from the log: a sample keeps it fast
                assert history == session.context_items(version=version)
            assert _tokens(history) <= POLICY.max_context_tokens
            summaries_seen += any(str(i.get("content", "")).startswith(SUMMARY_PREFIX) for i in history)
        for body in requests:
            _assert_valid(body["input"])
        assert ledger.summaries(session.conversation_id)
        assert summaries_seen > turns // 2

        transcript = session.transcript_items()
        assert [i for i in transcript if "id" in i] == outputs
        assert [i["content"] for i in transcript if i.get("role") == "user"] == [
            f"turn {t}" for t in range(turns)
        ]
        answered = [i["call_id"] for i in transcript if i.get("type") == "function_call_output"]
        assert answered == [i["call_id"] for i in outputs if i["type"] == "function_call"]
        assert ledger.verify(session.conversation_id).ok
        final = session.context_items()
        _assert_valid(final)
        assert json.dumps(final)  # plain JSON, ready to send


def test_an_agent_runs_50_turns_on_sqlite_with_bounded_valid_requests(sqlite_url: str) -> None:
    _run(sqlite_url, 50)


@pytest.mark.postgres
def test_an_agent_runs_40_turns_on_postgresql_with_bounded_valid_requests(postgres_url: str) -> None:
    _run(postgres_url, 40)
