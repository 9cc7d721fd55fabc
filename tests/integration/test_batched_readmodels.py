"""Read models apply the log in batches (one transaction and one tracking update per
batch) on SQLite and PostgreSQL: a rebuild of every read model in one pass equals the
live read models; an interrupted rebuild resumes from its last committed batch; a
batch that fails leaves neither its rows nor its tracking; a far-behind follower
catches up in a few batches and a live one still applies a single new event at once."""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, Table, func, select

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.application.projections import ReadModelProjection, ReadModelRunner, TranscriptProjection
from contextledger.application.storage.sharding import home_store
from contextledger.domain import events
from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.readmodel_names import READ_MODEL_NAMES
from contextledger.infrastructure.readmodels import SQLReadModels, SQLTranscriptView, attach_read_models
from contextledger.infrastructure.readmodels.sealing import SUBJECT_SEALED_PREFIX
from tests.conftest import _postgres_admin
from tests.integration.test_readmodels import CountingSummarizer, converse
from tests.integration.test_shards import id_homed
from tests.support.readmodel_checks import assert_conversation_matches, assert_read_models_equal_ledger

POLICY = ReductionPolicy(trigger_messages=12, keep_messages=4, keep_tool_results=2)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    with Ledger.open(url, summarizer=CountingSummarizer()) as opened:
        yield opened


def write_history(ledger: Ledger) -> list[UUID]:
    """Conversations with summaries, an edit, a retraction, a fork and usage."""
    first = ledger.start("You track parcels.", policy=POLICY)
    second = ledger.start(None, model="gpt-4.1-mini", policy=POLICY)
    converse(ledger, first, 6)
    converse(ledger, second, 3, tag="b-")
    ledger.edit(first, 25, {"role": "user", "content": "edited question"})
    ledger.retract(second, 5, reason="wrong")
    fork = ledger.fork(first)
    converse(ledger, fork, 2, tag="f-")
    ledger.record_usage(first, prompt_tokens=321, completion_tokens=12)
    ledger.wait_idle(30)
    return [first, second, fork]


def transcript_rows(models: SQLReadModels) -> int:
    with models.read() as conn:
        table = models.tables["transcript"]
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def appended_through(ledger: Ledger, position: int) -> int:
    """MessageAppended events in the log through notification ``position``."""
    found = ledger.recorder.select_notifications(
        1, 100_000, stop=position, topics=(events.MessageAppended.TOPIC,)
    )
    return len(found)


def test_rebuilding_every_read_model_in_one_pass_equals_the_live_read_models(
    ledger: Ledger, url: str
) -> None:
    live = attach_read_models(ledger)
    write_history(ledger)
    assert ledger.wait_idle(30)
    assert_read_models_equal_ledger(live, ledger)

    models = SQLReadModels.for_url(url)
    runner = models.runner(ledger, batch_events=7, rebuild_batch_events=7)
    try:
        seen: list[tuple[int, int]] = []
        counts = runner.rebuild_many(READ_MODEL_NAMES, progress=lambda done, end: seen.append((done, end)))
        assert set(counts) == set(READ_MODEL_NAMES) and counts["transcript"] > 50
        assert len(seen) > 10  # progress after every batch of 7
        assert_read_models_equal_ledger(models, ledger)
        head = ledger.recorder.max_notification_id()
        assert all(runner.position(name) == head for name in READ_MODEL_NAMES)
    finally:
        runner.stop()


def test_an_interrupted_rebuild_resumes_from_its_last_committed_batch(ledger: Ledger, url: str) -> None:
    write_history(ledger)
    models = SQLReadModels.for_url(url)
    runner = models.runner(ledger, close_with_runner=False, rebuild_batch_events=5)
    calls = [0]

    def interrupt_on_the_fourth(done: int, end: int) -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            runner.rebuild_many(READ_MODEL_NAMES, progress=interrupt_on_the_fourth)
        tracked = models.transcript.max_tracking_id(ledger.name) or 0
        head = ledger.recorder.max_notification_id() or 0
        assert 0 < tracked < head
        # Tracking is where the committed rows are: never ahead of them, nor behind.
        assert transcript_rows(models) == appended_through(ledger, tracked)

        # Another process carries on (a fresh runner over the same tables), without starting over.
        again = SQLReadModels.for_url(url)
        resumed = again.runner(ledger, rebuild_batch_events=5)
        try:
            counts = resumed.rebuild_many(READ_MODEL_NAMES, resume=True)
            assert 0 < counts["transcript"] < head
            assert_read_models_equal_ledger(again, ledger)
        finally:
            resumed.stop()
    finally:
        models.close()


