"""A real ``pydantic_ai.Agent`` with two tools runs 40 tool-using turns over HTTP
against the local Chat Completions server, with ``LedgerHistory`` as its memory and
history processor; every request the server receives is checked.

40 turns reach every state the policy settles into: the first summary comes at turn 5,
the scripted turns repeat every three (no call, one call, two parallel calls), and the
summary grows until the working memory holds its steady size (1,391 tokens, under the
2,000-token bound) from about turn 24 on. 40 turns make 12 summaries (100 made 32,
repeating the same states)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import contextledger as cl
from contextledger.integrations.pydantic_ai import LedgerHistory
from contextledger.testing import (
    Call,
    FakeOpenAIServer,
    Func,
    RecordedRequest,
    Reply,
    openai_context_violations,
)

POLICY = cl.ReductionPolicy(
    trigger_messages=16, keep_messages=6, keep_tool_results=2, max_context_tokens=2000
)
SYSTEM = "You are a travel agent. Use the tools."
SUMMARY_PREFIX = "Summary of the earlier conversation"
COUNTER = cl.TiktokenCounter("gpt-4o-mini")


def scripted_model(request: RecordedRequest) -> Reply:
    """One call, two parallel calls, or none, by turn number; then a text answer."""
    last = request.body["messages"][-1]
    if last["role"] == "tool":
        return Reply(f"Tools said: {str(last['content'])[:40]}", prompt_tokens=50, completion_tokens=9)
    turn = int(str(last["content"]).rsplit(" ", 1)[-1])
    if turn % 3 == 1:
        return Reply(tool_calls=(Call("weather", {"city": f"city{turn}"}),))
    if turn % 3 == 2:
        return Reply(
            "Checking both.",
            tool_calls=(Call("weather", {"city": "Oslo"}), Call("lookup", {"topic": f"topic{turn}"})),
        )
    return Reply(f"Answer to turn {turn}: " + "words " * 20)


def _agent(server: FakeOpenAIServer, history: LedgerHistory) -> Agent[None, str]:
    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
    )
    agent = Agent(model, capabilities=[history.capability])

    @agent.tool_plain
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny and 21C in {city}"

    @agent.tool_plain
    def lookup(topic: str) -> str:
        """Facts about a topic (long answers)."""
        return " ".join(f"fact {n} about {topic}." for n in range(30))

    return agent


def _run(url: str, turns: int) -> None:
    with FakeOpenAIServer(default=Func(scripted_model)) as server, cl.Ledger.open(url) as ledger:
        history = LedgerHistory("traveller-1", ledger, policy=POLICY, system_prompt=SYSTEM)
        agent = _agent(server, history)
        runs: list[tuple[int, int]] = []  # (index of the run's first request, version before it)
        added: list[Any] = []

        async def converse() -> None:
            for turn in range(turns):
                runs.append((server.request_count, history.version()))
                result = await agent.run(f"turn {turn}", message_history=await history.amessages())
                new = result.new_messages()
                await history.aextend(new)
                added.extend(new)
                ledger.wait_idle()

        asyncio.run(converse())

        requests = [r.body["messages"] for r in server.requests_to("chat")]
        assert len(requests) == server.request_count
        summaries_seen = 0
        for index, (first, version) in enumerate(runs):
            sent = requests[first]
            assert sent[-1] == {"role": "user", "content": f"turn {index}"}
            # Exactly the working memory the log re-derives for that version (a sample
            # of replays from the log keeps the test fast).
            if index % 10 == 0 or index == len(runs) - 1:
                assert sent[:-1] == ledger.context(history.conversation_id, version=version)
            assert sent[0] == {"role": "system", "content": SYSTEM}
            assert COUNTER.count_messages(sent[:-1]) <= POLICY.max_context_tokens
            summaries_seen += any(str(m.get("content", "")).startswith(SUMMARY_PREFIX) for m in sent)
        for sent in requests:
            assert openai_context_violations(sent) == []
        assert ledger.summaries(history.conversation_id)
        assert summaries_seen > turns // 2

        # Every message of every run is in the log, exactly (usage and all).
        assert ModelMessagesTypeAdapter.dump_json(
            history.all_messages()
        ) == ModelMessagesTypeAdapter.dump_json(added)
        responses = [m for m in added if isinstance(m, ModelResponse)]
        assert len(responses) == server.request_count
        assert (
            sum(isinstance(p, ToolCallPart) for m in responses for p in m.parts)
            == 2 * (turns // 3) + (turns + 1) // 3
        )
        assert all(m.usage.input_tokens > 0 for m in responses)
        assert ledger.verify(history.conversation_id).ok
        assert json.dumps(ledger.context(history.conversation_id))


def test_an_agent_runs_40_tool_turns_on_sqlite_with_bounded_valid_requests(sqlite_url: str) -> None:
    _run(sqlite_url, 40)


@pytest.mark.postgres
def test_an_agent_runs_40_tool_turns_on_postgresql_with_bounded_valid_requests(postgres_url: str) -> None:
    _run(postgres_url, 40)


def test_the_processor_bounds_a_whole_history_passed_in(sqlite_url: str) -> None:
    policy = cl.ReductionPolicy(trigger_messages=8, keep_messages=4)
    with FakeOpenAIServer(default=Func(scripted_model)) as server, cl.Ledger.open(sqlite_url) as ledger:
        history = LedgerHistory("traveller-2", ledger, policy=policy, system_prompt=SYSTEM)
        agent = _agent(server, history)
        runs: list[tuple[int, int]] = []

        async def converse() -> None:
            for turn in range(9):
                runs.append((server.request_count, history.version()))
                # The caller hands over the whole log; the processor sends the working memory.
                result = await agent.run(f"turn {turn}", message_history=history.all_messages())
                history.extend(result.new_messages())
                ledger.wait_idle()

        asyncio.run(converse())
        requests = [r.body["messages"] for r in server.requests_to("chat")]
        first, version = runs[-1]
        sent = requests[first]
        assert sent[:-1] == ledger.context(history.conversation_id, version=version)
        assert str(sent[1]["content"]).startswith(SUMMARY_PREFIX)
        assert len(sent) < len(ledger.transcript(history.conversation_id))
        assert all(openai_context_violations(r) == [] for r in requests)
