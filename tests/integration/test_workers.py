"""Several workers on one PostgreSQL store: one summary per range, whatever the race."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings, SummarizationRunner
from contextledger.testing import ScriptedSummarizer
from tests.support.invariants import check_log

POLICY = ReductionPolicy(trigger_messages=10, keep_messages=2)


def worker(url: str, summarizer: ScriptedSummarizer, shard: tuple[int, int] | None = None) -> tuple[Ledger, SummarizationRunner]:
    ledger = Ledger(Settings(database_url=url, run_policy=False, poll_interval=0.02,
                             retry_base_seconds=0.02, retry_max_seconds=0.2))
    runner = SummarizationRunner(ledger, summarizer, shard=shard)
    ledger.attach(runner)
    return ledger, runner


@pytest.mark.postgres
def test_two_workers_racing_for_one_range_record_one_summary(postgres_url: str) -> None:
    both_in_flight = threading.Barrier(2)  # neither answers before the other has asked
    first, second = ScriptedSummarizer(gate=both_in_flight), ScriptedSummarizer(gate=both_in_flight)
    app = Ledger.open(postgres_url, run_policy=False)
    workers = [worker(postgres_url, first), worker(postgres_url, second)]
    try:
        cid = app.start("s", policy=POLICY)
        appended: list[dict[str, Any]] = []
        for i in range(11):
            message = {"role": "user", "content": f"m{i}"}
            app.append(cid, message)
            appended.append(message)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (first.calls and second.calls):
            time.sleep(0.02)
        assert first.calls and second.calls, "both workers called the summarizer for the range"
        assert all(w[0].wait_idle(20) for w in workers)
        assert first.calls[0][1:] == second.calls[0][1:]
        assert len(app.summaries(cid)) == 1
        assert check_log(app, cid, appended) == []
    finally:
        for ledger, _ in workers:
            ledger.close()
        app.close()


@pytest.mark.postgres
def test_sharded_workers_split_the_conversations_and_each_keeps_its_own_progress(postgres_url: str) -> None:
    summarizers = [ScriptedSummarizer(), ScriptedSummarizer()]
    app = Ledger.open(postgres_url, run_policy=False)
    workers = [worker(postgres_url, s, shard=(i, 2)) for i, s in enumerate(summarizers)]
    try:
        # keys make the ids, and so the shards they fall in (id modulo 2), the same on every run
        ids = [app.start("s", policy=POLICY, key=f"split-{i}") for i in range(8)]
        for cid in ids:
            app.extend(cid, [{"role": "user", "content": f"m{i}"} for i in range(11)])
        assert all(w[0].wait_idle(20) for w in workers)
        handled = [{c for c, _, _ in s.calls} for s in summarizers]
        assert handled[0] and handled[1] and not handled[0] & handled[1]
        assert handled[0] | handled[1] == set(ids)
        assert {w[1].tracking_name for w in workers} == {"summarizer-0-of-2", "summarizer-1-of-2"}
        assert all(len(app.summaries(cid)) == 1 for cid in ids)
    finally:
        for ledger, _ in workers:
            ledger.close()
        app.close()
