"""How ``LedgerSession``'s async calls run: through the ledger's gate (refused once it
is closed), in order on the session's thread, and cancelled as ``asyncio.to_thread``
calls are (one already running finishes, whole; one not started yet does not run)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

import contextledger as cl
from contextledger.domain.values.errors import LedgerClosedError
from contextledger.integrations.agents import LedgerSession


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest) -> Iterator[cl.Ledger]:
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    with cl.Ledger.open(request.getfixturevalue(name)) as opened:
        yield opened


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def contents(items: list[Any]) -> list[Any]:
    return [i.get("content") for i in items]


def test_every_call_of_a_session_is_refused_once_its_ledger_is_closed(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("closing", ledger)
        await session.add_items([user("before")])
        assert contents(await session.get_items()) == ["before"]
        ledger.close()
        with pytest.raises(LedgerClosedError):
            await session.get_items()
        with pytest.raises(LedgerClosedError):
            await session.add_items([user("after")])
        with pytest.raises(LedgerClosedError):
            await session.pop_item()
        with pytest.raises(LedgerClosedError):
            await session.clear_session()

    asyncio.run(scenario())


def test_a_session_whose_own_url_was_closed_refuses_its_calls(sqlite_url: str) -> None:
    async def scenario() -> None:
        session = LedgerSession("own", sqlite_url)
        await session.add_items([user("kept")])
        session.close()
        with pytest.raises(LedgerClosedError):
            await session.add_items([user("refused")])
        with pytest.raises(LedgerClosedError):
            await session.get_items()

    asyncio.run(scenario())
    with cl.Ledger.open(sqlite_url) as reopened:
        assert contents(LedgerSession("own", reopened).transcript_items()) == ["kept"]


async def _until_waiting(lock: Any) -> None:
    while lock.waiting() == 0:  # the worker is inside the call, queued for the lock
        await asyncio.sleep(0.001)


def test_a_cancelled_call_already_running_finishes_and_a_queued_one_does_not_run(
    ledger: cl.Ledger,
) -> None:
    async def scenario() -> None:
        session = LedgerSession("cancel", ledger)
        await session.add_items([user("first")])
        lock = ledger.store.lock(session.conversation_id)
        lock.acquire()  # another writer of this process holds the conversation
        try:
            running = asyncio.ensure_future(session.add_items([user("running"), user("whole")]))
            await _until_waiting(lock)
            queued = asyncio.ensure_future(session.add_items([user("queued")]))
            await asyncio.sleep(0)  # handed to the session's thread, behind the running one
            running.cancel()
            queued.cancel()
            for task in (running, queued):
                with pytest.raises(asyncio.CancelledError):
                    await task
        finally:
            lock.release()
        # Calls run in order: this one comes after the cancelled running call ended.
        assert contents(await session.get_items()) == ["first", "running", "whole"]
        await session.add_items([user("later")])
        assert contents(await session.get_items())[-1] == "later"

    asyncio.run(scenario())


def test_calls_from_concurrent_tasks_all_land_and_sessions_of_one_ledger_do_not_wait_for_each_other(
    ledger: cl.Ledger,
) -> None:
    async def scenario() -> None:
        a, b = LedgerSession("a", ledger), LedgerSession("b", ledger)
        await a.add_items([user("a0")])
        lock = ledger.store.lock(a.conversation_id)
        lock.acquire()  # a's thread is held up...
        try:
            held = asyncio.ensure_future(a.add_items([user("a1")]))
            await _until_waiting(lock)
            await asyncio.gather(*(b.add_items([user(f"b{n}")]) for n in range(5)))  # ...b's is not
        finally:
            lock.release()
        await held
        assert contents(await a.get_items()) == ["a0", "a1"]
        assert sorted(contents(await b.get_items())) == [f"b{n}" for n in range(5)]

    asyncio.run(scenario())


def _counting_thread_reads(session: LedgerSession) -> list[int]:
    """Counts the reads ``get_items`` sends to the session's thread."""
    sent: list[int] = []
    on_thread = session._items

    def counted() -> list[dict[str, Any]]:
        sent.append(1)
        return on_thread()

    session._items = counted  # type: ignore[method-assign]
    return sent


def test_on_sqlite_a_read_runs_in_place_and_sees_another_processs_write_at_once(sqlite_url: str) -> None:
    async def scenario() -> None:
        with cl.Ledger.open(sqlite_url) as mine, cl.Ledger.open(sqlite_url) as theirs:
            session = LedgerSession("shared", mine)
            sent = _counting_thread_reads(session)
            await session.add_items([user("q1"), {"role": "assistant", "content": "a1"}])
            assert contents(await session.get_items()) == ["q1", "a1"]  # the first rendering: on the thread
            await session.add_items([user("q2")])
            assert contents(await session.get_items()) == ["q1", "a1", "q2"]
            assert len(sent) == 1  # the new entry rendered in place
            await LedgerSession("shared", theirs).add_items([{"role": "assistant", "content": "a2"}])
            assert contents(await session.get_items()) == ["q1", "a1", "q2", "a2"]  # at once
            theirs.clear(session.conversation_id)
            assert await session.get_items() == []  # rendered in full: on the thread
            assert len(sent) == 2

    asyncio.run(scenario())


def test_a_read_waits_for_the_sessions_call_in_flight_and_for_a_held_lock(sqlite_url: str) -> None:
    async def scenario() -> None:
        with cl.Ledger.open(sqlite_url) as ledger:
            session = LedgerSession("ordered", ledger)
            sent = _counting_thread_reads(session)
            await session.add_items([user("first")])
            assert contents(await session.get_items()) == ["first"]
            lock = ledger.store.lock(session.conversation_id)
            lock.acquire()  # another writer of this process holds the conversation
            try:
                adding = asyncio.ensure_future(session.add_items([user("second")]))
                await _until_waiting(lock)
                reading = asyncio.ensure_future(session.get_items())  # behind the add, on the thread
                await asyncio.sleep(0.05)
                assert not reading.done()
            finally:
                lock.release()
            await adding
            assert contents(await reading) == ["first", "second"]
            assert len(sent) == 2
            lock.acquire()
            try:  # nothing of the session in flight, but the lock is held: the thread waits for it
                reading = asyncio.ensure_future(session.get_items())
                await _until_waiting(lock)
            finally:
                lock.release()
            assert contents(await reading) == ["first", "second"]
            assert len(sent) == 3

    asyncio.run(scenario())


def test_on_postgresql_every_read_goes_to_the_sessions_thread(postgres_url: str) -> None:
    async def scenario() -> None:
        with cl.Ledger.open(postgres_url) as ledger:
            session = LedgerSession("remote", ledger)
            sent = _counting_thread_reads(session)
            for n in range(3):
                await session.add_items([user(f"q{n}")])
                assert contents(await session.get_items()) == [f"q{k}" for k in range(n + 1)]
            assert len(sent) == 3

    asyncio.run(scenario())
