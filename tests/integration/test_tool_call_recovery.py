"""Recovery of a conversation left with unanswered tool calls (the application stopped
between the model's tool call and the results): ``Ledger.close_open_tool_calls`` and
``contextledger close-tool-calls``."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.infrastructure.cli import main


def tool_calls(*ids: str) -> dict[str, object]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for i in ids]}


def left_waiting(ledger: cl.Ledger) -> UUID:
    """A conversation whose last tool-call group got one of its two results."""
    cid = ledger.start("You are on call.")
    ledger.append(cid, {"role": "user", "content": "Is the API up?"})
    ledger.append(cid, tool_calls("call_a", "call_b"))
    ledger.append(cid, {"role": "tool", "tool_call_id": "call_a", "content": "200 OK"})
    return cid


def test_each_unanswered_call_gets_an_error_result_and_the_conversation_goes_on(store_url: str) -> None:
    with cl.Ledger.open(store_url, run_policy=False) as ledger:
        cid = left_waiting(ledger)
        with pytest.raises(cl.InvalidMessageError):
            ledger.append(cid, {"role": "user", "content": "hello?"})

        positions = ledger.close_open_tool_calls(cid)

        assert positions == [3]
        closing = ledger.transcript(cid)[3].message
        assert closing["role"] == "tool" and closing["tool_call_id"] == "call_b"
        assert closing["content"].startswith("error")
        assert ledger.append(cid, {"role": "user", "content": "hello?"}) == 4
        assert ledger.verify(cid).ok


def test_with_no_call_open_nothing_is_appended() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s")
        assert ledger.close_open_tool_calls(cid) == []
        ledger.append(cid, {"role": "user", "content": "hi"})
        version = ledger.conversation(cid).version
        assert ledger.close_open_tool_calls(cid) == []
        assert ledger.conversation(cid).version == version


def test_the_given_text_is_marked_as_an_error() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = left_waiting(ledger)
        ledger.close_open_tool_calls(cid, content="the lookup service crashed")
        assert ledger.transcript(cid)[-1].message["content"] == "error: the lookup service crashed"


@settings(max_examples=25, deadline=None)
@given(calls=st.integers(min_value=1, max_value=6), data=st.data())
def test_exactly_the_unanswered_calls_are_closed_in_call_order(calls: int, data: st.DataObject) -> None:
    answered = data.draw(st.integers(min_value=0, max_value=calls - 1))
    ids = [f"call_{n}" for n in range(calls)]
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "go"})
        ledger.append(cid, tool_calls(*ids))
        for call_id in ids[:answered]:
            ledger.append(cid, {"role": "tool", "tool_call_id": call_id, "content": "ok"})
        positions = ledger.close_open_tool_calls(cid)
        assert positions == list(range(2 + answered, 2 + calls))
        closed = [e.message["tool_call_id"] for e in ledger.transcript(cid)[2 + answered:]]
        assert closed == ids[answered:]
        assert ledger.close_open_tool_calls(cid) == []


def test_the_command_closes_the_open_calls_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'stuck.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = left_waiting(ledger)
    assert main(["close-tool-calls", str(cid), "--database", url,
                 "--message", "error: the search backend timed out"]) == 0
    out = capsys.readouterr().out
    assert "closed 1 open tool call(s) at positions 3" in out and "call_b" in out
    assert main(["close-tool-calls", str(cid), "--database", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["positions"] == []
    with cl.Ledger.open(url, run_policy=False) as ledger:
        assert ledger.transcript(cid)[3].message["content"] == "error: the search backend timed out"
        assert ledger.verify(cid).ok