class FailingTranscriptView(SQLTranscriptView):
    """Fails while inserting its ``fail_at``-th row (counting from 1)."""

    fail_at = 8

    def __init__(self, models: SQLReadModels) -> None:
        super().__init__(models)
        self.inserted = 0

    def _insert_message(self, conn: Connection, table: Table, entry: Any, conversation_id: UUID) -> None:
        self.inserted += 1
        super()._insert_message(conn, table, entry, conversation_id)
        if self.inserted == self.fail_at:
            raise RuntimeError("the process died here")


def test_a_batch_that_fails_rolls_back_its_rows_and_its_tracking_together(ledger: Ledger, url: str) -> None:
    cid = ledger.start("s", policy=POLICY)
    converse(ledger, cid, 2)  # 10 messages, in the log after the start
    models = SQLReadModels.for_url(url)
    try:
        failing = FailingTranscriptView(models)
        runner = models.runner(ledger, close_with_runner=False, batch_events=5)
        runner.projections = (TranscriptProjection(failing),)
        runner._by_name = {"transcript": runner.projections[0]}
        with pytest.raises(RuntimeError, match="died"):
            runner.catch_up()
        # The first batch (the start and four messages) committed; the second rolled back whole.
        tracked = models.transcript.max_tracking_id(ledger.name) or 0
        assert transcript_rows(models) == appended_through(ledger, tracked) == 4
        assert runner.position("transcript") == tracked

        healthy = models.runner(ledger, close_with_runner=False, batch_events=5)
        healthy.catch_up()
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
    finally:
        models.close()


@contextmanager
def counting_batches(models: SQLReadModels) -> Iterator[list[int]]:
    """Counts the batch transactions ``models`` opens."""
    opened: list[int] = []
    original = models.batch

    @contextmanager
    def batch() -> Iterator[Any]:
        fresh = models._shared is None
        with original() as shared:
            if fresh:
                opened.append(1)
            yield shared

    models.batch = batch  # type: ignore[method-assign]
    try:
        yield opened
    finally:
        models.batch = original  # type: ignore[method-assign]


def test_a_follower_far_behind_catches_up_in_batches_then_applies_one_event_at_once(
    ledger: Ledger, url: str
) -> None:
    cid = ledger.start("s", policy=POLICY)
    converse(ledger, cid, 40)  # 200 messages and the summaries they trigger
    models = SQLReadModels.for_url(url)
    # A batch timer far longer than any test: nothing may wait for it.
    runner = models.runner(ledger, batch_events=1000, batch_seconds=3600.0, poll_interval=0.05)
    try:
        with counting_batches(models) as opened:
            assert runner.catch_up() > 200
        assert len(opened) <= 2  # one batch (on PostgreSQL, perhaps two across the final mark)
        assert models.transcript.transcript(cid) == ledger.transcript(cid)

        ledger.attach(runner)
        runner.start()
        assert ledger.wait_idle(10)
        before = len(models.transcript.transcript(cid))
        ledger.append(cid, {"role": "user", "content": "one more"})
        began = time.monotonic()
        while len(models.transcript.transcript(cid)) == before:
            assert time.monotonic() - began < 10, "a single new event waited for a batch"
            time.sleep(0.01)
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
    finally:
        runner.stop()


def test_a_follower_far_behind_takes_a_rebuilds_batches_and_near_the_end_the_usual_ones(
    ledger: Ledger, url: str
) -> None:
    cid = ledger.start("s", policy=POLICY)
    converse(ledger, cid, 40)  # 200 messages and the summaries they trigger
    head = ledger.recorder.max_notification_id() or 0
    models = SQLReadModels.for_url(url)
    runner = models.runner(
        ledger, batch_events=10, batch_seconds=3600.0, rebuild_batch_events=100, rebuild_batch_seconds=3600.0
    )
    try:
        with counting_batches(models) as opened:
            assert runner.catch_up() > 200
        # Far behind: batches of up to 100 events (10 each would take more than 20).
        assert len(opened) <= head // 100 + 3
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
        converse(ledger, cid, 6)  # 30 more messages: less than a rebuild batch behind
        with counting_batches(models) as opened:
            assert runner.catch_up() >= 30
        assert len(opened) >= 3  # the usual batches of 10
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
        assert_read_models_equal_ledger(models, ledger)
    finally:
        models.close()


