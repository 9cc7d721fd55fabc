"""Closing a ledger: calls in flight finish, new ones are refused, nothing crashes.

A web service shutting down closes its ledger while requests are still running. Every
store is closed under load in a process of its own (a crash shows as a negative return
code), and every public method of a closed ledger (sync, async, sharded) raises
``LedgerClosedError`` and writes nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import contextledger as cl
from contextledger.domain.conversation import SummaryFailure

REPO = Path(__file__).resolve().parents[2]
POLICY = cl.ReductionPolicy(trigger_messages=2, keep_messages=1)


# -- closing under load, in a process of its own --------------------------------------


#: Rounds of each mode (threads, then asyncio tasks, in turn) in one process per store.
#: Every round catches calls in flight -- called before ``close``, returned after it:
#: about 8 a round with threads, 8 to 11 with tasks, in every round of 20 of each on
#: each store (``rounds_in_flight`` in the report) -- so each round is the race; the
#: rounds vary where the close lands (its random delay: before the first call, in an
#: append, a read, a summary). 20 of each per store, where there were 50 of each in a
#: process per mode, still closes every store 40 times with calls in flight.
ROUNDS = 20


def test_closing_under_load_crashes_nothing_and_loses_nothing(store_url: str) -> None:
    """20 rounds of each: 8 threads (or 48 asyncio tasks through AsyncLedger) append
    and read while close() runs. Each call succeeds or raises LedgerClosedError; every
    append that returned a position is stored, the log gap-free, its digests intact."""
    _close_under_load(store_url)


def test_closing_a_sharded_ledger_under_load_crashes_nothing_and_loses_nothing(tmp_path: Path) -> None:
    _close_under_load(f"sqlite:///{tmp_path / 'a.db'},sqlite:///{tmp_path / 'b.db'}")


def _close_under_load(url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.close_under_load", url, str(ROUNDS), "threads,async"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["problems"] == []
    for mode in ("threads", "async"):
        assert report[mode]["rounds"] == ROUNDS
        assert report[mode]["refused"] > 0  # calls were refused once the ledgers closed
        assert report[mode]["in_flight"] > 0  # calls were in flight when the ledgers closed
        assert report[mode]["calls"] > 0


# -- every call after close -----------------------------------------------------------


class _Follower:
    """The smallest follower ``attach`` takes."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True


def _calls(
    cid: UUID, request: cl.SummaryRequest, copy: cl.Conversation
) -> dict[str, Callable[[cl.Ledger], Any]]:
    """One real call of each public method of the ledger."""
    message = {"role": "user", "content": "after close"}
    result = cl.SummaryResult(text="a summary", model="gpt-4o-mini", prompt_version="v1")
    failure = SummaryFailure(kind="timeout", error="slow", retryable=True, called_provider=True)
    return {
        "start": lambda ledger: ledger.start("Another.", key="after-close"),
        "get_or_start": lambda ledger: ledger.get_or_start("after-close-2", system_prompt="x"),
        "append": lambda ledger: ledger.append(cid, message),
        "extend": lambda ledger: ledger.extend(cid, [message, message]),
        "append_items": lambda ledger: ledger.append_items(
            cid, [{"type": "message", "role": "user", "content": "item"}]
        ),
        "close_open_tool_calls": lambda ledger: ledger.close_open_tool_calls(cid),
        "change_policy": lambda ledger: ledger.change_policy(
            cid, cl.ReductionPolicy(trigger_messages=50, keep_messages=5)
        ),
        "change_tools": lambda ledger: ledger.change_tools(cid, None),
        "change_system_prompt": lambda ledger: ledger.change_system_prompt(cid, "New prompt."),
        "record_usage": lambda ledger: ledger.record_usage(cid, prompt_tokens=10, completion_tokens=2),
        "retract": lambda ledger: ledger.retract(cid, 0),
        "edit": lambda ledger: ledger.edit(cid, 0, {"role": "user", "content": "edited"}),
        "rewind": lambda ledger: ledger.rewind(cid, 0),
        "pop": lambda ledger: ledger.pop(cid),
        "clear": lambda ledger: ledger.clear(cid),
        "fork": lambda ledger: ledger.fork(cid, key="fork-after-close"),
        "erase": lambda ledger: ledger.erase(conversation=cid, reason="after close"),
        "subject_of": lambda ledger: ledger.subject_of(cid),
        "export_subject": lambda ledger: ledger.export_subject("user-1"),
        "check_receipt": lambda ledger: ledger.check_receipt({"format": "contextledger-erasure-receipt/1"}),
        "idle_conversations": lambda ledger: ledger.idle_conversations(30),
        "pending_summary": lambda ledger: ledger.pending_summary(cid),
        "record_summary": lambda ledger: ledger.record_summary(request, result),
        "record_summary_failure": lambda ledger: ledger.record_summary_failure(request, failure),
        "save": lambda ledger: ledger.save(copy),
        "context": lambda ledger: ledger.context(cid),
        "context_items": lambda ledger: ledger.context_items(cid),
        "tools": lambda ledger: ledger.tools(cid),
        "working_memory": lambda ledger: ledger.working_memory(cid),
        "simulate": lambda ledger: ledger.simulate({"trigger_messages": 4, "keep_messages": 1}),
        "conversation": lambda ledger: ledger.conversation(cid),
        "totals": lambda ledger: ledger.totals(),
        "transcript": lambda ledger: ledger.transcript(cid),
        "transcript_items": lambda ledger: ledger.transcript_items(cid),
        "summaries": lambda ledger: ledger.summaries(cid),
        "replay": lambda ledger: ledger.replay(cid),
        "conversation_ids": lambda ledger: ledger.conversation_ids(),
        "verify": lambda ledger: ledger.verify(),
        "wait_idle": lambda ledger: ledger.wait_idle(1.0),
        "start_policy": lambda ledger: ledger.start_policy(),
        "attach": lambda ledger: ledger.attach(_Follower()),
    }


