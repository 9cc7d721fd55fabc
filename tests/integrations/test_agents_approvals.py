"""Tool approvals through the Agents SDK's own ``Runner`` over HTTP, with
``LedgerSession`` on SQLite and PostgreSQL and the SDK's ``SQLiteSession`` side by
side: approving, rejecting, and moving on without answering (an abandoned approval)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.memory.session import Session
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.integrations.agents import ABANDONED_CALL_OUTPUT, LedgerSession
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply

set_tracing_disabled(True)

deleted_paths: list[str] = []


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs approval)."""
    deleted_paths.append(path)
    return f"deleted {path}"


@function_tool
def list_files() -> str:
    """List the files."""
    return "a.txt b.txt"


def scripted_model(request: RecordedRequest) -> Reply:
    """Asks for both tools in parallel when told to delete; otherwise answers."""
    last = request.body["input"][-1]
    if last.get("type") == "function_call_output":
        return Reply(f"done: {last['output']}")
    if "delete" in str(last.get("content")):
        return Reply(tool_calls=[Call("list_files", {}), Call("delete_file", {"path": "a.txt"})])
    return Reply(f"ok: {last.get('content')}")


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest) -> Iterator[cl.Ledger]:
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    with cl.Ledger.open(request.getfixturevalue(name)) as opened:
        yield opened


def _assert_valid(items: list[dict[str, Any]]) -> None:
    """Valid by OpenAI's rules: every output answers an earlier call, every call is answered."""
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            called.add(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in called, f"orphan output {item['call_id']}"
            answered.add(item["call_id"])
    assert called == answered, f"unanswered calls {called - answered}"


def _converse(session: Session, then: str) -> tuple[list[list[dict[str, Any]]], list[Any], list[Any]]:
    """Ask for a deletion, then approve, reject or move on (``then``), then one more
    turn; returns the inputs the model was sent, the session's items when the run
    stopped for the approval, and its items at the end."""
    deleted_paths.clear()
    with FakeOpenAIServer(default=Func(scripted_model)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        agent = Agent(
            name="files",
            tools=[delete_file, list_files],
            model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
        )

        async def scenario() -> tuple[list[Any], list[Any]]:
            stopped = await Runner.run(agent, "please delete a.txt", session=session)
            assert [i.tool_name for i in stopped.interruptions] == ["delete_file"]
            waiting = await session.get_items()
            if then == "move on":
                await Runner.run(agent, "never mind, just say hello", session=session)
            else:
                state = stopped.to_state()
                if then == "approve":
                    state.approve(stopped.interruptions[0])
                else:
                    state.reject(stopped.interruptions[0])
                resumed = await Runner.run(agent, state, session=session)
                assert not resumed.interruptions
            await Runner.run(agent, "thanks", session=session)
            return waiting, await session.get_items()

        waiting, final = asyncio.run(scenario())
        inputs = [r.body["input"] for r in server.requests_to("responses")]
    for sent in inputs:
        _assert_valid(sent)
    return inputs, waiting, final


@pytest.mark.parametrize("then", ["approve", "reject"])
def test_an_approved_or_rejected_call_resumes_as_with_sqlite_session(
    ledger: cl.Ledger, then: str, tmp_path: Path
) -> None:
    theirs = SQLiteSession("files", str(tmp_path / "sdk.db"))
    expected = _converse(theirs, then)
    theirs.close()
    ours = LedgerSession("files", ledger)
    assert _converse(ours, then) == expected
    assert deleted_paths == (["a.txt"] if then == "approve" else [])
    assert ledger.verify(ours.conversation_id).ok


def test_a_new_message_after_a_pending_approval_carries_on_and_records_the_call_abandoned(
    ledger: cl.Ledger, tmp_path: Path
) -> None:
    theirs = SQLiteSession("files", str(tmp_path / "sdk.db"))
    sdk_inputs, sdk_waiting, sdk_final = _converse(theirs, "move on")
    theirs.close()
    ours = LedgerSession("files", ledger)
    inputs, waiting, final = _converse(ours, "move on")
    assert deleted_paths == []
    # While the approval waits, the session holds what SQLiteSession holds: the call
    # that ran with its output, and the call waiting for approval.
    assert waiting == sdk_waiting
    # The run that moves on sends what it sends with SQLiteSession (the SDK leaves the
    # unanswered call out); from then on the call stands answered as abandoned.
    assert inputs[:2] == sdk_inputs[:2]
    abandoned = {"type": "function_call_output", "call_id": waiting[2]["call_id"],
                 "output": ABANDONED_CALL_OUTPUT}
    assert final == [*waiting, abandoned, *sdk_final[len(waiting):]]
    assert inputs[2] == final[:-1]  # the last turn: the whole session, every call answered
    assert ledger.context(ours.conversation_id)[3] == {
        "role": "tool", "tool_call_id": waiting[2]["call_id"], "content": ABANDONED_CALL_OUTPUT,
    }
    assert ledger.verify(ours.conversation_id).ok


def test_an_approval_resumed_after_the_session_moved_on_records_the_real_output(ledger: cl.Ledger) -> None:
    deleted_paths.clear()
    session = LedgerSession("late", ledger)
    with FakeOpenAIServer(default=Func(scripted_model)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        agent = Agent(name="files", tools=[delete_file, list_files],
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))

        async def scenario() -> None:
            stopped = await Runner.run(agent, "please delete a.txt", session=session)
            await Runner.run(agent, "never mind, just say hello", session=session)
            state = stopped.to_state()  # the old approval, resumed late
            state.approve(stopped.interruptions[0])
            await Runner.run(agent, state, session=session)
            await Runner.run(agent, "thanks", session=session)

        asyncio.run(scenario())
        inputs = [r.body["input"] for r in server.requests_to("responses")]
    assert deleted_paths == ["a.txt"]  # the SDK ran the tool before handing its output over
    for sent in inputs:
        _assert_valid(sent)
    items = asyncio.run(session.get_items())
    call_id = items[2]["call_id"]
    # The call's answer is now what the tool returned, where the call stands.
    assert items[4] == {"type": "function_call_output", "call_id": call_id, "output": "deleted a.txt"}
    assert inputs[-1] == items[:-1]
    # The log keeps both: the abandoned answer, and the real output that replaced it.
    answers = [e for e in ledger.transcript(session.conversation_id)
               if e.message.get("tool_call_id") == call_id]
    assert [(a.message["content"], a.superseded_by_version is not None) for a in answers] == [
        (ABANDONED_CALL_OUTPUT, True), ("deleted a.txt", False),
    ]
    assert ledger.verify(session.conversation_id).ok
