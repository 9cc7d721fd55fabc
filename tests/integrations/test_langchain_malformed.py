"""A tool call whose arguments do not parse (LangChain's ``invalid_tool_calls``) is kept
and answered: by a ``ToolMessage`` added to the history, and by LangChain 1.x's own
``create_agent`` (with ``LedgerMiddleware``) when ``ChatOpenAI`` gets such a call from
the local chat-completions server; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

import contextledger as cl
from contextledger.application.formats.originals import transcript_originals
from contextledger.integrations.langchain import LedgerChatMessageHistory, LedgerMiddleware, from_original
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply
from contextledger.testing import openai_context_violations as violations

MALFORMED = '{"city": "Oslo"'  # the model's arguments, cut short


def test_a_malformed_call_answered_by_a_tool_message_is_kept_and_comes_back_equal(shared_url: str) -> None:
    appended = [
        HumanMessage("weather in Oslo?", id="h1"),
        AIMessage(
            "",
            id="a1",
            invalid_tool_calls=[
                {
                    "name": "weather",
                    "args": MALFORMED,
                    "id": "call_1",
                    "error": "bad JSON",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        ToolMessage("err", tool_call_id="call_1", id="t1", status="error"),
    ]
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory("malformed", ledger, policy=cl.ReductionPolicy())
        history.add_messages(appended)
        assert history.messages == appended
        assert LedgerChatMessageHistory("malformed", ledger).messages == appended
        context = ledger.context(history.conversation_id)
        # Sent as langchain-openai sends it: the call with its arguments verbatim, then its answer.
        assert context[1:] == [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": MALFORMED},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "err"},
        ]
        assert violations(context) == []
        history.add_messages([AIMessage("Sorry, that failed.", id="a2")])
        assert ledger.verify(history.conversation_id).ok


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def _answer(request: RecordedRequest) -> Reply:
    """The first question gets a call whose arguments do not parse; later ones an
    answer that quotes the tool results the model was sent."""
    messages = request.body["messages"]
    if messages[-1] == {"role": "user", "content": "weather, turn 0"}:
        return Reply(tool_calls=(Call("weather", MALFORMED, call_id="call_9"),))
    said = [str(m["content"])[:60] for m in messages if m["role"] == "tool"]
    return Reply("The tools said: " + " | ".join(said))


def _normal(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the ledger writes them (LangChain sends '' beside tool calls)."""
    return [
        cl.Message.from_openai(
            {**m, "content": None} if m.get("tool_calls") and not m.get("content") else m
        ).to_openai()
        for m in messages
    ]


def _converse(server: FakeOpenAIServer, **kwargs: Any) -> list[Any]:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0)
    agent = create_agent(model, [weather], system_prompt="Use the tools.", **kwargs)
    config: Any = {"configurable": {"thread_id": "malformed"}}
    return [agent.invoke({"messages": [HumanMessage(f"weather, turn {turn}")]}, config) for turn in range(3)]


def test_create_agent_answers_a_malformed_call_with_the_ledger_as_its_memory(shared_url: str) -> None:
    # The same conversation with LangChain's own checkpointer as the memory.
    with FakeOpenAIServer(default=Func(_answer)) as plain:
        expected = _converse(plain, checkpointer=InMemorySaver())
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(shared_url) as ledger:
        memory = LedgerMiddleware(ledger)
        results = _converse(server, middleware=[memory])

        # The run ends on the malformed call as the agent's own does; the next turns go on.
        assert results[0]["messages"][-1].invalid_tool_calls == expected[0]["messages"][-1].invalid_tool_calls
        assert [r["messages"][-1].content for r in results[1:]] == [
            r["messages"][-1].content for r in expected[1:]
        ]
        assert "call_9 could not be executed" in results[2]["messages"][-1].content
        # The model was sent what the agent sends with its own memory, every request valid.
        sent = [_normal(r.body["messages"]) for r in server.requests_to("chat")]
        assert sent == [_normal(r.body["messages"]) for r in plain.requests_to("chat")]
        assert all(violations(m) == [] for m in sent)

        cid = memory.conversation_id("malformed")
        logged = [from_original(o) for _, _, o in transcript_originals(ledger, cid) if o]
        call = next(m for m in logged if isinstance(m, AIMessage) and m.invalid_tool_calls)
        assert call.invalid_tool_calls[0]["args"] == MALFORMED
        answer = logged[logged.index(call) + 1]
        assert (
            isinstance(answer, ToolMessage) and answer.tool_call_id == "call_9" and answer.status == "error"
        )
        assert ledger.verify(cid).ok


def _mixed(request: RecordedRequest) -> Reply:
    """A valid call and a malformed one at once; once both are answered, text."""
    messages = request.body["messages"]
    if messages[-1]["role"] == "user":
        return Reply(
            tool_calls=(
                Call("weather", {"city": "Oslo"}, call_id="ok_1"),
                Call("weather", MALFORMED, call_id="bad_1"),
            )
        )
    said = sorted(str(m["content"])[:16] for m in messages if m["role"] == "tool")
    return Reply("Seen: " + " | ".join(said))


def test_create_agent_runs_the_valid_call_beside_a_malformed_one_with_the_ledger_as_its_memory(
    shared_url: str,
) -> None:
    with FakeOpenAIServer(default=Func(_mixed)) as plain:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=plain.base_url, api_key="sk-test", max_retries=0)
        agent = create_agent(model, [weather], system_prompt="Use the tools.", checkpointer=InMemorySaver())
        expected = agent.invoke(
            {"messages": [HumanMessage("weather?")]}, {"configurable": {"thread_id": "t"}}
        )
    with FakeOpenAIServer(default=Func(_mixed)) as server, cl.Ledger.open(shared_url) as ledger:
        memory = LedgerMiddleware(ledger)
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0)
        agent = create_agent(model, [weather], system_prompt="Use the tools.", middleware=[memory])
        result = agent.invoke({"messages": [HumanMessage("weather?")]}, {"configurable": {"thread_id": "t"}})
        assert result["messages"][-1].content == expected["messages"][-1].content
        assert "sunny in Oslo" in result["messages"][-1].content
        requests = [r.body["messages"] for r in server.requests_to("chat")]
        assert len(requests) == 2 and all(violations(m) == [] for m in requests)
        cid = memory.conversation_id("t")
        assert [m.get("tool_call_id") for m in ledger.context(cid)[2:4]] == ["bad_1", "ok_1"]
        assert ledger.verify(cid).ok
