"""The Agents SDK's own ``Runner`` drives an agent with two function tools for many turns
against a local Responses server, with ``LedgerSession`` as its memory; every request
the server receives is checked."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.domain.items import messages_from_items
from contextledger.integrations.agents import LedgerSession
from tests.support.fake_responses import FakeResponsesServer, function_call, reasoning, text

set_tracing_disabled(True)

POLICY = cl.ReductionPolicy(
    trigger_messages=30, keep_messages=10, keep_tool_results=6, max_context_tokens=3000
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


class ScriptedModel:
    """Answers by turn number: text, one call, or parallel calls after reasoning."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            output = [text(f"Tools said: {str(last['output'])[:60]}")]
        else:
            turn = int(str(last["content"]).rsplit(" ", 1)[-1])
            if turn % 3 == 1:
                output = [function_call("weather", {"city": f"city{turn}"})]
            elif turn % 3 == 2:
                output = [
                    reasoning(f"turn {turn} needs two tools"),
                    function_call("weather", {"city": "Oslo"}),
                    function_call("lookup", {"topic": f"topic{turn}"}),
                ]
            else:
                output = [text(f"Answer to turn {turn}: " + "words " * 30)]
        with self._lock:
            self.outputs.extend(output)
        return output


def _tokens(items: list[dict[str, Any]]) -> int:
    counter = cl.TiktokenCounter("gpt-4o-mini")
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
    model = ScriptedModel()
    with FakeResponsesServer(model) as server, cl.Ledger.open(url) as ledger:
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
                runs.append((len(server.requests), session.version()))
                await Runner.run(agent, f"turn {turn}", session=session)
                ledger.wait_idle()

        asyncio.run(converse())

        summaries_seen = 0
        for index, (first, version) in enumerate(runs):
            history = server.requests[first]["input"][:-1]
            assert server.requests[first]["input"][-1] == {"content": f"turn {index}", "role": "user"}
            if index % 5 == 0 or index == len(runs) - 1:  # replay from the log: a sample keeps it fast
                assert history == session.context_items(version=version)
            assert _tokens(history) <= POLICY.max_context_tokens
            summaries_seen += any(str(i.get("content", "")).startswith(SUMMARY_PREFIX) for i in history)
        for body in server.requests:
            _assert_valid(body["input"])
        assert ledger.summaries(session.conversation_id)
        assert summaries_seen > turns // 2

        transcript = session.transcript_items()
        assert [i for i in transcript if "id" in i] == model.outputs
        assert [i["content"] for i in transcript if i.get("role") == "user"] == [
            f"turn {t}" for t in range(turns)
        ]
        outputs = [i["call_id"] for i in transcript if i.get("type") == "function_call_output"]
        assert outputs == [i["call_id"] for i in model.outputs if i["type"] == "function_call"]
        assert ledger.verify(session.conversation_id).ok
        final = session.context_items()
        _assert_valid(final)
        assert json.dumps(final)  # plain JSON, ready to send


def test_an_agent_runs_150_turns_on_sqlite_with_bounded_valid_requests(sqlite_url: str) -> None:
    _run(sqlite_url, 150)


@pytest.mark.postgres
def test_an_agent_runs_40_turns_on_postgresql_with_bounded_valid_requests(postgres_url: str) -> None:
    _run(postgres_url, 40)
