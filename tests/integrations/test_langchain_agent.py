"""LangChain 1.x's own ``create_agent`` with ``LedgerMiddleware`` and ``ChatOpenAI`` runs
long tool-using conversations against the local chat-completions server: every
request valid by OpenAI's rules, bounded by the policy, summarized, and exactly the
context the ledger records for the version it was read at."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

import contextledger as cl
from contextledger.application.formats.originals import transcript_originals
from contextledger.integrations.langchain import LedgerMiddleware, from_original
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply
from contextledger.testing import openai_context_violations as violations

POLICY = cl.ReductionPolicy(
    trigger_messages=30, keep_messages=10, keep_tool_results=4, max_context_tokens=2500
)
SYSTEM = "You answer with the tools."
SUMMARY_PREFIX = "Summary of the earlier conversation"


@tool
def search(q: str) -> str:
    """Search the web."""
    return f"results for {q}: " + "lorem ipsum " * 40


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def _answer(request: RecordedRequest) -> Reply:
    """Two parallel tool calls for every question, then an answer."""
    last = request.body["messages"][-1]
    if last["role"] == "user":
        return Reply(
            tool_calls=(Call("search", {"q": str(last["content"])}), Call("weather", {"city": "Oslo"}))
        )
    return Reply("Done: " + "detail " * 20)


class Seen(AgentMiddleware):
    """Records, for each model call, the server's request index and the ledger version
    ``LedgerMiddleware`` read the messages at."""

    def __init__(self, server: FakeOpenAIServer) -> None:
        super().__init__()
        self.server = server
        self.calls: list[tuple[int, int]] = []

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        self.calls.append((self.server.request_count, request.state["contextledger"]["version"]))  # type: ignore[typeddict-item]
        return handler(request)


def _normal(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the ledger writes them (LangChain sends '' beside tool calls)."""
    return [
        cl.Message.from_openai(
            {**m, "content": None} if m.get("tool_calls") and not m.get("content") else m
        ).to_openai()
        for m in messages
    ]


def _agent(server: FakeOpenAIServer, middleware: list[Any], **kwargs: Any) -> Any:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0)
    return create_agent(model, [search, weather], system_prompt=SYSTEM, middleware=middleware, **kwargs)


def _run(url: str, turns: int) -> None:
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(url) as ledger:
        memory, seen = LedgerMiddleware(ledger, policy=POLICY), Seen(server)
        agent = _agent(server, [memory, seen])
        config = {"configurable": {"thread_id": "thread-1"}}
        for turn in range(turns):
            result = agent.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config)
            assert isinstance(result["messages"][-1], AIMessage)
            ledger.wait_idle()

        cid = memory.conversation_id("thread-1")
        counter = cl.TiktokenCounter("gpt-4o-mini")
        assert len(seen.calls) == len(server.requests) == 2 * turns
        summaries_seen = 0
        for index, version in seen.calls:
            sent = server.requests[index].body["messages"]
            assert violations(sent) == []
            assert sent[0] == {"role": "system", "content": SYSTEM}
            history = _normal(sent[1:])
            assert counter.count_messages(history) <= (POLICY.max_context_tokens or 0)
            assert history == ledger.context(cid, version=version)
            summaries_seen += any(str(m["content"]).startswith(SUMMARY_PREFIX) for m in history)
        assert summaries_seen > turns  # from the first summary on, every call has one
        assert len(ledger.summaries(cid)) >= turns // 10
        # The log holds every message of every turn, once, as LangChain made it.
        logged = [from_original(o) for _, _, o in transcript_originals(ledger, cid) if o]
        assert len(logged) == len(ledger.transcript(cid)) == 5 * turns
        assert [m.content for m in logged if isinstance(m, HumanMessage)] == [
            f"turn {t}" for t in range(turns)
        ]
        results = [m for m in logged if isinstance(m, ToolMessage)]
        assert len(results) == 2 * turns and {m.name for m in results} == {"search", "weather"}
        assert all(m.id for m in logged)
        assert ledger.verify(cid).ok


