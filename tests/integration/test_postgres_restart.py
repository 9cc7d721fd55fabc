"""A PostgreSQL restart under load: writers (retrying with client message ids), the
summarization policy and the read models all recover, nothing is lost or doubled, and
``worker --once`` started right after another restart reaches idle. The server is the
test's own (tests/support/own_postgres.py), never the shared one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.domain import ConcurrencyError, StoreError
from contextledger.infrastructure.readmodels import SQLReadModels
from tests.support.own_postgres import OwnPostgres, postgres_binaries

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(postgres_binaries() is None, reason="no PostgreSQL binaries")]

REPO = Path(__file__).resolve().parents[2]
POLICY = ReductionPolicy(trigger_messages=8, keep_messages=2, max_summary_tokens=200)
WRITERS = 3
EACH = 40


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    server = OwnPostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


def settings(url: str) -> Settings:
    return Settings(database_url=url, poll_interval=0.05, retry_base_seconds=0.05, retry_max_seconds=1,
                    write_deadline=10, connect_timeout=2, statement_timeout=10)


def worker_once(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONTEXTLEDGER_DATABASE_URL": url}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "contextledger", "worker", "--once", "--timeout", "120"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_writers_policy_and_read_models_recover_from_a_restart(own_postgres: OwnPostgres) -> None:
    url = own_postgres.url
    with Ledger.open(settings=settings(url)) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        cids = [ledger.start("You are a booking assistant.", policy=POLICY) for _ in range(WRITERS)]
        written = [0] * WRITERS
        retries = [0] * WRITERS
        errors: list[BaseException] = []

        def write(k: int) -> None:
            try:
                for i in range(EACH):
                    message = {"role": "user" if i % 2 == 0 else "assistant", "content": f"writer {k} message {i}"}
                    while True:
                        try:
                            ledger.append(cids[k], message, client_message_id=f"w{k}-{i}")
                            break
                        except (StoreError, ConcurrencyError):
                            retries[k] += 1
                            if retries[k] > 2000:
                                raise
                            time.sleep(0.05)
                    written[k] += 1
            except BaseException as exc:  # recorded, asserted below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(WRITERS)]
        for thread in threads:
            thread.start()
        while min(written) < 10 and not errors:
            time.sleep(0.02)
        own_postgres.restart()
        for thread in threads:
            thread.join(timeout=300)
        assert errors == [] and written == [EACH] * WRITERS
        assert ledger.wait_idle(120)
        for k, cid in enumerate(cids):
            expected = [f"writer {k} message {i}" for i in range(EACH)]
            assert [r.message["content"] for r in ledger.transcript(cid)] == expected
            assert [r.message["content"] for r in models.transcript.transcript(cid)] == expected
            assert ledger.summaries(cid) and ledger.pending_summary(cid) is None
        assert ledger.verify().ok

    # More messages, no worker running; the server restarts; a worker started right
    # after it still reaches idle and summarizes what waited.
    with Ledger.open(settings=settings(url).model_copy(update={"run_policy": False})) as ledger:
        for i in range(EACH, EACH + 12):
            ledger.append(cids[0], {"role": "user", "content": f"writer 0 message {i}"})
        assert ledger.pending_summary(cids[0]) is not None
    own_postgres.restart()
    done = worker_once(url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "idle at notification" in done.stdout
    with Ledger.open(settings=settings(url).model_copy(update={"run_policy": False})) as ledger:
        assert ledger.pending_summary(cids[0]) is None
        models = SQLReadModels.for_ledger(ledger)
        assert len(models.transcript.transcript(cids[0])) == EACH + 12
        models.close()
