"""Bounded waits: many writers of one conversation in one process all make progress
(a first-come queue, not a retry storm); a write that cannot get its turn within
``Settings.write_deadline`` is a ``ConcurrencyError`` with its attempts and seconds
and writes nothing; a statement stuck behind another session's lock ends in a
``StoreError`` naming the cause."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextledger.application import Ledger, Settings
from contextledger.domain import ConcurrencyError, StoreError

THREADS = 8
EACH = 12


def test_eight_writers_of_one_conversation_each_make_progress(store_url: str) -> None:
    settings = Settings(database_url=store_url, run_policy=False, write_deadline=60)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        errors: list[BaseException] = []
        start = threading.Barrier(THREADS)

        def write(t: int) -> None:
            start.wait()
            try:
                for i in range(EACH):
                    ledger.append(cid, {"role": "user", "content": f"writer {t} message {i}"})
            except BaseException as exc:  # recorded, asserted below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        rows = ledger.transcript(cid)
        assert [r.position for r in rows] == list(range(THREADS * EACH))
        for t in range(THREADS):
            mine = [r.message["content"] for r in rows if r.message["content"].startswith(f"writer {t} ")]
            assert mine == [f"writer {t} message {i}" for i in range(EACH)]


def test_a_write_past_its_deadline_is_a_concurrency_error_that_writes_nothing(sqlite_url: str) -> None:
    settings = Settings(database_url=sqlite_url, run_policy=False, write_deadline=0.2)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "first"})
        caught: list[BaseException] = []
        lock = ledger.store.lock(cid)
        with lock:  # another writer of this conversation holds its turn
            worker = threading.Thread(
                target=lambda: caught.append(_raises(ledger.append, cid, {"role": "user", "content": "late"})))
            worker.start()
            worker.join()
        [error] = caught
        assert isinstance(error, ConcurrencyError)
        assert error.conversation_id == cid and error.attempts == 0
        assert error.seconds is not None and error.seconds >= 0.2
        assert "write_deadline" in str(error)
        assert [r.message["content"] for r in ledger.transcript(cid)] == ["first"]


def _raises(call: Any, *args: Any) -> BaseException | None:
    try:
        call(*args)
    except BaseException as exc:
        return exc
    return None


def test_sqlite_busy_past_the_statement_timeout_is_a_store_error_naming_busy(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    settings = Settings(database_url=f"sqlite:///{path}", run_policy=False, statement_timeout=0.3)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            with pytest.raises(StoreError) as caught:
                ledger.append(cid, {"role": "user", "content": "blocked"})
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert caught.value.cause == "busy"
        assert ledger.transcript(cid) == []
        ledger.append(cid, {"role": "user", "content": "after"})
        assert len(ledger.transcript(cid)) == 1


def test_a_sqlite_write_waits_for_this_process_s_writer_as_long_as_the_statement_timeout(
    tmp_path: Path,
) -> None:
    """A write behind another thread's write in the same process waits as long as it
    would wait for another process's lock (``statement_timeout``), then fails typed,
    naming ``busy``; the store's pool used to give up after a fixed 5 s whatever the
    setting, with no cause."""
    url = f"sqlite:///{tmp_path / 'writer.db'}"
    with Ledger.open(settings=Settings(database_url=url, run_policy=False, statement_timeout=0.3)) as ledger:
        cid = ledger.start("s")
        pool = ledger.recorder.datastore.pool  # type: ignore[attr-defined]
        held = pool.get_connection(is_writer=True)  # another thread's write in flight,
        # over in 3 s: a write still waiting then (the pool's old fixed 5 s) would land
        given: list[bool] = []
        turn = threading.Lock()

        def give_back() -> None:
            with turn:
                if not given:
                    given.append(True)
                    pool.put_connection(held)

        release = threading.Timer(3, give_back)
        release.start()
        try:
            with pytest.raises(StoreError) as caught:
                ledger.append(cid, {"role": "user", "content": "blocked"})
        finally:
            release.cancel()
            give_back()
            release.join()
        assert caught.value.cause == "busy"
        assert ledger.transcript(cid) == []
    with Ledger.open(settings=Settings(database_url=url, run_policy=False, statement_timeout=30)) as ledger:
        pool = ledger.recorder.datastore.pool  # type: ignore[attr-defined]
        held = pool.get_connection(is_writer=True)
        release = threading.Timer(0.3, pool.put_connection, args=(held,))
        release.start()
        try:
            ledger.append(cid, {"role": "user", "content": "after the other write"})
        finally:
            release.join()
        assert [r.message["content"] for r in ledger.transcript(cid)] == ["after the other write"]


@pytest.mark.postgres
def test_postgres_statement_timeout_is_a_store_error_naming_it(postgres_url: str) -> None:
    settings = Settings(database_url=postgres_url, run_policy=False, statement_timeout=0.5)
    base, schema = postgres_url.split("?schema=")
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "first"})
        with psycopg.connect(base) as other:
            other.execute(f'LOCK TABLE "{schema}".contextledger_events IN ACCESS EXCLUSIVE MODE')
            with pytest.raises(StoreError) as caught:
                ledger.append(cid, {"role": "user", "content": "blocked"})
            other.rollback()
        assert caught.value.cause == "statement_timeout"
        assert [r.message["content"] for r in ledger.transcript(cid)] == ["first"]
