"""``get_or_start`` under concurrent callers: threads of one process and two processes,
on SQLite and PostgreSQL. Exactly one conversation results, and every caller gets its id."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from contextledger.application import Ledger
from contextledger.application.shared.addressing import id_for_key
from tests.support.processes import process_context

THREADS = 8


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("postgres_url"))


def _starts(ledger: Ledger) -> int:
    return sum(1 for e in ledger.replay("race-key") if e.kind == "Started")


def test_threads_racing_on_one_key_start_exactly_one_conversation(shared_url: str) -> None:
    results: list[Any] = []
    barrier = threading.Barrier(THREADS)
    with Ledger.open(shared_url, run_policy=False) as ledger:

        def call() -> None:
            barrier.wait(30)
            results.append(ledger.get_or_start("race-key", system_prompt="s"))

        threads = [threading.Thread(target=call) for _ in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [id_for_key("race-key")] * THREADS
        assert ledger.conversation_ids() == [id_for_key("race-key")]
        assert _starts(ledger) == 1


def _process(url: str, barrier: Any, out: Any) -> None:
    with Ledger.open(url, run_policy=False) as ledger:
        barrier.wait(60)
        out.put(str(ledger.get_or_start("race-key", system_prompt="s")))


def test_two_processes_racing_on_one_key_start_exactly_one_conversation(shared_url: str) -> None:
    ctx = process_context()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_process, args=(shared_url, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    answers = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert answers == [str(id_for_key("race-key"))] * 2
    with Ledger.open(shared_url, run_policy=False) as ledger:
        assert ledger.conversation_ids() == [id_for_key("race-key")]
        assert _starts(ledger) == 1