def _public_methods() -> set[str]:
    """Every public method of the Ledger that is not ``close`` or a hook of the store's
    own machinery (the listeners, the store's save, pure helpers)."""
    kept = {
        "close",
        "add_listener",
        "add_event_listener",
        "counter_for",
        "summarizer_model_name",
        "save_conversations",
        "construct_env",
        "construct_repository",
    }
    names = set()
    for name in dir(cl.Ledger):
        attribute = inspect.getattr_static(cl.Ledger, name)
        if name.startswith("_") or name in kept or not inspect.isfunction(attribute):
            continue
        if getattr(attribute, "__module__", "").startswith("contextledger."):
            names.add(name)
    return names


def _stored(url: str, closed: cl.Ledger) -> int:
    """The number of events in the store (read from a new ledger; an in-memory store
    ends with its ledger, so from the closed one's recorder)."""
    if url.startswith("memory:"):
        return closed.recorder.max_notification_id() or 0
    with cl.Ledger.open(url, run_policy=False) as reopened:
        return sum(len(list(reopened.replay(cid))) for cid in reopened.conversation_ids())


def _open_with_history(url: str | list[str]) -> tuple[cl.Ledger, UUID, cl.SummaryRequest, cl.Conversation]:
    ledger = cl.Ledger.open(url, run_policy=False)
    cid = ledger.start("You are closed soon.", policy=POLICY, key="chat-1")
    ledger.extend(cid, [{"role": "user", "content": f"m{i}"} for i in range(4)])
    request = ledger.pending_summary(cid)
    assert request is not None
    return ledger, cid, request, ledger.conversation(cid)


def test_every_public_method_is_listed_here() -> None:
    calls = _calls(UUID(int=1), None, None)  # type: ignore[arg-type]
    assert set(calls) == _public_methods()


def test_every_call_after_close_is_refused_and_writes_nothing(store_url: str) -> None:
    ledger, cid, request, copy = _open_with_history(store_url)
    ledger.close()
    before = _stored(store_url, ledger)
    for name, call in _calls(cid, request, copy).items():
        with pytest.raises(cl.LedgerClosedError, match="closed"):
            call(ledger)
            pytest.fail(f"{name} was not refused")
    with pytest.raises(cl.LedgerClosedError), ledger:
        pytest.fail("a closed ledger was entered")
    ledger.close()  # closing again does nothing
    ledger.close(timeout=0)
    assert _stored(store_url, ledger) == before


