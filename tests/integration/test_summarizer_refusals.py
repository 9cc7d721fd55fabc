"""Summarizer errors classified by the policy, through the real openai client against a
local server: a refused key, a refused permission or an invalid request is recorded as
not retryable and hands the range to the offline fallback at once; a huge
``Retry-After`` is capped; transient retries end after ``retry_total_seconds``."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import FakeOpenAIServer, Reply, Status

KEY = "sk-test-refused-0123456789"
POLICY = ReductionPolicy(trigger_messages=10, keep_messages=2, max_context_tokens=2000, max_summary_tokens=200)


def fill(ledger: Ledger, n: int = 11) -> Any:
    cid = ledger.start("You are a booking assistant.", policy=POLICY)
    for i in range(n):
        ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about seat 12A"})
    return cid


def settings(url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": url, "poll_interval": 0.02, "retry_base_seconds": 0.02,
                              "retry_max_seconds": 0.3, "fallback_after_attempts": 5, **overrides}
    return Settings(**values)


def failures(ledger: Ledger, cid: Any) -> list[dict[str, Any]]:
    return [e.data for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]


@pytest.mark.parametrize(("status", "kind"), [(401, "SummarizerAuthenticationError"),
                                              (403, "SummarizerAuthenticationError"),
                                              (400, "SummarizerRequestError")])
def test_a_refusal_is_recorded_once_and_the_fallback_takes_over_at_once(
    fake_openai: FakeOpenAIServer, sqlite_url: str, caplog: pytest.LogCaptureFixture, status: int, kind: str
) -> None:
    caplog.set_level(logging.WARNING, logger="contextledger.summarization")
    fake_openai.script(Status(status, body={"error": {"message": f"refused: {KEY}"}}), Reply("never asked for"))
    summarizer = OpenAISummarizer(api_key=KEY, base_url=fake_openai.base_url, timeout=5)
    # retry_max_seconds would hold a non-retryable range for an hour without the fallback.
    with Ledger.open(settings=settings(sqlite_url, retry_max_seconds=3600), summarizer=summarizer) as ledger:
        cid = fill(ledger)
        assert ledger.wait_idle(30)
        [failure] = failures(ledger, cid)
        assert failure["kind"] == kind and failure["retryable"] is False and str(status) in failure["error"]
        [summary] = ledger.summaries(cid)
        assert summary.model == "offline-extractive"
    assert fake_openai.request_count == 1  # asked once, never retried
    assert "not retryable" in caplog.text and "offline summarizer takes over" in caplog.text
    assert KEY not in caplog.text


def test_without_a_fallback_a_refusal_waits_the_longest_backoff(fake_openai: FakeOpenAIServer, sqlite_url: str) -> None:
    fake_openai.script(Status(401), Reply("Seat 12A."))
    summarizer = OpenAISummarizer(api_key=KEY, base_url=fake_openai.base_url, timeout=5)
    with Ledger.open(settings=settings(sqlite_url, fallback_after_attempts=None, retry_max_seconds=0.5),
                     summarizer=summarizer) as ledger:
        cid = fill(ledger)
        assert ledger.wait_idle(30)
        [failure] = failures(ledger, cid)
        assert failure["retryable"] is False
        [summary] = ledger.summaries(cid)
        assert summary.text == "Seat 12A."
    first, second = fake_openai.requests
    assert second.at - first.at >= 0.5


def test_a_huge_retry_after_is_capped_at_retry_max_seconds(fake_openai: FakeOpenAIServer, sqlite_url: str) -> None:
    fake_openai.script(Status(429, headers={"Retry-After": "86400"}), Reply("Seat 12A discussed."))
    summarizer = OpenAISummarizer(api_key=KEY, base_url=fake_openai.base_url, timeout=5)
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as ledger:
        cid = fill(ledger)
        # Uncapped, the second request would come a day later and this wait would fail.
        assert ledger.wait_idle(60)
        [failure] = failures(ledger, cid)
        assert failure["kind"] == "SummarizerRateLimitedError" and failure["retryable"] is True
        [summary] = ledger.summaries(cid)
        assert summary.text == "Seat 12A discussed."
    assert fake_openai.request_count == 2


def test_transient_failures_end_in_the_fallback_after_retry_total_seconds(sqlite_url: str) -> None:
    with FakeOpenAIServer(default=Status(503)) as server:
        summarizer = OpenAISummarizer(api_key=KEY, base_url=server.base_url, timeout=5)
        s = settings(sqlite_url, fallback_after_attempts=1000, retry_total_seconds=0.3, retry_max_seconds=0.05)
        with Ledger.open(settings=s, summarizer=summarizer) as ledger:
            cid = fill(ledger)
            assert ledger.wait_idle(60)
            [summary] = ledger.summaries(cid)
            assert summary.model == "offline-extractive"
            found = failures(ledger, cid)
            assert found and all(f["retryable"] for f in found) and len(found) < 1000


def test_the_demo_with_a_refused_key_finishes_with_offline_summaries(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from contextledger.infrastructure.cli import main

    with FakeOpenAIServer(default=Status(401)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("CONTEXTLEDGER_FALLBACK_AFTER_ATTEMPTS", raising=False)
        url = f"sqlite:///{tmp_path / 'refused-demo.db'}"
        assert main(["demo", "--database", url, "--messages", "220", "--summarizer", "openai",
                     "--json", "--chart", "-"]) == 0
        report = json.loads(capsys.readouterr().out)
        # Each range asked the provider once, was refused, and was summarized offline.
        assert report["summaries"] >= 2 and report["verify"] == "OK"
        assert server.request_count == report["summaries"]
