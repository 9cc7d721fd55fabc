"""A LangChain tool result marked as filtered from the model (``LedgerMiddleware(
hide_output=...)``, or ``response_metadata={"hidden_from_model": True}``) is stored
hidden: the model and the summarizer get its placeholder, the log keeps it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain")
pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import contextledger as cl
from contextledger.integrations.langchain import LedgerChatMessageHistory, LedgerMiddleware
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply
from contextledger.testing import openai_context_violations as violations

SECRET = "SECRET-TOKEN-4471"
POLICY = cl.ReductionPolicy(trigger_messages=6, keep_messages=2)


@tool
def credentials(service: str) -> str:
    """The credentials of a service."""
    return f"{service}: {SECRET} " * 10


def _answer(request: RecordedRequest) -> Reply:
    last = request.body["messages"][-1]
    if last["role"] == "user":
        return Reply(tool_calls=(Call("credentials", {"service": str(last["content"])}),))
    return Reply("Done.")


class Recording:
    model = "recording"

    def __init__(self) -> None:
        self.requests: list[cl.SummaryRequest] = []

    def summarize(self, request: cl.SummaryRequest) -> cl.SummaryResult:
        self.requests.append(request)
        return cl.SummaryResult(text="Credentials were fetched.", model=self.model, prompt_version="r1")


def test_the_middleware_keeps_a_hidden_output_from_the_model_and_the_summarizer(shared_url: str) -> None:
    recording = Recording()
    with FakeOpenAIServer(default=Func(_answer)) as server, cl.Ledger.open(
        shared_url, summarizer=recording
    ) as ledger:
        memory = LedgerMiddleware(ledger, policy=POLICY, hide_output=lambda m: m.name == "credentials")
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0)
        agent = create_agent(model, [credentials], middleware=[memory])
        config = {"configurable": {"thread_id": "thread-1"}}
        for turn in range(4):
            result = agent.invoke({"messages": [HumanMessage(f"service{turn}")]}, config)
            assert isinstance(result["messages"][-1], AIMessage)
            ledger.wait_idle()
        assert ledger.wait_idle(20)
        assert server.requests_to("chat")
        for request in server.requests_to("chat"):
            assert SECRET not in json.dumps(request.body)
            assert not violations(request.body["messages"])
        cid = memory.conversation_id("thread-1")
        assert sum(SECRET in str(e.message["content"]) for e in ledger.transcript(cid)) == 4
        assert recording.requests and ledger.summaries(cid)
        assert all(SECRET not in str(m.content) for r in recording.requests for m in r.messages)
        assert ledger.verify(cid).ok


def test_a_tool_message_marked_hidden_from_model_is_stored_hidden(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, summarizer=Recording()) as ledger:
        history = LedgerChatMessageHistory("s-1", ledger)
        call = AIMessage("", tool_calls=[{"id": "c1", "name": "credentials", "args": {}}])
        output = ToolMessage(SECRET, tool_call_id="c1", response_metadata={"hidden_from_model": True})
        history.add_messages([HumanMessage("token?"), call, output])
        shown = history.messages
        assert isinstance(shown[-1], ToolMessage) and shown[-1].tool_call_id == "c1"
        assert SECRET not in str(shown[-1].content)
        assert ledger.transcript(history.conversation_id)[-1].message["content"] == SECRET