def test_a_sharded_ledger_closes_every_store(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"]
    ledger, cid, request, copy = _open_with_history(urls)
    others: list[UUID] = []
    for _ in range(200):  # until both stores hold some (ids are random)
        others.append(ledger.start("More.", policy=POLICY))
        if {ledger.store.placement(c) for c in others} == {0, 1}:
            break
    assert {ledger.store.placement(c) for c in others} == {0, 1}
    ledger.close()
    for name, call in _calls(cid, request, copy).items():
        with pytest.raises(cl.LedgerClosedError):
            call(ledger)
            pytest.fail(f"{name} was not refused")
    for shard in ledger.shards:
        with pytest.raises(cl.LedgerClosedError):
            shard.conversation_ids()
    with cl.Ledger.open(urls, run_policy=False) as reopened:
        assert sorted(reopened.conversation_ids()) == sorted([cid, *others])
        assert len(reopened.transcript(cid)) == 4


def test_close_takes_a_timeout_in_seconds() -> None:
    ledger = cl.Ledger.open("memory://", run_policy=False)
    for bad in (-1, "soon", True, float("nan")):
        with pytest.raises(cl.InvalidArgumentError, match="timeout"):
            ledger.close(timeout=bad)  # type: ignore[arg-type]
    ledger.start("Still open.")  # a refused close leaves the ledger open
    ledger.close(timeout=0)
    with pytest.raises(cl.LedgerClosedError):
        ledger.start("Closed.")


# -- the async ledger ---------------------------------------------------------------------


ASYNC_CALLS: dict[str, Callable[[cl.AsyncLedger, UUID], Any]] = {
    "start": lambda al, cid: al.start("x"),
    "get_or_start": lambda al, cid: al.get_or_start("k"),
    "append": lambda al, cid: al.append(cid, {"role": "user", "content": "x"}),
    "extend": lambda al, cid: al.extend(cid, [{"role": "user", "content": "x"}]),
    "change_policy": lambda al, cid: al.change_policy(cid, POLICY),
    "change_tools": lambda al, cid: al.change_tools(cid, None),
    "record_usage": lambda al, cid: al.record_usage(cid, prompt_tokens=1, completion_tokens=1),
    "close_open_tool_calls": lambda al, cid: al.close_open_tool_calls(cid),
    "retract": lambda al, cid: al.retract(cid, 0),
    "edit": lambda al, cid: al.edit(cid, 0, {"role": "user", "content": "y"}),
    "rewind": lambda al, cid: al.rewind(cid, 0),
    "pop": lambda al, cid: al.pop(cid),
    "clear": lambda al, cid: al.clear(cid),
    "change_system_prompt": lambda al, cid: al.change_system_prompt(cid, "z"),
    "fork": lambda al, cid: al.fork(cid),
    "erase": lambda al, cid: al.erase(conversation=cid, reason="after close"),
    "subject_of": lambda al, cid: al.subject_of(cid),
    "export_subject": lambda al, cid: al.export_subject("user-1"),
    "check_receipt": lambda al, cid: al.check_receipt({"format": "contextledger-erasure-receipt/1"}),
    "idle_conversations": lambda al, cid: al.idle_conversations(30),
    "context": lambda al, cid: al.context(cid),
    "tools": lambda al, cid: al.tools(cid),
    "working_memory": lambda al, cid: al.working_memory(cid),
    "simulate": lambda al, cid: al.simulate({"trigger_messages": 4, "keep_messages": 1}),
    "totals": lambda al, cid: al.totals(cid),
    "transcript": lambda al, cid: al.transcript(cid),
    "summaries": lambda al, cid: al.summaries(cid),
    "pending_summary": lambda al, cid: al.pending_summary(cid),
    "replay": lambda al, cid: al.replay(cid),
    "conversation_ids": lambda al, cid: al.conversation_ids(),
    "verify": lambda al, cid: al.verify(cid),
    "wait_idle": lambda al, cid: al.wait_idle(1.0),
    "run": lambda al, cid: al.run(al.sync.context, cid),
    "start_up": lambda al, cid: al.start_up(),
}


def test_every_async_coroutine_is_listed_here() -> None:
    coroutines = {
        name
        for name, attribute in vars(cl.AsyncLedger).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(attribute)
    }
    assert coroutines - {"aclose", "record_summary"} == set(ASYNC_CALLS)


def test_every_async_call_after_aclose_is_refused_and_writes_nothing(store_url: str) -> None:
    async def scenario() -> int:
        async with cl.AsyncLedger.open(store_url, run_policy=False) as ledger:
            cid = await ledger.start("You are closed soon.")
            await ledger.append(cid, {"role": "user", "content": "hi"})
        await ledger.aclose()  # closing again does nothing
        for name, call in ASYNC_CALLS.items():
            with pytest.raises(cl.LedgerClosedError):
                await call(ledger, cid)
                pytest.fail(f"{name} was not refused")
        return _stored(store_url, ledger.sync)

    assert asyncio.run(scenario()) == 2


def test_an_async_ledger_closed_before_it_opened_refuses_calls() -> None:
    async def scenario() -> None:
        ledger = cl.AsyncLedger.open("memory://", run_policy=False)
        await ledger.aclose()
        with pytest.raises(cl.LedgerClosedError):
            await ledger.start_up()
        with pytest.raises(cl.LedgerClosedError):
            await ledger.start("x")

    asyncio.run(scenario())


# -- a call in flight while close() runs ----------------------------------------------------


class _HeldCounter:
    """The real tiktoken counter, holding the count of a message saying ``hold``
    until ``go`` is set (a slow call, deterministically in flight)."""

    def __init__(self) -> None:
        self.inner = cl.TiktokenCounter("gpt-4o-mini")
        self.reply_priming = self.inner.reply_priming
        self.held = threading.Event()
        self.go = threading.Event()

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text)

    def count_message(self, message: cl.Message) -> int:
        if message.content == "hold":
            self.held.set()
            self.go.wait()
        return self.inner.count_message(message)


