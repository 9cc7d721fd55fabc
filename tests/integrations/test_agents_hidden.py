"""A tool output the run's ``call_model_input_filter`` hides from the model is stored
hidden by ``LedgerSession(hide_output=...)``: neither the model nor the summarizer is
ever sent it, the log keeps it, and every request stays valid."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.run import CallModelData, ModelInputData
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.integrations.agents import LedgerSession
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply

set_tracing_disabled(True)

SECRET = "SECRET-TOKEN-4471"
POLICY = cl.ReductionPolicy(trigger_messages=6, keep_messages=2)


@function_tool
def credentials(service: str) -> str:
    """The credentials of a service."""
    return f"{service}: {SECRET} " * 10


def is_secret(item: dict[str, Any]) -> bool:
    return item.get("type") == "function_call_output" and SECRET in str(item.get("output"))


def redact(data: CallModelData[Any]) -> ModelInputData:
    """The run's filter: the model sees a note instead of a secret output."""
    shown = [{**i, "output": "[filtered]"} if is_secret(dict(i)) else i for i in data.model_data.input]
    return ModelInputData(input=shown, instructions=data.model_data.instructions)


def model(request: RecordedRequest) -> Reply:
    last = request.body["input"][-1]
    if last.get("type") == "function_call_output":
        return Reply("Done.")
    return Reply(tool_calls=[Call("credentials", {"service": str(last["content"])})])


class Recording:
    model = "recording"

    def __init__(self) -> None:
        self.requests: list[cl.SummaryRequest] = []

    def summarize(self, request: cl.SummaryRequest) -> cl.SummaryResult:
        self.requests.append(request)
        return cl.SummaryResult(text="Credentials were fetched.", model=self.model, prompt_version="r1")


@pytest.mark.parametrize("summarize_hidden", [False, True])
def test_a_filtered_output_reaches_neither_the_model_nor_the_summarizer(
    sqlite_url: str, summarize_hidden: bool
) -> None:
    recording = Recording()
    policy = POLICY.model_copy(update={"summarize_hidden": summarize_hidden})
    with FakeOpenAIServer(default=Func(model)) as server, cl.Ledger.open(
        sqlite_url, summarizer=recording
    ) as ledger:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        agent = Agent(
            name="assistant",
            tools=[credentials],
            model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
        )
        session = LedgerSession("user-1", ledger, policy=policy, hide_output=is_secret)
        config = RunConfig(call_model_input_filter=redact)

        async def converse() -> None:
            for turn in range(4):
                await Runner.run(agent, f"service{turn}", session=session, run_config=config)
                ledger.wait_idle()

        asyncio.run(converse())
        assert ledger.wait_idle(20)

        assert server.requests_to("responses")
        for request in server.requests_to("responses"):
            assert SECRET not in json.dumps(request.body)
            calls = {i["call_id"] for i in request.body["input"] if i.get("type") == "function_call"}
            outputs = {i["call_id"] for i in request.body["input"] if i.get("type") == "function_call_output"}
            assert calls == outputs
        assert SECRET not in json.dumps(session.context_items())
        assert sum(SECRET in json.dumps(i) for i in session.transcript_items()) == 4
        assert recording.requests and ledger.summaries(session.conversation_id)
        sent = json.dumps([str(m.content) for r in recording.requests for m in r.messages])
        assert (SECRET in sent) is summarize_hidden
        assert ledger.verify(session.conversation_id).ok


def test_add_items_takes_the_call_ids_to_hide(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, summarizer=Recording()) as ledger:
        session = LedgerSession("user-2", ledger)
        items: list[Any] = [
            {"role": "user", "content": "token?"},
            {"type": "function_call", "call_id": "c1", "name": "credentials", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": SECRET},
        ]
        asyncio.run(session.add_items(items, hidden_call_ids={"c1"}))
        context = json.dumps(asyncio.run(session.get_items()))
        assert SECRET not in context and "c1" in context
        assert SECRET in json.dumps(session.transcript_items())
