"""Positions and versions are integers, never booleans: ``rewind(cid, False)`` is not
a rewind to position 0. Each call refuses a bool (or a float, or a string) with
``InvalidArgumentError`` naming the argument, and records nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

import contextledger as cl

Call = Callable[[cl.Ledger, UUID, Any], Any]

POSITION_CALLS: dict[str, Call] = {
    "rewind": lambda ledger, cid, value: ledger.rewind(cid, value),
    "retract": lambda ledger, cid, value: ledger.retract(cid, value),
    "edit": lambda ledger, cid, value: ledger.edit(cid, value, {"role": "user", "content": "changed"}),
}
VERSION_CALLS: dict[str, Call] = {
    "context": lambda ledger, cid, value: ledger.context(cid, version=value),
    "working_memory": lambda ledger, cid, value: ledger.working_memory(cid, version=value),
    "tools": lambda ledger, cid, value: ledger.tools(cid, version=value),
    "conversation": lambda ledger, cid, value: ledger.conversation(cid, version=value),
    "fork": lambda ledger, cid, value: ledger.fork(cid, version=value),
}


@pytest.mark.parametrize("value", [False, True, 1.0, "1"], ids=repr)
@pytest.mark.parametrize("name", [*POSITION_CALLS, *VERSION_CALLS])
def test_a_position_or_version_that_is_not_an_integer_is_refused_and_records_nothing(
    name: str, value: Any
) -> None:
    call = {**POSITION_CALLS, **VERSION_CALLS}[name]
    argument = "position" if name in POSITION_CALLS else "version"
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("You are terse.")
        for i in range(4):
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
        before = ledger.conversation(cid).version
        with pytest.raises(cl.InvalidArgumentError) as caught:
            call(ledger, cid, value)
        assert caught.value.argument == argument
        assert f"{argument} must be an integer, not {type(value).__name__}" in caught.value.message
        assert ledger.conversation(cid).version == before
        assert [e.retracted for e in ledger.transcript(cid)] == [False] * 4
        assert len(ledger.conversation_ids()) == 1  # no fork either


def test_integer_positions_still_work() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("You are terse.")
        for i in range(4):
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
        assert ledger.rewind(cid, 1) == [2, 3]
        assert ledger.retract(cid, 0) == [0]
        assert ledger.rewind(cid, -1) == [1]