def _append_in_flight(
    ledger: cl.Ledger, cid: UUID, counter: _HeldCounter
) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def append() -> None:
        try:
            outcome.append(ledger.append(cid, {"role": "user", "content": "hold"}))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=append, daemon=True)
    thread.start()
    assert counter.held.wait(30)
    return thread, outcome


def _refuses(ledger: cl.Ledger) -> bool:
    """Whether the ledger refuses calls now (waits for close() to have begun)."""
    for _ in range(3000):
        try:
            ledger.conversation_ids()
        except cl.LedgerClosedError:
            return True
        time.sleep(0.005)
    return False


def test_close_lets_a_call_in_flight_finish_then_closes_the_store(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTLEDGER_CLOSE_TIMEOUT", "600")  # Settings.close_timeout
    counter = _HeldCounter()
    ledger = cl.Ledger.open(store_url, token_counter=counter)
    cid = ledger.start("You wait.")
    thread, outcome = _append_in_flight(ledger, cid, counter)
    closing = threading.Thread(target=ledger.close, daemon=True)
    closing.start()
    try:
        assert _refuses(ledger)
        assert closing.is_alive()  # waiting for the append in flight
    finally:
        counter.go.set()
    thread.join()
    closing.join()
    assert outcome == [0]
    if not store_url.startswith("memory:"):
        assert ledger.recorder.datastore.pool.closed
        with cl.Ledger.open(store_url, run_policy=False) as reopened:
            assert [e.message["content"] for e in reopened.transcript(cid)] == ["hold"]


def test_a_call_still_running_after_the_timeout_finishes_and_the_store_closes_after_it(
    store_url: str,
) -> None:
    counter = _HeldCounter()
    ledger = cl.Ledger.open(store_url, token_counter=counter)
    cid = ledger.start("You wait.")
    thread, outcome = _append_in_flight(ledger, cid, counter)
    try:
        ledger.close(timeout=0)  # returns with the append still in flight
        if not store_url.startswith("memory:"):
            assert not ledger.recorder.datastore.pool.closed
        with pytest.raises(cl.LedgerClosedError):
            ledger.append(cid, {"role": "user", "content": "refused"})
    finally:
        counter.go.set()
    thread.join()
    assert outcome == [0]
    if not store_url.startswith("memory:"):
        assert ledger.recorder.datastore.pool.closed  # released by the call, as it ended
        with cl.Ledger.open(store_url, run_policy=False) as reopened:
            assert [e.message["content"] for e in reopened.transcript(cid)] == ["hold"]
