"""Summarization through the real openai client against a local server, with faults:
rate limits, server errors, dropped connections, bad output, and a worker process
killed after the model answered but before the summary was recorded."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import Delay, Drop, FakeOpenAIServer, Malformed, Reply, Status
from tests.support.invariants import check, check_log

KEY = "sk-live-0123456789-do-not-leak"
POLICY = ReductionPolicy(trigger_messages=10, keep_messages=2, max_context_tokens=2000, max_summary_tokens=200)
REPO = Path(__file__).resolve().parents[2]


def settings(url: str) -> Settings:
    return Settings(database_url=url, poll_interval=0.02, retry_base_seconds=0.02, retry_max_seconds=0.3,
                    fallback_after_attempts=None)


def fill(ledger: Ledger, n: int = 11) -> tuple[Any, list[dict[str, Any]]]:
    cid = ledger.start("You are a booking assistant.", policy=POLICY)
    appended = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about seat 12A"}
                for i in range(n)]
    for message in appended:
        ledger.append(cid, message)
    return cid, appended


def test_faults_are_recorded_retried_and_end_in_one_summary(fake_openai: FakeOpenAIServer, sqlite_url: str) -> None:
    fake_openai.script(Status(429, headers={"Retry-After": "0.05"}), Status(500), Drop(), Malformed(),
                       Reply(""), Reply("Error: upstream model failed"), Reply("Seat 12A discussed."))
    summarizer = OpenAISummarizer(api_key=KEY, base_url=fake_openai.base_url, timeout=2)
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as ledger:
        cid, appended = fill(ledger)
        assert ledger.wait_idle(30)
        kinds = [e.data["kind"] for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert kinds == ["SummarizerRateLimitedError", "SummarizerUnavailableError", "SummarizerUnavailableError",
                         "SummarizerOutputError", "SummarizerOutputError", "quality"]
        [summary] = ledger.summaries(cid)
        assert summary.text == "Seat 12A discussed." and summary.input_tokens is not None
        totals = ledger.totals(cid)
        assert totals.summarizer_calls == 7 and totals.summarizer_failures == 6
        assert check(ledger, cid, appended, system="You are a booking assistant.") == []
        assert check_log(ledger, cid, appended) == []


def test_the_rate_limit_hint_is_honoured(fake_openai: FakeOpenAIServer, sqlite_url: str) -> None:
    fake_openai.script(Status(429, headers={"Retry-After": "0.6"}), Reply("Summary."))
    summarizer = OpenAISummarizer(api_key=KEY, base_url=fake_openai.base_url, timeout=2)
    # Retry-After is honoured up to retry_max_seconds (test_summarizer_refusals: the cap).
    hinted = settings(sqlite_url).model_copy(update={"retry_max_seconds": 2.0})
    with Ledger.open(settings=hinted, summarizer=summarizer) as ledger:
        fill(ledger)
        assert ledger.wait_idle(30)
    first, second = fake_openai.requests
    assert second.at - first.at >= 0.55


def test_no_api_key_ever_reaches_the_store_or_the_logs(
    fake_openai: FakeOpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_openai.script(Status(401, body={"error": {"message": f"Incorrect API key provided: {KEY}"}}),
                       Status(500), Reply("ok summary"))
    path = tmp_path / "secrets.db"
    env_settings = Settings.from_env({"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": fake_openai.base_url,
                                      "CONTEXTLEDGER_DATABASE_URL": f"sqlite:///{path}"})
    assert KEY not in repr(env_settings) and KEY not in str(env_settings.model_dump())
    s = env_settings.model_copy(update={"retry_base_seconds": 0.02, "retry_max_seconds": 0.2,
                                        "poll_interval": 0.02})
    with Ledger.open(settings=s) as ledger:
        assert isinstance(ledger.summarizer, OpenAISummarizer)
        cid, _ = fill(ledger)
        assert ledger.wait_idle(30)
        assert ledger.totals(cid).summaries == 1
        exported = repr(list(ledger.replay(cid)))
    with sqlite3.connect(path) as conn:
        stored = b"".join(bytes(r[0]) for r in conn.execute("SELECT state FROM stored_events"))
    assert stored and KEY.encode() not in stored
    assert KEY not in exported
    assert KEY not in caplog.text
    assert "rate" in caplog.text or "failed" in caplog.text  # the failures were logged


WORKER = [sys.executable, "-m", "tests.support.worker_main"]


def spawn_worker(url: str, base_url: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([*WORKER, url, base_url, *extra], cwd=REPO, env=env)


@pytest.mark.postgres
def test_a_worker_killed_after_the_answer_leads_to_a_retry_and_one_summary(
    postgres_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "answered"
    with FakeOpenAIServer(default=Reply("Seat 12A was discussed at length.")) as server:
        with Ledger.open(postgres_url, run_policy=False) as app:
            cid, appended = fill(app)
        first = spawn_worker(postgres_url, server.base_url, "--pause-after-answer", str(marker))
        try:
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert marker.exists(), "the model answered the first worker"
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            first.kill()
        with Ledger.open(postgres_url, run_policy=False) as app:
            assert app.totals(cid).summaries == 0  # killed before recording
        second = spawn_worker(postgres_url, server.base_url)
        try:
            with Ledger.open(postgres_url, run_policy=False) as app:
                deadline = time.monotonic() + 60
                while app.totals(cid).summaries == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.5)  # room for a duplicate, if there were one
                summaries = app.summaries(cid)
                assert len(summaries) == 1
                assert check_log(app, cid, appended) == []
        finally:
            second.send_signal(signal.SIGTERM)
            second.kill()
            second.wait(10)
        assert server.request_count == 2  # the answer was lost with the first worker, asked again
        base, schema = postgres_url.split("?schema=")
        with psycopg.connect(base) as conn:
            created = conn.execute(
                f'SELECT count(*) FROM "{schema}".contextledger_events WHERE topic = %s',
                ("contextledger.conversation.SummaryCreated",)).fetchone()
        assert created == (1,)


def test_a_summarizer_slower_than_its_timeout_keeps_the_conversation_working(
    fake_openai: FakeOpenAIServer, sqlite_url: str
) -> None:
    fake_openai.script(*[Delay(1.0)] * 3, Reply("Finally a summary."))
    summarizer = OpenAISummarizer(api_key=KEY, base_url=fake_openai.base_url, timeout=0.2)
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as ledger:
        cid, appended = fill(ledger, n=11)
        for i in range(40):
            message = {"role": "user", "content": f"more {i}"}
            ledger.append(cid, message)
            appended.append(message)
            assert ledger.totals(cid).context_tokens <= 2000
        assert ledger.wait_idle(30)
        kinds = [e.data["kind"] for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert kinds[:3] == ["SummarizerTimeoutError"] * 3
        assert check_log(ledger, cid, appended) == []


def test_a_summary_whose_save_meets_a_busy_store_is_saved_without_asking_the_provider_again(
    sqlite_url: str,
) -> None:
    """The answer is in hand when its save finds the store busy past
    ``statement_timeout`` (another write of this process holds it for a second): the
    save is tried again, and the summarizer, which is paid per call, is asked once.
    The job used to fail and be retried from the start, calling it a second time."""
    from contextledger.testing import ScriptedSummarizer

    class HoldsTheStoreAfterAnswering(ScriptedSummarizer):
        pool: Any = None

        def summarize(self, request: Any) -> Any:
            result = super().summarize(request)
            if len(self.calls) == 1:  # another write of this process, for a second
                held = self.pool.get_connection(is_writer=True)
                threading.Timer(1.0, self.pool.put_connection, args=(held,)).start()
            return result

    summarizer = HoldsTheStoreAfterAnswering()
    busy = Settings(database_url=sqlite_url, poll_interval=0.02, retry_base_seconds=0.02,
                    retry_max_seconds=0.3, fallback_after_attempts=None, statement_timeout=0.3)
    with Ledger.open(settings=busy, summarizer=summarizer) as ledger:
        summarizer.pool = ledger.recorder.datastore.pool  # type: ignore[attr-defined]
        cid, appended = fill(ledger)
        assert ledger.wait_idle(30)
        assert len(summarizer.calls) == 1
        assert len(ledger.summaries(cid)) == 1
        assert [e for e in ledger.replay(cid) if e.kind == "SummarizationFailed"] == []
        assert check_log(ledger, cid, appended) == []
