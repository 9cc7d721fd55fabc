"""A conversation addressed by key is named by that key in every error about it (its
message and its ``key`` attribute), never only by the id derived from it: on the
``Ledger`` and on the ``AsyncLedger``."""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import contextledger as cl

#: Arguments after the conversation for every public method that takes one.
ARGUMENTS: dict[str, tuple[Any, ...]] = {
    "append": ({"role": "user", "content": "hi"},),
    "extend": ([{"role": "user", "content": "hi"}],),
    "retract": (0,),
    "edit": (0, {"role": "user", "content": "hi"}),
    "rewind": (0,),
    "change_policy": (cl.ReductionPolicy(trigger_messages=20, keep_messages=4),),
    "change_tools": ([],),
    "change_system_prompt": ("s",),
    "append_items": ([{"role": "user", "content": "hi"}],),
}
KWARGS: dict[str, dict[str, Any]] = {"record_usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def conversation_methods() -> list[str]:
    return sorted(
        name
        for name, method in inspect.getmembers(cl.Ledger, inspect.isfunction)
        if not name.startswith("_") and list(inspect.signature(method).parameters)[1:2] == ["conversation_id"]
    )


@pytest.fixture
def ledger(store_url: str) -> Iterator[cl.Ledger]:
    with cl.Ledger.open(store_url, run_policy=False) as ledger:
        yield ledger


def raised(call: Callable[[], Any]) -> cl.ContextLedgerError:
    with pytest.raises(cl.ContextLedgerError) as caught:
        result = call()
        if inspect.isgenerator(result):
            list(result)
    return caught.value


def assert_names_key(error: cl.ContextLedgerError, key: str) -> None:
    assert error.key == key
    assert repr(key) in error.message and repr(key) in str(error)
    assert error.context["key"] == key
    again = pickle.loads(pickle.dumps(error))
    assert (again.key, str(again)) == (key, str(error))


def test_every_method_names_an_unknown_key(ledger: cl.Ledger) -> None:
    methods = conversation_methods()
    assert {"append", "context", "fork", "pop", "replay", "retract", "totals", "verify"} <= set(methods)
    for name in methods:
        call = getattr(ledger, name)
        error = raised(lambda call=call, name=name: call("chat-404", *ARGUMENTS.get(name, ()),
                                                         **KWARGS.get(name, {})))
        assert isinstance(error, cl.ConversationNotFoundError), (name, error)
        assert_names_key(error, "chat-404")


def test_errors_about_a_known_key_name_it(ledger: cl.Ledger) -> None:
    ledger.start("s", key="chat-7")
    ledger.append("chat-7", {"role": "user", "content": "hi"})
    for call, kind in (
        (lambda: ledger.retract("chat-7", 5), cl.UnknownPositionError),
        (lambda: ledger.edit("chat-7", 0, {"role": "assistant", "content": "x"}), cl.InvalidEditError),
        (lambda: ledger.append("chat-7", {"role": "tool", "tool_call_id": "c", "content": "x"}),
         cl.InvalidMessageError),
        (lambda: ledger.context("chat-7", version=50), cl.ConversationNotFoundError),
        (lambda: ledger.fork("chat-7", version=50), cl.ConversationNotFoundError),
        (lambda: ledger.append("chat-7", {"role": "user", "content": "other"}, client_message_id="m")
         if ledger.append("chat-7", {"role": "user", "content": "one"}, client_message_id="m") >= 0
         else None, cl.IdempotencyConflictError),
        (lambda: ledger.start("s", key="chat-7"), cl.DuplicateConversationError),
        (lambda: ledger.get_or_start("chat-8", policy="not a policy"), cl.ConfigurationError),
    ):
        error = raised(call)
        assert isinstance(error, kind), error
        assert_names_key(error, "chat-8" if kind is cl.ConfigurationError else "chat-7")


def test_an_id_is_not_named_as_a_key_and_another_conversation_keeps_its_own_name(ledger: cl.Ledger) -> None:
    cid = ledger.start("s", key="chat-1")
    error = raised(lambda: ledger.retract(cid, 3))
    assert error.key is None and "chat-1" not in error.message
    error = raised(lambda: ledger.retract(str(cid), 3))
    assert error.key is None
    ledger.start("s", key="chat-2")
    error = raised(lambda: ledger.fork("chat-1", key="chat-2"))  # the fork's key is taken
    assert isinstance(error, cl.DuplicateConversationError) and error.key == "chat-2"


def test_the_async_twin_names_the_key(store_url: str) -> None:
    async def main() -> None:
        async with cl.AsyncLedger.open(store_url, run_policy=False) as ledger:
            for call in (lambda: ledger.context("chat-404"), lambda: ledger.append("chat-404", {"role": "user", "content": "x"}),
                         lambda: ledger.pop("chat-404"), lambda: ledger.fork("chat-404"),
                         lambda: ledger.transcript("chat-404")):
                with pytest.raises(cl.ConversationNotFoundError) as caught:
                    await call()
                assert_names_key(caught.value, "chat-404")
            await ledger.get_or_start("chat-5", system_prompt="s")
            with pytest.raises(cl.UnknownPositionError) as caught:
                await ledger.retract("chat-5", 9)
            assert_names_key(caught.value, "chat-5")

    asyncio.run(main())
