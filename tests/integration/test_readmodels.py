"""The SQL read models against real SQLite files and a real PostgreSQL schema:
they match the ledger's own queries, apply each event exactly once, rebuild
correctly while writers append, and write a view change and its tracking row
atomically."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import anthropic
import pytest
from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, Table, func, select

from contextledger.application import Ledger, ReductionPolicy, SummaryRequest, SummaryResult
from contextledger.application.projections import TokenTotalsRecord, TranscriptProjection
from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.readmodels import (
    SQLReadModels,
    SQLTranscriptView,
    attach_read_models,
    views_path,
)
from contextledger.testing.fake_anthropic import Blocks, FakeAnthropicServer
from tests.support.readmodel_checks import assert_conversation_matches

POLICY = ReductionPolicy(trigger_messages=12, keep_messages=4, keep_tool_results=2)


class CountingSummarizer:
    """A deterministic summarizer that reports usage, so totals have something to add."""

    model = "counting"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult(
            text=f"Summary of messages {request.from_position}-{request.through_position}.",
            model=self.model,
            prompt_version="test-1",
            input_tokens=10 * len(request.messages),
            output_tokens=7,
            latency_ms=1.5,
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    with Ledger.open(url, summarizer=CountingSummarizer()) as opened:
        yield opened


def converse(ledger: Ledger, cid: UUID, turns: int, *, tag: str = "") -> None:
    """User, assistant tool call, two tool results, assistant answer; ``turns`` times."""
    for turn in range(turns):
        ledger.append(cid, {"role": "user", "content": f"{tag}question {turn}: where is order {turn}?"})
        calls = [
            {
                "id": f"c{turn}a",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": f'{{"id": {turn}}}'},
            },
            {
                "id": f"c{turn}b",
                "type": "function",
                "function": {"name": "track_parcel", "arguments": f'{{"order": {turn}}}'},
            },
        ]
        ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": calls})
        ledger.append(
            cid,
            {
                "role": "tool",
                "tool_call_id": f"c{turn}a",
                "content": f"order {turn}: shipped " + "x" * (turn * 7),
            },
        )
        ledger.append(cid, {"role": "tool", "tool_call_id": f"c{turn}b", "content": "in transit"})
        ledger.append(cid, {"role": "assistant", "content": f"Order {turn} is in transit."})


def assert_read_models_match(models: SQLReadModels, ledger: Ledger) -> None:
    ids = ledger.conversation_ids()
    assert [r.conversation_id for r in models.conversations.conversations()] == ids
    for cid in ids:
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
        assert models.summaries.summaries(cid) == ledger.summaries(cid)
        expected = ledger.totals(cid)
        found = models.token_totals.totals(cid)
        assert found is not None
        assert same_counters(found, expected)
    overall = ledger.totals()
    global_totals = models.token_totals.global_totals()
    assert global_totals.conversations == overall.conversations == len(ids)
    assert same_counters(global_totals, overall)


def same_counters(record: TokenTotalsRecord, totals: Any) -> bool:
    names = (
        "messages",
        "appended_tokens",
        "full_history_tokens",
        "summaries",
        "summarizer_calls",
        "summarizer_failures",
        "summarizer_input_tokens",
        "summarizer_output_tokens",
        "provider_prompt_tokens",
        "provider_completion_tokens",
        "estimated_prompt_tokens",
        "usage_records",
        "cache_read_tokens",
        "cache_creation_tokens",
        "uncached_prompt_tokens",
        "reduction_hits",
        "reduction_misses",
    )
    return {n: getattr(record, n) for n in names} == {n: getattr(totals, n) for n in names}


def rows(models: SQLReadModels, table: str) -> int:
    with models.read() as conn:
        return int(conn.execute(select(func.count()).select_from(models.tables[table])).scalar_one())


def test_read_models_match_what_the_ledger_answers(ledger: Ledger) -> None:
    models = attach_read_models(ledger)
    first = ledger.start("You track parcels.", policy=POLICY)
    second = ledger.start(None, model="gpt-4.1-mini", policy=POLICY)
    converse(ledger, first, 8)
    converse(ledger, second, 3, tag="b-")
    ledger.record_usage(first, prompt_tokens=321, completion_tokens=12)
    ledger.change_policy(second, ReductionPolicy(trigger_messages=30, keep_messages=5))
    assert ledger.wait_idle(30)

    assert ledger.totals(first).summaries >= 2  # the policy ran while the views followed
    assert_read_models_match(models, ledger)
    listed = {r.conversation_id: r for r in models.conversations.conversations()}
    assert listed[second].model == "gpt-4.1-mini"
    assert listed[second].policy_version == 2
    assert listed[first].messages == 40
    assert listed[first].last_version == ledger.conversation(first).version


def test_read_models_of_a_sqlite_store_live_in_a_file_next_to_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    assert views_path(url) == tmp_path / "app.views.db"
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        models = attach_read_models(ledger)
        cid = ledger.start("s", policy=POLICY)
        converse(ledger, cid, 1)
        assert ledger.wait_idle(10)
        assert len(models.transcript.transcript(cid)) == 5
    assert (tmp_path / "app.views.db").exists()


def test_a_memory_ledger_gets_in_memory_read_models() -> None:
    with Ledger.open("memory://", summarizer=CountingSummarizer()) as ledger:
        models = attach_read_models(ledger)
        cid = ledger.start("s", policy=POLICY)
        converse(ledger, cid, 4)
        assert ledger.wait_idle(10)
        assert_read_models_match(models, ledger)


def test_an_event_delivered_again_changes_nothing(ledger: Ledger) -> None:
    models = attach_read_models(ledger)
    cid = ledger.start("s", policy=POLICY)
    converse(ledger, cid, 5)
    assert ledger.wait_idle(30)
    before = (models.token_totals.totals(cid), rows(models, "transcript"), rows(models, "summaries"))

    # At-least-once delivery: every notification handed to every projection once more.
    notifications = ledger.recorder.select_notifications(1, 10_000)
    for projection in models.projections():
        for notification in notifications:
            if notification.topic in projection.topics:
                event = ledger.mapper.to_domain_event(notification)
                projection.process_event(event, Tracking(ledger.name, notification.id))

    after = (models.token_totals.totals(cid), rows(models, "transcript"), rows(models, "summaries"))
    assert after == before
    assert_read_models_match(models, ledger)


def test_two_runners_racing_over_the_same_log_count_each_event_once(url: str) -> None:
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        one = SQLReadModels.for_url(url)
        two = SQLReadModels.for_url(url)  # another process's connections to the same tables
        ledger.attach(one.runner(ledger, poll_interval=0.001))
        ledger.attach(two.runner(ledger, poll_interval=0.001))
        cids = [ledger.start("s", policy=POLICY) for _ in range(2)]
        for cid in cids:
            converse(ledger, cid, 6)
        assert ledger.wait_idle(30)
        assert_read_models_match(one, ledger)
        assert rows(two, "transcript") == 60


def test_a_restarted_runner_resumes_after_what_it_applied(url: str) -> None:
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        attach_read_models(ledger)
        cid = ledger.start("s", policy=POLICY)
        converse(ledger, cid, 3)
        assert ledger.wait_idle(30)
        applied_through = ledger.recorder.max_notification_id()
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        models = SQLReadModels.for_url(url)
        runner = models.runner(ledger)
        resumed_at = runner.position("transcript")
        assert resumed_at == models.transcript.max_tracking_id(ledger.name)
        assert 0 < resumed_at <= (applied_through or 0)
        converse(ledger, cid, 2, tag="later-")
        assert runner.catch_up() > 0
        ledger.attach(runner)
        assert ledger.wait_idle(30)
        assert_read_models_match(models, ledger)


def test_a_rebuild_while_writers_keep_appending_ends_correct(ledger: Ledger, url: str) -> None:
    models = SQLReadModels.for_ledger(ledger)
    runner = models.runner(ledger)
    ledger.attach(runner)
    cid = ledger.start("s", policy=POLICY)
    converse(ledger, cid, 10)
    assert ledger.wait_idle(30)

    started = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for n in range(15):
                converse(ledger, cid, 1, tag=f"during-{n}-")
                started.set()
        except BaseException as exc:  # surfaced below
            failures.append(exc)
            started.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert started.wait(10)
    progress: list[tuple[int, int]] = []
    # This process's runner rebuilds one model; "another process" rebuilds another while
    # the attached runner keeps applying new events to it.
    applied = runner.rebuild("transcript", progress=lambda done, total: progress.append((done, total)))
    elsewhere = SQLReadModels.for_url(url)
    try:
        elsewhere.runner(ledger, close_with_runner=False).rebuild("token_totals")
    finally:
        elsewhere.close()
    thread.join(60)
    assert not failures
    assert ledger.wait_idle(30)

    assert applied >= 50
    assert progress[0][0] == 0 and progress[-1][0] >= progress[-1][1] > 0
    assert len(ledger.transcript(cid)) == 125
    assert_read_models_match(models, ledger)


def test_rebuilding_an_unknown_read_model_is_a_usage_error(ledger: Ledger) -> None:
    models = SQLReadModels.for_ledger(ledger)
    runner = models.runner(ledger)
    try:
        with pytest.raises(Exception, match="no read model named 'nope'"):
            runner.rebuild("nope")
    finally:
        runner.stop()


class ExplodingTranscriptView(SQLTranscriptView):
    """Inserts the row, then fails before the transaction can commit."""

    def _insert_message(self, conn: Connection, table: Table, entry: Any, conversation_id: UUID) -> None:
        super()._insert_message(conn, table, entry, conversation_id)
        raise RuntimeError("the process died here")


def test_a_failure_after_the_view_change_leaves_neither_the_row_nor_the_tracking(
    ledger: Ledger, url: str
) -> None:
    cid = ledger.start("s", policy=POLICY)
    ledger.append(cid, {"role": "user", "content": "hello"})
    notification = ledger.recorder.select_notifications(1, 10, topics=TranscriptProjection.topics)[0]
    event = ledger.mapper.to_domain_event(notification)
    tracking = Tracking(ledger.name, notification.id)
    models = SQLReadModels.for_url(url)
    try:
        exploding = TranscriptProjection(ExplodingTranscriptView(models))
        with pytest.raises(RuntimeError, match="died"):
            exploding.process_event(event, tracking)
        assert rows(models, "transcript") == 0
        assert models.transcript.max_tracking_id(ledger.name) is None

        # The same event again, on a healthy view: applied once, tracking moved with it.
        TranscriptProjection(models.transcript).process_event(event, tracking)
        assert rows(models, "transcript") == 1
        assert models.transcript.max_tracking_id(ledger.name) == notification.id
    finally:
        models.close()


def test_a_database_error_in_a_view_change_rolls_back_and_becomes_a_store_error(
    ledger: Ledger, url: str
) -> None:
    cid = ledger.start("s", policy=POLICY)
    ledger.append(cid, {"role": "user", "content": "hello"})
    models = SQLReadModels.for_url(url)
    try:
        entry = ledger.transcript(cid)[0]
        view = models.transcript
        view.add_message(entry, conversation_id=cid, tracking=Tracking(ledger.name, 1))
        # The same row under a later position in the log: the primary key refuses it.
        with pytest.raises(StoreError, match="read model transcript"):
            view.add_message(entry, conversation_id=cid, tracking=Tracking(ledger.name, 2))
        assert view.max_tracking_id(ledger.name) == 1
        assert rows(models, "transcript") == 1
    finally:
        models.close()


def test_wait_idle_without_a_thread_catches_up_in_the_callers_thread(ledger: Ledger) -> None:
    models = SQLReadModels.for_ledger(ledger)
    runner = models.runner(ledger)
    try:
        cid = ledger.start("s", policy=POLICY)
        converse(ledger, cid, 2)
        began = time.monotonic()
        assert runner.wait_idle(10)
        assert time.monotonic() - began < 10
        assert len(models.transcript.transcript(cid)) == 10
    finally:
        runner.stop()


def test_counters_for_a_conversation_the_log_never_started_get_a_row_of_their_own(url: str) -> None:
    models = SQLReadModels.for_url(url)
    try:
        cid = UUID(int=42)
        models.token_totals.add_to_totals(
            cid, tracking=Tracking("elsewhere", 1), messages=2, appended_tokens=9
        )
        found = models.token_totals.totals(cid)
        assert found is not None
        assert (found.messages, found.appended_tokens, found.summaries, found.full_history_tokens) == (
            2,
            9,
            0,
            9,
        )
        models.token_totals.add_to_totals(cid, tracking=Tracking("elsewhere", 2), messages=1)
        assert models.token_totals.global_totals().messages == 3
    finally:
        models.close()


@pytest.mark.postgres
def test_wait_idle_returns_once_what_was_written_before_it_is_read_even_behind_an_open_insert(
    postgres_url: str,
) -> None:
    import psycopg

    from contextledger.infrastructure.persistence.recorders import PostgresConversationRecorder
    from tests.conftest import POSTGRES_URL

    with Ledger.open(postgres_url, run_policy=False) as ledger:
        models = attach_read_models(ledger)
        cid = ledger.start("s")
        assert ledger.wait_idle(20)
        recorder = ledger.recorder
        assert isinstance(recorder, PostgresConversationRecorder)
        # Another session draws the next id and keeps its transaction open.
        open_insert: Any = psycopg.connect(POSTGRES_URL.split("?")[0])
        try:
            open_insert.execute(recorder.append_statement, ([uuid4()], [1], ["t"], [b"{}"]))
            ledger.append(cid, {"role": "user", "content": "written after the open insert's id"})
            assert (recorder.max_committed_notification_id() or 0) > (recorder.max_notification_id() or 0)
            # An audit's listing reads what is committed; it does not wait for the mark.
            later = ledger.start("started behind the open insert")
            assert ledger.conversation_ids() == [cid, later]
            # The append cannot be read while the lower id may still commit.
            assert not ledger.wait_idle(0.5)
            assert models.transcript.transcript(cid) == []
            open_insert.rollback()
        finally:
            open_insert.close()
        assert ledger.wait_idle(20)
        assert [e.message["content"] for e in models.transcript.transcript(cid)] == [
            "written after the open insert's id"
        ]
        assert_read_models_match(models, ledger)


def test_cache_figures_of_appended_replies_match_after_a_rebuild(ledger: Ledger, url: str) -> None:
    """Claude replies from the real SDK, appended with their usage (prompt-cache reads
    and writes), and a usage recorded by hand: the token_totals rows equal the live
    totals as the runner follows, and again after a rebuild from the log."""
    models = SQLReadModels.for_ledger(ledger)
    runner = models.runner(ledger)
    ledger.attach(runner)
    model = "claude-haiku-4-5"
    with FakeAnthropicServer() as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        server.script(
            Blocks([{"type": "text", "text": "One."}], input_tokens=50, cache_creation_input_tokens=700),
            Blocks([{"type": "text", "text": "Two."}], input_tokens=20, cache_read_input_tokens=700),
        )
        cid = ledger.start("You track parcels. " * 40, model=model, policy=POLICY)
        other = ledger.start("B", model="gemini-2.5-flash")
        for text in ("Where is order 1?", "And order 2?"):
            ledger.append(cid, {"role": "user", "content": text})
            body = ledger.context(cid, format="anthropic", cache=True)
            ledger.append(cid, client.messages.create(model=model, max_tokens=50, **body))
    ledger.record_usage(other, prompt_tokens=400, completion_tokens=3, cache_read_tokens=256)
    assert ledger.wait_idle(30)
    assert (ledger.totals(cid).cache_read_tokens, ledger.totals(cid).cache_creation_tokens) == (700, 700)
    assert_conversation_matches(models, ledger, cid)
    assert_conversation_matches(models, ledger, other)
    assert_read_models_match(models, ledger)
    assert runner.rebuild("token_totals") > 0
    assert_conversation_matches(models, ledger, cid)
    assert_read_models_match(models, ledger)
    summed = models.token_totals.global_totals()
    assert (summed.cache_read_tokens, summed.cache_creation_tokens) == (956, 700)
    assert summed.uncached_prompt_tokens == ledger.totals().uncached_prompt_tokens