@pytest.fixture
def encrypted_shards(url: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings of two stores of ``url``'s kind under one cipher key."""
    key = base64.b64encode(os.urandom(32)).decode()
    if url.startswith("sqlite"):
        yield Settings(stores=(url, f"sqlite:///{tmp_path / 'second.db'}"), database_url=url, cipher_key=key)
        return
    admin: Any = _postgres_admin()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        second = f"{url.split('?')[0]}?schema={schema}"
        yield Settings(stores=(url, second), database_url=url, cipher_key=key)
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


def sealed_share(models: SQLReadModels) -> tuple[int, int]:
    """(sealed under a data subject's key, all) values of ``cl_transcript.message`` as stored."""
    table = models.tables["transcript"]
    with models.read() as conn:
        stored = [row[0] for row in conn.exec_driver_sql(f"SELECT message FROM {table.fullname}")]
    sealed = [v for v in stored if isinstance(v, str) and v.strip('"').startswith(SUBJECT_SEALED_PREFIX)]
    return len(sealed), len(stored)


def test_an_encrypted_store_over_two_stores_rebuilds_each_store_sealed_and_resumes(
    encrypted_shards: Settings, url: str
) -> None:
    with Ledger.open(settings=encrypted_shards, summarizer=CountingSummarizer()) as ledger:
        keys = [id_homed(2, i % 2, "enc-") for i in range(2)] + [f"more-{i}" for i in range(4)]
        ids = [ledger.start("You track parcels.", policy=POLICY, key=key) for key in keys]
        for index, cid in enumerate(ids):
            converse(ledger, cid, 3, tag=f"{index}-")
        ledger.edit(ids[0], 0, {"role": "user", "content": "edited question"})
        ledger.retract(ids[1], 2, reason="wrong")
        assert ledger.wait_idle(30)
        for index, shard in enumerate(ledger.shards):
            homed = sorted(cid for cid in ids if home_store(cid, 2) == index)
            assert homed  # each store holds some
            models = SQLReadModels.for_ledger(shard)
            assert models.codec is not None
            runner = models.runner(shard, close_with_runner=False, rebuild_batch_events=5)
            calls = [0]

            def interrupt(done: int, end: int, calls: list[int] = calls) -> None:
                calls[0] += 1
                if calls[0] == 3:
                    raise KeyboardInterrupt

            try:
                with pytest.raises(KeyboardInterrupt):
                    runner.rebuild_many(READ_MODEL_NAMES, progress=interrupt)
                assert (
                    0
                    < (models.transcript.max_tracking_id(shard.name) or 0)
                    < (shard.recorder.max_notification_id() or 0)
                )
                resumed = models.runner(shard, close_with_runner=False)
                assert resumed.rebuild_many(READ_MODEL_NAMES, resume=True)["transcript"] > 0
                assert sorted(r.conversation_id for r in models.conversations.conversations()) == homed
                for cid in homed:
                    assert_conversation_matches(models, shard, cid)
                sealed, stored = sealed_share(models)
                assert stored == sum(len(shard.transcript(cid)) for cid in homed)
                assert sealed == stored > 0
                # Without the key the rows are there but cannot be read.
                keyless = SQLReadModels.for_url(shard.settings.database_url)
                try:
                    with pytest.raises(StoreError, match="cipher key"):
                        keyless.transcript.transcript(homed[0])
                finally:
                    keyless.close()
            finally:
                models.close()


class CountingView:
    """A view in memory: how many events of each class it applied, and its tracking."""

    def __init__(self) -> None:
        self.applied: dict[str, int] = {}
        self.tracked = 0

    def insert_tracking(self, tracking: Tracking) -> None:
        self.tracked = max(self.tracked, tracking.notification_id)

    def max_tracking_id(self, application_name: str) -> int | None:
        return self.tracked or None

    def reset(self) -> None:
        self.applied, self.tracked = {}, 0


class PlainMethodProjection(ReadModelProjection[Any]):
    """A user's projection whose ``process_event`` is a plain method, not a dispatching one."""

    name = "plain"
    topics = (events.MessageAppended.TOPIC, events.SummaryCreated.TOPIC)

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        kind = type(domain_event).__name__
        self.view.applied[kind] = self.view.applied.get(kind, 0) + 1
        self.view.insert_tracking(tracking)


def test_a_projection_with_a_plain_process_event_is_applied_beside_the_dispatching_ones(
    ledger: Ledger, url: str
) -> None:
    cid = ledger.start("s", policy=POLICY)
    converse(ledger, cid, 6)
    assert ledger.wait_idle(30)
    models = SQLReadModels.for_url(url)
    view = CountingView()
    runner = ReadModelRunner(
        ledger, [*models.projections(), PlainMethodProjection(view)], rebuild_batch_events=7
    )
    try:
        counts = runner.rebuild_many(("plain", "transcript"))
        summaries = len(ledger.summaries(cid))
        assert summaries > 0
        assert view.applied == {"MessageAppended": 30, "SummaryCreated": summaries}
        assert counts == {"plain": 30 + summaries, "transcript": 30}
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
    finally:
        models.close()
