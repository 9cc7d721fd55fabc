"""The summarization policy in the background: appends never wait, failures are
retried with backoff, a slow conversation holds up no other, one call per crossing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import pytest

from contextledger.application import (
    Ledger,
    ReductionPolicy,
    Settings,
    SummaryRequest,
    SummaryResult,
)
from contextledger.application.following.notifications import read_notifications
from contextledger.domain import (
    SummarizerRateLimitedError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
)
from contextledger.testing import ScriptedSummarizer
from tests.support.invariants import check, check_log

POLICY = ReductionPolicy(
    trigger_messages=10, keep_messages=2, max_context_tokens=1500, max_summary_tokens=100
)


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def in_flight(summarizer: ScriptedSummarizer) -> int:
    """Its calls in flight, counted under its lock (its workers add to the counter)."""
    with summarizer.lock:
        return sum(summarizer.in_flight.values())


def settings(url: str, **overrides: Any) -> Settings:
    return Settings(
        database_url=url, retry_base_seconds=0.02, retry_max_seconds=0.2, poll_interval=0.02, **overrides
    )


def say(ledger: Ledger, cid: UUID, n: int, appended: list[dict[str, Any]]) -> None:
    for i in range(n):
        message = {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {len(appended)}"}
        ledger.append(cid, message)
        appended.append(message)


@contextmanager
def held_conversation(url: str) -> Iterator[tuple[Ledger, UUID, ScriptedSummarizer, threading.Event]]:
    """A ledger with its policy running and one conversation whose summarizer calls
    block until the event is set (set on the way out, so a failure does not hang)."""
    cid = uuid4()
    release = threading.Event()
    summarizer = ScriptedSummarizer(hold={cid: release})
    with Ledger.open(settings=settings(url), summarizer=summarizer) as ledger:
        ledger.start("sys", policy=POLICY, conversation_id=cid)
        try:
            yield ledger, cid, summarizer, release
        finally:
            release.set()


def test_summaries_happen_in_the_background_once_per_crossing(sqlite_url: str) -> None:
    summarizer = ScriptedSummarizer()
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        appended: list[dict[str, Any]] = []
        say(ledger, cid, 60, appended)
        assert ledger.wait_idle(20)
        crossings = [e for e in ledger.replay(cid) if e.kind == "ThresholdReached"]
        summaries = ledger.summaries(cid)
        assert len(summarizer.calls) == len(crossings) == len(summaries) >= 1
        assert check(ledger, cid, appended, system="sys") == []
        assert check_log(ledger, cid, appended) == []


def test_appends_never_wait_for_the_summarizer(sqlite_url: str) -> None:
    with held_conversation(sqlite_url) as (ledger, cid, summarizer, release):
        appended: list[dict[str, Any]] = []
        say(ledger, cid, 12, appended)
        assert wait_until(lambda: summarizer.in_flight[cid] == 1)
        say(ledger, cid, 40, appended)  # all while the summarizer call is blocked
        assert summarizer.in_flight[cid] == 1 and ledger.totals(cid).summaries == 0
        assert check(ledger, cid, appended, system="sys") == []
        release.set()
        assert ledger.wait_idle(20)
        assert ledger.totals(cid).summaries >= 1


@pytest.mark.parametrize(
    "failure",
    [
        SummarizerTimeoutError("timed out"),
        SummarizerRateLimitedError("429", retry_after=0.05),
        SummarizerUnavailableError("503"),
    ],
    ids=["timeout", "rate-limit", "unavailable"],
)
def test_failures_are_recorded_and_retried_and_nothing_is_lost(sqlite_url: str, failure: Exception) -> None:
    summarizer = ScriptedSummarizer(failures=[failure, failure])
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        appended: list[dict[str, Any]] = []
        say(ledger, cid, 30, appended)
        assert ledger.wait_idle(20)
        failed = [e for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert [e.data["attempt"] for e in failed] == [1, 2]
        assert failed[0].data["kind"] == type(failure).__name__
        assert ledger.totals(cid).summaries >= 1
        assert check_log(ledger, cid, appended) == []


def test_while_the_summarizer_is_down_the_cap_holds_and_nothing_is_lost(sqlite_url: str) -> None:
    down = [SummarizerUnavailableError("down")] * 1000
    summarizer = ScriptedSummarizer(failures=down)
    with Ledger.open(
        settings=settings(sqlite_url, fallback_after_attempts=None), summarizer=summarizer
    ) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        appended: list[dict[str, Any]] = []
        for _ in range(10):
            say(ledger, cid, 20, appended)
            assert check(ledger, cid, appended, system="sys") == []
            assert ledger.totals(cid).context_tokens <= 1500
        assert ledger.totals(cid).summaries == 0 and ledger.totals(cid).summarizer_failures >= 1
        summarizer.failures.clear()  # the provider is back
        assert ledger.wait_idle(20)
        assert ledger.totals(cid).summaries >= 1
        assert check(ledger, cid, appended, system="sys") == []
        assert check_log(ledger, cid, appended) == []


def test_a_slow_conversation_does_not_hold_up_the_others(sqlite_url: str) -> None:
    slow_cid, fast = uuid4(), [uuid4() for _ in range(3)]
    release = threading.Event()
    summarizer = ScriptedSummarizer(hold={slow_cid: release})
    with Ledger.open(
        settings=settings(sqlite_url, max_concurrent_summaries=4), summarizer=summarizer
    ) as ledger:
        for cid in [slow_cid, *fast]:
            ledger.start("sys", policy=POLICY, conversation_id=cid)
        appended: dict[UUID, list[dict[str, Any]]] = {c: [] for c in [slow_cid, *fast]}
        say(ledger, slow_cid, 12, appended[slow_cid])
        assert wait_until(lambda: summarizer.in_flight[slow_cid] == 1)
        for cid in fast:
            say(ledger, cid, 12, appended[cid])
        assert wait_until(lambda: all(ledger.totals(c).summaries == 1 for c in fast))
        assert ledger.totals(slow_cid).summaries == 0 and summarizer.in_flight[slow_cid] == 1
        release.set()
        assert ledger.wait_idle(20)
        assert ledger.totals(slow_cid).summaries == 1
        assert summarizer.max_in_flight_per_conversation == 1


def test_concurrency_is_bounded_and_one_call_per_conversation_at_a_time(sqlite_url: str) -> None:
    # The first calls are held until three are in flight at once: that the bound is
    # reached is then seen, not hoped for from how fast the appends outpace a delay
    # (on a loaded machine they did not). Later calls take 0.1 s, so the rounds after
    # overlap with calls in flight as before.
    ids = [uuid4() for _ in range(8)]
    release = threading.Event()
    summarizer = ScriptedSummarizer(delay=0.1, hold=dict.fromkeys(ids, release))
    with Ledger.open(
        settings=settings(sqlite_url, max_concurrent_summaries=3), summarizer=summarizer
    ) as ledger:
        try:
            for cid in ids:
                ledger.start("sys", policy=POLICY, conversation_id=cid)
            appended: dict[UUID, list[dict[str, Any]]] = {c: [] for c in ids}
            for cid in ids:
                say(ledger, cid, 12, appended[cid])
            assert wait_until(lambda: in_flight(summarizer) == 3)
        finally:
            release.set()
        for _ in range(2):
            for cid in ids:
                say(ledger, cid, 12, appended[cid])
        assert ledger.wait_idle(30)
        assert summarizer.max_in_flight <= 3
        assert summarizer.max_in_flight >= 2
        assert summarizer.max_in_flight_per_conversation == 1
        for cid in ids:
            assert check_log(ledger, cid, appended[cid]) == []
            ranges = [(f, t) for c, f, t in summarizer.calls if c == cid]
            assert len(ranges) == len(set(ranges)) == ledger.totals(cid).summaries


def test_a_restarted_policy_resumes_the_unfinished_work(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        say(ledger, cid, 15, [])
        assert ledger.pending_summary(cid) is not None
    summarizer = ScriptedSummarizer()
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as ledger:
        assert ledger.wait_idle(20)
        assert ledger.pending_summary(cid) is None and ledger.totals(cid).summaries == 1
        assert len(summarizer.calls) == 1


def test_after_repeated_failures_the_offline_summarizer_takes_over(sqlite_url: str) -> None:
    summarizer = ScriptedSummarizer(failures=[SummarizerUnavailableError("down")] * 1000)
    with Ledger.open(
        settings=settings(sqlite_url, fallback_after_attempts=3), summarizer=summarizer
    ) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        appended: list[dict[str, Any]] = []
        say(ledger, cid, 12, appended)
        assert ledger.wait_idle(20)
        [summary] = ledger.summaries(cid)
        assert summary.model == "offline-extractive"
        assert len(summarizer.calls) == 3
        assert [e.data["attempt"] for e in ledger.replay(cid) if e.kind == "SummarizationFailed"] == [1, 2, 3]
        assert check_log(ledger, cid, appended) == []


def test_a_summarizer_that_raises_anything_is_failing_and_the_fallback_takes_over(sqlite_url: str) -> None:
    # A bug in a custom summarizer (a KeyError in its parser, a TypeError) counts as a
    # failed attempt like a SummarizerError: recorded, retried, then the fallback.
    summarizer = ScriptedSummarizer(failures=[KeyError("choices"), TypeError("bad"), KeyError("x")] * 300)
    with Ledger.open(
        settings=settings(sqlite_url, fallback_after_attempts=3), summarizer=summarizer
    ) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        appended: list[dict[str, Any]] = []
        say(ledger, cid, 12, appended)
        assert ledger.wait_idle(20)
        [summary] = ledger.summaries(cid)
        assert summary.model == "offline-extractive"
        assert len(summarizer.calls) == 3
        failures = [e.data for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert [f["attempt"] for f in failures] == [1, 2, 3]
        assert [f["kind"] for f in failures] == ["KeyError", "TypeError", "KeyError"]
        assert all(f["retryable"] for f in failures) and "KeyError" in failures[0]["error"]
        assert ledger.totals(cid).summarizer_failures == 3
        assert check_log(ledger, cid, appended) == []


def test_without_a_fallback_a_crashing_summarizer_is_retried_until_it_answers(sqlite_url: str) -> None:
    summarizer = ScriptedSummarizer(failures=[ValueError("no JSON"), ValueError("no JSON")])
    with Ledger.open(
        settings=settings(sqlite_url, fallback_after_attempts=None), summarizer=summarizer
    ) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        say(ledger, cid, 12, [])
        assert ledger.wait_idle(20)
        [summary] = ledger.summaries(cid)
        assert summary.model == "scripted"
        kinds = [e.data["kind"] for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert kinds == ["ValueError", "ValueError"]


class Answers:
    """A custom summarizer with a bug: it answers what is not a SummaryResult, twice."""

    model = "buggy"

    def __init__(self) -> None:
        self.answers: list[Any] = [None, SummaryResult(text=42, model="buggy", prompt_version="b1")]  # type: ignore[arg-type]

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        if self.answers:
            return self.answers.pop(0)  # type: ignore[no-any-return]
        return SummaryResult(text="Points were made.", model=self.model, prompt_version="b1")


def test_an_answer_that_is_not_a_summary_result_is_a_failed_attempt(sqlite_url: str) -> None:
    with Ledger.open(
        settings=settings(sqlite_url, fallback_after_attempts=None), summarizer=Answers()
    ) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        say(ledger, cid, 12, [])
        assert ledger.wait_idle(20)
        [summary] = ledger.summaries(cid)
        assert summary.text == "Points were made."
        failures = [e.data for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert [f["kind"] for f in failures] == ["SummarizerOutputError"] * 2
        assert "NoneType instead of a SummaryResult" in failures[0]["error"]
        assert "text is int" in failures[1]["error"]


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_writer_processes_with_their_own_policy_call_the_summarizer_once_per_crossing(
    store: str, sqlite_url: str, request: pytest.FixtureRequest
) -> None:
    # Two ledgers on one store stand for two writer processes, each running its policy:
    # each sees the other's thresholds in the shared log.
    url = sqlite_url if store == "sqlite" else request.getfixturevalue("postgres_url")
    mine, theirs = ScriptedSummarizer(), ScriptedSummarizer()
    with (
        Ledger.open(settings=settings(url), summarizer=mine) as writer,
        Ledger.open(settings=settings(url), summarizer=theirs) as other,
    ):
        cid = writer.start("sys", policy=POLICY)
        other_cid = other.start("sys", policy=POLICY)
        appended: list[dict[str, Any]] = []
        other_appended: list[dict[str, Any]] = []
        for _ in range(4):
            say(writer, cid, 12, appended)
            say(other, other_cid, 12, other_appended)
        assert writer.wait_idle(20) and other.wait_idle(20)  # the other's thresholds too
        crossings = [e for e in writer.replay(cid) if e.kind == "ThresholdReached"]
        other_crossings = [e for e in other.replay(other_cid) if e.kind == "ThresholdReached"]
        assert len(crossings) >= 3 and len(other_crossings) >= 3
        # every crossing summarized once, by the process that saved it
        assert {c[0] for c in mine.calls} == {cid}
        assert {c[0] for c in theirs.calls} == {other_cid}
        assert len(mine.calls) == len(crossings) == len(writer.summaries(cid))
        assert len(theirs.calls) == len(other_crossings) == len(other.summaries(other_cid))
        assert check(writer, cid, appended, system="sys") == []
        assert check(other, other_cid, other_appended, system="sys") == []
        # each settled the other's thresholds from the summaries in the log, without
        # loading the other's conversation to find them done
        assert cid not in other.store._cache and other_cid not in writer.store._cache


def test_a_threshold_whose_writer_stopped_is_summarized_by_another_process(sqlite_url: str) -> None:
    summarizer = ScriptedSummarizer()
    with Ledger.open(settings=settings(sqlite_url, run_policy=False)) as writer:
        cid = writer.start("sys", policy=POLICY)
        say(writer, cid, 12, [])
    started = time.monotonic()
    with Ledger.open(settings=settings(sqlite_url), summarizer=summarizer) as survivor:
        assert survivor.wait_idle(20)
        assert len(survivor.summaries(cid)) == 1 and len(summarizer.calls) == 1
    assert time.monotonic() - started >= 2.0  # it waited for the writer's own policy first


def _reads_of_the_log(ledger: Ledger) -> list[float]:
    """Record when the ledger's log is read (the policy's reads go through it)."""
    seen: list[float] = []
    recorder: Any = ledger.recorder
    select = recorder.select_notifications

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append(time.monotonic())
        return select(*args, **kwargs)

    recorder.select_notifications = counted
    return seen


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_the_policy_takes_its_own_thresholds_from_its_saves_not_from_the_log(
    store: str, sqlite_url: str, request: pytest.FixtureRequest
) -> None:
    url = sqlite_url if store == "sqlite" else request.getfixturevalue("postgres_url")
    summarizer = ScriptedSummarizer()
    with Ledger.open(settings=settings(url), summarizer=summarizer) as ledger:
        cid = ledger.start("sys", policy=POLICY)
        assert ledger.wait_idle(20)
        reads = _reads_of_the_log(ledger)
        started = time.monotonic()
        appended: list[dict[str, Any]] = []
        for _ in range(5):  # five crossings, each summarized before the next
            say(ledger, cid, 12, appended)
            assert wait_until(
                lambda: (
                    ledger.totals(cid).summaries == len(summarizer.calls) >= 1
                    and ledger.pending_summary(cid) is None
                )
            )
        elapsed = time.monotonic() - started
        crossings = [e for e in ledger.replay(cid) if e.kind == "ThresholdReached"]
        assert len(crossings) == len(summarizer.calls) == ledger.totals(cid).summaries >= 5
        # The log is read on a clock (once a second), not once per threshold and per
        # finished job as when every step read it.
        assert len(reads) <= 1 + elapsed / 1.0 + 1 < 2 * len(crossings)
        assert check_log(ledger, cid, appended) == []


def test_the_progress_row_never_passes_a_threshold_whose_summary_is_in_flight(sqlite_url: str) -> None:
    with held_conversation(sqlite_url) as (ledger, cid, summarizer, release):
        say(ledger, cid, 5, [])
        assert ledger.wait_idle(20)  # the log is read this far
        say(ledger, cid, 7, [])
        assert wait_until(lambda: summarizer.in_flight[cid] == 1)
        say(ledger, cid, 3, [])  # more of the log after the threshold
        [threshold] = [
            n.id
            for page in read_notifications(ledger.notification_log)
            for n in page
            if n.topic.endswith("ThresholdReached")
        ]
        tracking = ledger.factory.tracking_recorder()
        # Waiting reads the log past the threshold (and writes the row: nothing else to do).
        assert not ledger.wait_idle(0.5)
        assert ledger.background.runner.log_position() > threshold
        assert 0 < (tracking.max_tracking_id("summarizer") or 0) < threshold
        release.set()
        assert ledger.wait_idle(20)
    # Stopping writes the row as far as the log was read.
    with Ledger.open(sqlite_url, run_policy=False) as reopened:
        last = max(n.id for page in read_notifications(reopened.notification_log) for n in page)
        assert reopened.factory.tracking_recorder().max_tracking_id("summarizer") == last


def test_a_ledger_left_open_at_exit_ends_its_policy_quietly_and_loses_nothing(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # At exit the interpreter shuts every thread pool down before it stops the policy's
    # (daemon) thread, which then found its executor refusing work: each step failed with
    # a traceback until the process ended. Here the executor is shut down the same way.
    summarizer = ScriptedSummarizer()
    ledger = Ledger.open(settings=settings(sqlite_url), summarizer=summarizer)
    try:
        runner = ledger.background.runner
        assert runner is not None and runner._executor is not None and runner.running
        cid = ledger.start("sys", policy=POLICY)
        runner._executor.shutdown(wait=True)
        with caplog.at_level("WARNING", logger="contextledger"):
            say(ledger, cid, 15, [])  # crosses the trigger: its threshold falls due
            assert wait_until(lambda: not runner.running, timeout=10)
        assert [r.getMessage() for r in caplog.records if r.name.startswith("contextledger")] == []
        assert summarizer.calls == [] and ledger.pending_summary(cid) is not None
    finally:
        ledger.close()
    # The threshold is in the log: the next run's policy makes its summary.
    again = ScriptedSummarizer()
    with Ledger.open(settings=settings(sqlite_url), summarizer=again) as ledger:
        assert ledger.wait_idle(20)
        assert ledger.pending_summary(cid) is None and ledger.totals(cid).summaries == 1
        assert len(again.calls) == 1
