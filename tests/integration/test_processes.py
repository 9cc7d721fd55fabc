"""Writers in separate processes: every append lands, positions stay gap-free,
and a new process reads back exactly what was written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from tests.support.processes import process_context, run_all

WRITERS = 4
PER_WRITER = 30


def _writer(url: str, cid: str, name: str, barrier: object) -> None:
    # Four processes appending to one conversation as fast as they can, on a shared
    # machine: this checks that every append lands, not how long one waits (the
    # default write_deadline of 5 s is for interactive callers; test_contention).
    settings = Settings(database_url=url, run_policy=False, write_deadline=120)
    with Ledger.open(settings=settings) as ledger:
        barrier.wait(60)  # type: ignore[attr-defined]
        for i in range(PER_WRITER):
            ledger.append(
                UUID(cid), {"role": "user", "content": f"{name}-{i}"}, client_message_id=f"{name}-{i}"
            )


def _run_writers(url: str) -> None:
    with Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=20, keep_messages=5))
    ctx = process_context()
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_writer, args=(url, str(cid), f"p{n}", barrier)) for n in range(WRITERS)]
    assert run_all(procs, 180) == [0] * WRITERS
    with Ledger.open(url, run_policy=False) as ledger:
        transcript = ledger.transcript(cid)
        assert [e.position for e in transcript] == list(range(WRITERS * PER_WRITER))
        assert sorted(e.message["content"] for e in transcript) == sorted(
            f"p{n}-{i}" for n in range(WRITERS) for i in range(PER_WRITER)
        )
        # The policy fired along the way, once, and the log verifies.
        assert [e.kind for e in ledger.replay(cid)].count("ThresholdReached") == 1
        assert ledger.verify(cid).ok


@pytest.mark.postgres
def test_concurrent_processes_on_postgres_all_land_gap_free(postgres_url: str) -> None:
    _run_writers(postgres_url)


def test_concurrent_processes_on_one_sqlite_file_all_land_gap_free(tmp_path: Path) -> None:
    _run_writers(f"sqlite:///{tmp_path / 'shared.db'}")


READ_BACK = """
import json, sys
from uuid import UUID
from contextledger.application import Ledger
with Ledger.open(sys.argv[1], run_policy=False) as ledger:
    cid = UUID(sys.argv[2])
    print(json.dumps({"transcript": [e.message for e in ledger.transcript(cid)],
                      "context": ledger.context(cid)}))
"""


def read_in_new_process(url: str, cid: UUID) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", READ_BACK, url, str(cid)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.postgres
def test_a_new_process_reads_back_what_postgres_holds(postgres_url: str) -> None:
    with Ledger.open(postgres_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        sent = [{"role": "user", "content": "ünïcode ✓"}, {"role": "assistant", "content": "ok"}]
        ledger.extend(cid, sent)
        context = ledger.context(cid)
    assert read_in_new_process(postgres_url, cid) == {"transcript": sent, "context": context}
