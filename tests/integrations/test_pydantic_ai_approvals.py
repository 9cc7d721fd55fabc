"""A real ``pydantic_ai.Agent`` whose run ends in ``DeferredToolRequests`` (a tool that
needs approval) resumes from ``LedgerHistory.messages()`` with ``deferred_tool_results``,
over HTTP against the local Chat Completions server, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
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


def scripted_model(request: RecordedRequest) -> Reply:
    """A parallel call (one tool runs at once, one needs approval), then an answer."""
    last = request.body["messages"][-1]
    if last["role"] == "tool":
        results = [m["content"] for m in request.body["messages"] if m["role"] == "tool"]
        return Reply("Done: " + " | ".join(str(r) for r in results))
    text = str(last["content"])
    if text.startswith("chat"):
        return Reply(f"Answer to {text}")
    return Reply(
        tool_calls=(
            Call("weather", {"city": "Oslo"}, call_id=f"w-{text}"),
            Call("delete_file", {"path": f"{text}.txt"}, call_id=f"d-{text}"),
        )
    )


def _agent(server: FakeOpenAIServer, history: LedgerHistory) -> Agent[None, str | DeferredToolRequests]:
    model = OpenAIChatModel(
        "gpt-4o-mini", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
    )
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        model, output_type=[str, DeferredToolRequests], capabilities=[history.capability]
    )

    @agent.tool_plain
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    return agent


def _approve_then_deny(url: str) -> None:
    with FakeOpenAIServer(default=Func(scripted_model)) as server, cl.Ledger.open(url) as ledger:
        history = LedgerHistory("approver", ledger, system_prompt="You manage files.")
        agent = _agent(server, history)
        added: list[Any] = []
        for prompt, approved in (("first", True), ("second", False)):
            asked = agent.run_sync(prompt, message_history=history.messages())
            assert isinstance(asked.output, DeferredToolRequests)
            assert [c.tool_call_id for c in asked.output.approvals] == [f"d-{prompt}"]
            history.extend(asked.new_messages())
            added.extend(asked.new_messages())

            # The pending calls are in the working memory the resuming run is given.
            memory = history.messages()
            assert isinstance(memory[-1], ModelResponse) or isinstance(memory[-2], ModelResponse)
            pending = [
                p.tool_call_id
                for m in memory
                if isinstance(m, ModelResponse)
                for p in m.parts
                if isinstance(p, ToolCallPart)
            ]
            assert f"d-{prompt}" in pending

            answer = True if approved else ToolDenied("not allowed")
            resumed = agent.run_sync(
                message_history=memory,
                deferred_tool_results=DeferredToolResults(approvals={f"d-{prompt}": answer}),
            )
            expected = f"deleted {prompt}.txt" if approved else "not allowed"
            assert isinstance(resumed.output, str) and expected in resumed.output
            history.extend(resumed.new_messages())
            added.extend(resumed.new_messages())

        # The model saw each call group whole: the assistant's calls, then both results.
        for request in server.requests_to("chat"):
            assert openai_context_violations(request.body["messages"]) == []
        last = server.requests_to("chat")[-1].body["messages"]
        assert [m["tool_call_id"] for m in last if m["role"] == "tool"][-2:] == ["w-second", "d-second"]
        # Nothing is left open, the log holds every message exactly, and it verifies.
        context = ledger.context(history.conversation_id)
        assert context[-1] == {
            "role": "assistant",
            "content": "Done: sunny in Oslo | deleted first.txt | sunny in Oslo | not allowed",
        }
        assert ModelMessagesTypeAdapter.dump_json(
            history.all_messages()
        ) == ModelMessagesTypeAdapter.dump_json(added)
        assert ledger.verify(history.conversation_id).ok


def test_a_deferred_approval_resumes_from_the_history_on_sqlite(sqlite_url: str) -> None:
    _approve_then_deny(sqlite_url)


@pytest.mark.postgres
def test_a_deferred_approval_resumes_from_the_history_on_postgresql(postgres_url: str) -> None:
    _approve_then_deny(postgres_url)


def _give_up(url: str) -> None:
    with FakeOpenAIServer(default=Func(scripted_model)) as server, cl.Ledger.open(url) as ledger:
        history = LedgerHistory("quitter", ledger)
        agent = _agent(server, history)
        asked = agent.run_sync("first", message_history=history.messages())
        history.extend(asked.new_messages())
        # The conversation moves on: repair_messages() closes the waiting call (as
        # Pydantic AI does before any request), extend stores the same return first.
        repaired = repair_messages(history.messages())
        went_on = agent.run_sync("chat 1", message_history=repaired)
        history.extend(went_on.new_messages())
        logged = history.all_messages()
        closing = logged[-3]
        assert isinstance(closing, ModelRequest)
        assert [(p.tool_call_id, p.outcome) for p in closing.parts if isinstance(p, ToolReturnPart)] == [
            ("d-first", "interrupted")
        ]
        # The model was sent exactly that, and the next turn goes on from the history.
        sent = server.requests_to("chat")[-1].body["messages"]
        assert sent == ledger.context(history.conversation_id)[:-1]
        assert openai_context_violations(sent) == []
        again = agent.run_sync("chat 2", message_history=history.messages())
        assert again.output == "Answer to chat 2"
        history.extend(again.new_messages())
        assert ledger.verify(history.conversation_id).ok


def test_an_approval_given_up_with_repair_messages_is_closed_in_the_log_on_sqlite(sqlite_url: str) -> None:
    _give_up(sqlite_url)


@pytest.mark.postgres
def test_an_approval_given_up_with_repair_messages_is_closed_in_the_log_on_postgresql(
    postgres_url: str,
) -> None:
    _give_up(postgres_url)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 2), st.lists(st.booleans(), min_size=2, max_size=2)),
        min_size=1,
        max_size=3,
    )
)
def test_any_mix_of_direct_and_deferred_calls_resumes_and_the_log_keeps_every_message(
    sqlite_url: str, turns: list[tuple[int, int, list[bool]]]
) -> None:
    """Each turn: a response with ``direct`` calls run at once and ``deferred`` calls
    needing approval (approved or denied); the next run resumes from ``messages()``."""
    plan: dict[str, tuple[int, int]] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, UserPromptPart) for p in last.parts):
            prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
            direct, deferred = plan[str(prompt)]
            calls = [
                ToolCallPart("weather", {"city": f"c{n}"}, tool_call_id=f"{prompt}-w{n}")
                for n in range(direct)
            ]
            calls += [
                ToolCallPart("delete_file", {"path": f"f{n}"}, tool_call_id=f"{prompt}-d{n}")
                for n in range(deferred)
            ]
            return ModelResponse(parts=calls)
        return ModelResponse(parts=[TextPart("done")])

    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        # Every example shares the fixture's store: a key of its own (``id()`` of a
        # freed list is reused, which made an example continue another's history).
        history = LedgerHistory(f"mix-{uuid.uuid4().hex}", ledger)
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            FunctionModel(model), output_type=[str, DeferredToolRequests], capabilities=[history.capability]
        )

        @agent.tool_plain
        def weather(city: str) -> str:
            return f"sunny in {city}"

        @agent.tool_plain(requires_approval=True)
        def delete_file(path: str) -> str:
            return f"deleted {path}"

        added: list[ModelMessage] = []
        for number, (direct, deferred, answers) in enumerate(turns):
            prompt = f"t{number}"
            plan[prompt] = (direct, deferred)
            asked = agent.run_sync(prompt, message_history=history.messages())
            assert isinstance(asked.output, DeferredToolRequests)
            history.extend(asked.new_messages())
            added.extend(asked.new_messages())
            approvals: dict[str, bool | ToolDenied] = {
                c.tool_call_id: True if ok else ToolDenied("no")
                for c, ok in zip(asked.output.approvals, answers, strict=False)
            }
            resumed = agent.run_sync(
                message_history=history.messages(),
                deferred_tool_results=DeferredToolResults(approvals=approvals),
            )
            assert resumed.output == "done"
            history.extend(resumed.new_messages())
            added.extend(resumed.new_messages())
            # Nothing is left open: every call is answered in the context, the answer last.
            assert ledger.context(history.conversation_id)[-1] == {"role": "assistant", "content": "done"}
        assert ModelMessagesTypeAdapter.dump_json(
            history.all_messages()
        ) == ModelMessagesTypeAdapter.dump_json(added)
        assert openai_context_violations(ledger.context(history.conversation_id)) == []
        assert ledger.verify(history.conversation_id).ok