# 42 turns (84 model calls) cover the whole cycle the policy settles into: the first
# summary is made at turn 6, and from turn 16 on the working memory repeats a cycle of
# 26 turns (12 to 34 messages, 1,339 to 1,944 tokens: the message trigger, not the
# 2,500-token bound, keeps it short), so 100 turns only repeated the same states.
# Every call from the 14th on carries a summary; 42 turns make 9 summaries (100 made
# 22), each read back at its version and checked as before.
TURNS = 42


def test_create_agent_runs_42_tool_using_turns_on_sqlite(sqlite_url: str) -> None:
    _run(sqlite_url, TURNS)


@pytest.mark.postgres
def test_create_agent_runs_42_tool_using_turns_on_postgresql(postgres_url: str) -> None:
    _run(postgres_url, TURNS)


def test_with_a_checkpointer_the_state_holds_the_working_memory_and_nothing_is_appended_twice(
    sqlite_url: str,
) -> None:
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(sqlite_url) as ledger:
        memory = LedgerMiddleware(ledger, policy=POLICY)
        agent = _agent(server, [memory], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        for turn in range(12):
            result = agent.invoke({"messages": [HumanMessage(f"turn {turn}")]}, config)
            ledger.wait_idle()
        cid = memory.conversation_id("t")
        assert len(ledger.transcript(cid)) == 5 * 12  # each message once, checkpoint or not
        # The checkpoint holds the working memory the last call was sent, then its answer.
        state = agent.get_state(config).values
        assert state["messages"] == result["messages"]
        assert state["contextledger"]["synced"] == result["messages"][-1].id
        sent = server.requests[-1].body["messages"]
        assert len(result["messages"]) == len(sent) < 5 * 12
        assert _normal(sent[1:]) == ledger.context(cid, version=state["contextledger"]["version"])


def test_threads_are_separate_conversations(sqlite_url: str) -> None:
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(sqlite_url) as ledger:
        memory = LedgerMiddleware(ledger, policy=POLICY)
        agent = _agent(server, [memory])
        agent.invoke({"messages": [HumanMessage("for a")]}, {"configurable": {"thread_id": "a"}})
        agent.invoke({"messages": [HumanMessage("for b")]}, {"configurable": {"thread_id": "b"}})
        agent.invoke({"messages": [HumanMessage("again a")]}, {"configurable": {"thread_id": "a"}})
        last = server.requests[-2].body["messages"]  # the call that asked for the tools
        assert [m["content"] for m in last if m["role"] == "user"] == ["for a", "again a"]
        assert len(ledger.transcript(memory.conversation_id("b"))) == 5


def test_a_run_without_a_thread_id_is_refused_before_the_model_is_called(sqlite_url: str) -> None:
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(sqlite_url) as ledger:
        agent = _agent(server, [LedgerMiddleware(ledger)])
        with pytest.raises(cl.InvalidArgumentError, match="thread_id"):
            agent.invoke({"messages": [HumanMessage("hi")]})
        assert server.request_count == 0
        assert ledger.conversation_ids() == []


def test_an_async_run_keeps_the_thread_in_the_ledger_too(sqlite_url: str) -> None:
    import asyncio

    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(sqlite_url) as ledger:
        memory = LedgerMiddleware(ledger, policy=POLICY)
        agent = _agent(server, [memory])

        async def run() -> None:
            for turn in range(3):
                await agent.ainvoke(
                    {"messages": [HumanMessage(f"turn {turn}")]}, {"configurable": {"thread_id": "x"}}
                )

        asyncio.run(run())
        assert len(ledger.transcript(memory.conversation_id("x"))) == 15
        sent = server.requests[-1].body["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == ["turn 0", "turn 1", "turn 2"]
        assert violations(sent) == []
