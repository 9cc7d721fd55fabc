"""LangChain's ``RunnableWithMessageHistory`` and ``ChatOpenAI`` run a long conversation
against the local chat-completions server with ``LedgerChatMessageHistory`` as memory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_openai")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_openai import ChatOpenAI

import contextledger as cl
from contextledger.integrations.langchain import LedgerChatMessageHistory, from_langchain, to_langchain
from contextledger.testing import FakeOpenAIServer, Func, RecordedRequest, Reply
from contextledger.testing import openai_context_violations as violations

POLICY = cl.ReductionPolicy(trigger_messages=30, keep_messages=10, keep_tool_results=4, max_context_tokens=2500)
SUMMARY_PREFIX = "Summary of the earlier conversation"


def _normal(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the ledger writes them (LangChain sends '' beside tool calls)."""
    return [cl.Message.from_openai(
        {**m, "content": None} if m.get("tool_calls") and not m.get("content") else m
    ).to_openai() for m in messages]


def _answer(request: RecordedRequest) -> Reply:
    last = request.body["messages"][-1]
    return Reply(f"Noted: {last['content']}. " + "detail " * 25)


def _run(url: str, turns: int) -> None:
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(url) as ledger:
        histories: dict[str, LedgerChatMessageHistory] = {}

        def history_for(session_id: str) -> BaseChatMessageHistory:
            if session_id not in histories:
                histories[session_id] = LedgerChatMessageHistory(session_id, ledger, policy=POLICY)
            return histories[session_id]

        prompt = ChatPromptTemplate.from_messages(
            [("system", "Answer briefly."), MessagesPlaceholder("history"), ("human", "{input}")]
        )
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0)
        chain = RunnableWithMessageHistory(
            prompt | model, history_for, input_messages_key="input", history_messages_key="history"
        )
        config = {"configurable": {"session_id": "chat-1"}}
        versions: list[tuple[int, int]] = []
        for turn in range(turns):
            history = history_for("chat-1")
            versions.append((len(server.requests), ledger.working_memory(history.conversation_id).version))
            chain.invoke({"input": f"turn {turn}"}, config=config)
            if turn % 5 == 4:  # a tool exchange, as an agent loop would add it
                history.add_messages([
                    AIMessage(content="", tool_calls=[
                        {"name": "search", "args": {"q": f"t{turn}"}, "id": f"call_{turn}a"},
                        {"name": "weather", "args": {"city": "Oslo"}, "id": f"call_{turn}b"},
                    ]),
                    ToolMessage(content="result " * 60, tool_call_id=f"call_{turn}a"),
                    ToolMessage(content="sunny", tool_call_id=f"call_{turn}b"),
                ])
            ledger.wait_idle()

        cid = histories["chat-1"].conversation_id
        counter = cl.TiktokenCounter("gpt-4o-mini")
        summaries_seen = 0
        for index, (first, version) in enumerate(versions):
            sent = server.requests[first].body["messages"]
            assert violations(sent) == []
            assert sent[0] == {"role": "system", "content": "Answer briefly."}
            assert sent[-1] == {"role": "user", "content": f"turn {index}"}
            history_sent = _normal(sent[1:-1])
            assert counter.count_messages(history_sent) <= POLICY.max_context_tokens
            if index % 5 == 0 or index == len(versions) - 1:
                assert history_sent == ledger.context(cid, version=version)
            summaries_seen += any(str(m["content"]).startswith(SUMMARY_PREFIX) for m in history_sent)
        assert summaries_seen > turns // 2
        transcript = ledger.transcript(cid)
        assert [e.message["content"] for e in transcript if e.message["role"] == "user"] == [
            f"turn {t}" for t in range(turns)
        ]
        assert len(transcript) == 2 * turns + 3 * (turns // 5)
        assert ledger.verify(cid).ok


def test_runnable_with_message_history_runs_150_turns_on_sqlite_bounded_and_valid(sqlite_url: str) -> None:
    _run(sqlite_url, 150)


@pytest.mark.postgres
def test_runnable_with_message_history_runs_60_turns_on_postgresql(postgres_url: str) -> None:
    _run(postgres_url, 60)


def test_messages_map_both_ways_with_tool_calls_and_summaries() -> None:
    ai = AIMessage(content="checking", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}])
    assert from_langchain(ai).to_openai() == {
        "role": "assistant", "content": "checking",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    back = to_langchain(from_langchain(ai).to_openai())
    assert isinstance(back, AIMessage) and back.tool_calls[0]["args"] == {"x": 1} and back.content == "checking"
    tool = to_langchain(from_langchain(ToolMessage(content="ok", tool_call_id="c1")).to_openai())
    assert isinstance(tool, ToolMessage) and tool.tool_call_id == "c1"
    assert isinstance(to_langchain({"role": "system", "content": "Summary"}), SystemMessage)
    assert isinstance(to_langchain({"role": "user", "content": "hi"}), HumanMessage)
    bad = to_langchain({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{not json"}}]})
    assert isinstance(bad, AIMessage) and bad.invalid_tool_calls[0]["id"] == "c2"


def test_sync_and_async_methods_share_one_history_and_clear_empties_it(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url) as ledger:
        history = LedgerChatMessageHistory("s", ledger)
        history.add_messages([HumanMessage("hi"), AIMessage("hello")])

        async def more() -> list[Any]:
            await history.aadd_messages([HumanMessage("again")])
            return await history.aget_messages()

        assert [m.content for m in asyncio.run(more())] == ["hi", "hello", "again"]
        assert [m.content for m in LedgerChatMessageHistory("s", ledger).messages] == ["hi", "hello", "again"]
        assert LedgerChatMessageHistory("other", ledger).messages == []
        asyncio.run(history.aclear())
        assert history.messages == [] and LedgerChatMessageHistory("s", ledger).messages == []
        # The cleared messages stay in the log, retracted.
        transcript = ledger.transcript(history.conversation_id)
        assert [e.message["content"] for e in transcript] == ["hi", "hello", "again"]
        assert all(e.retracted for e in transcript)
