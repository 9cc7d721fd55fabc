"""The base of the log's followers, on the memory store and a real SQLite file: start and
stop are idempotent, an append wakes the thread, shards split conversations by id,
health reports an error until a step succeeds again, and wait_idle tells the truth."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.application import Ledger, LogFollower, SummarizationRunner
from contextledger.application.following.follower import shard_of
from contextledger.domain.events import Started
from contextledger.domain.values.errors import ConfigurationError, StoreError
from contextledger.infrastructure.readmodels import SQLReadModels


class StartedCollector(LogFollower):
    """Collects the ids of the conversations started in its shard."""

    thread_name = "test-started-collector"

    def __init__(
        self, ledger: Ledger, *, shard: tuple[int, int] | None = None, poll_interval: float | None = None
    ) -> None:
        super().__init__(ledger, shard=shard, poll_interval=poll_interval)
        self.position = 0
        self.seen: list[UUID] = []
        #: Raised by the next steps, one each, before they read anything.
        self.failures: list[Exception] = []
        #: Set after every step that succeeded.
        self.stepped = threading.Event()

    def step(self) -> int:
        if self.failures:
            raise self.failures.pop(0)
        head = self.head()
        found = 0
        for page in self.read(after=self.position, stop=head, topics=(Started.TOPIC,)):
            with self._progress:
                for notification in page:
                    cid = UUID(str(notification.originator_id))
                    if self.owns(cid):
                        self.seen.append(cid)
                        found += 1
                self.position = page[-1].id
        self.position = max(self.position, head)
        self.stepped.set()
        return found

    def log_position(self) -> int:
        return self.position

    def idle_at(self, head: int) -> bool:
        return self.position >= head


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    with Ledger.open(url, run_policy=False) as opened:
        yield opened


def threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_starting_twice_runs_one_thread_and_stopping_twice_is_harmless(ledger: Ledger) -> None:
    follower = StartedCollector(ledger, poll_interval=0.01)
    follower.stop()  # before any start: nothing to do
    follower.start()
    follower.start()
    assert len(threads_named(follower.thread_name)) == 1
    assert follower.running and follower.health().running
    first = ledger.start("s")
    assert follower.wait_idle(30)
    follower.stop()
    follower.stop()
    assert not follower.running and threads_named(follower.thread_name) == []

    follower.start()  # a stopped follower starts again and reads on where it was
    second = ledger.start("s")
    assert follower.wait_idle(30)
    follower.stop()
    assert follower.seen == [first, second]


def test_an_append_wakes_the_follower_before_its_next_poll(ledger: Ledger) -> None:
    follower = StartedCollector(ledger, poll_interval=3600)  # only a wake can make it step again
    follower.start()
    try:
        assert follower.stepped.wait(30)  # the first step, at start
        follower.stepped.clear()
        cid = ledger.start("s")
        assert follower.stepped.wait(30)
        assert follower.seen == [cid]
    finally:
        follower.stop()


def test_shards_split_the_conversations_by_id_modulo_n(ledger: Ledger) -> None:
    shards = [StartedCollector(ledger, shard=(i, 3), poll_interval=0.01) for i in range(3)]
    for shard in shards:
        ledger.attach(shard)
    ids = [UUID(int=n * 7919 + 11) for n in range(12)]
    for cid in ids:
        ledger.start("s", conversation_id=cid)
    assert ledger.wait_idle(30)
    for i, shard in enumerate(shards):
        assert shard.seen == [cid for cid in ids if cid.int % 3 == i]
        assert shard.health().shard == (i, 3)


@pytest.fixture(scope="module")
def memory_ledger() -> Iterator[Ledger]:
    with Ledger.open("memory://", run_policy=False) as opened:
        yield opened


@given(cid=st.uuids(), n=st.integers(min_value=1, max_value=16))
def test_exactly_one_shard_owns_each_conversation_and_it_is_the_id_modulo_n(
    memory_ledger: Ledger, cid: UUID, n: int
) -> None:
    shards = [StartedCollector(memory_ledger, shard=(i, n)) for i in range(n)]
    assert [i for i, shard in enumerate(shards) if shard.owns(cid)] == [shard_of(cid, n)]
    assert shard_of(cid, n) == cid.int % n
    assert StartedCollector(memory_ledger).owns(cid)


@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0)])
def test_a_shard_outside_zero_to_n_is_refused(ledger: Ledger, shard: tuple[int, int]) -> None:
    with pytest.raises(ConfigurationError, match="0 <= I < N"):
        StartedCollector(ledger, shard=shard)


def test_health_reports_a_failed_step_until_one_succeeds(ledger: Ledger) -> None:
    follower = StartedCollector(ledger, poll_interval=0.05)
    cid = ledger.start("s")
    follower.failures = [StoreError("the store is down"), StoreError("still down")]

    assert not follower.run_once()
    health = follower.health()
    assert health.last_error == "StoreError: the store is down"
    assert health.failures == 1 and not health.running
    assert health.position == 0 and health.lag == health.head > 0
    assert follower.backoff() == pytest.approx(0.5)
    assert not follower.run_once()
    assert follower.health().failures == 2 and follower.backoff() == pytest.approx(1.0)

    assert follower.run_once()
    health = follower.health()
    assert health.last_error is None and health.failures == 0 and follower.backoff() == 0
    assert health.lag == 0 and health.position == health.head
    assert follower.seen == [cid]


def test_the_thread_retries_after_errors_and_catches_up(ledger: Ledger) -> None:
    follower = StartedCollector(ledger, poll_interval=0.01)
    follower.failures = [StoreError("down"), RuntimeError("a bug in a step")]
    cid = ledger.start("s")
    follower.start()
    try:
        assert follower.wait_idle(30)
        assert follower.seen == [cid] and follower.health().last_error is None
    finally:
        follower.stop()


def test_a_real_store_error_is_reported_and_recovered_from(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger.open(f"sqlite:///{path}", run_policy=False) as ledger:
        cid = ledger.start("s")
        follower = StartedCollector(ledger)
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE stored_events RENAME TO stored_events_away")
        assert not follower.run_once()
        assert "stored_events" in (follower.health().last_error or "")
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE stored_events_away RENAME TO stored_events")
        assert follower.run_once()
        assert follower.health().last_error is None and follower.seen == [cid]


def test_wait_idle_is_false_when_stopped_with_work_left(ledger: Ledger) -> None:
    follower = StartedCollector(ledger, poll_interval=0.01)
    ledger.start("s")
    assert not follower.wait_idle(5)  # never started
    follower.start()
    assert follower.wait_idle(30)
    follower.stop()
    assert follower.wait_idle(5)  # stopped with nothing left
    ledger.start("s")
    assert not follower.wait_idle(5)
    assert follower.health().lag > 0


def test_both_runners_are_log_followers_that_report_their_health(ledger: Ledger) -> None:
    policy = SummarizationRunner(ledger, ledger.summarizer, shard=(1, 3))
    models = SQLReadModels.for_ledger(ledger)
    views = models.runner(ledger)
    try:
        ledger.start("s")
        assert isinstance(policy, LogFollower) and isinstance(views, LogFollower)
        assert policy.health().name == "summarizer-1-of-3" and policy.health().shard == (1, 3)
        assert views.health().lag > 0
        assert views.wait_idle(30)  # no thread: it catches up in this one
        assert views.health().lag == 0 and views.health().name == "contextledger-readmodels"
    finally:
        views.stop()


class CountingLog:
    """A notification log that counts the pages asked of it."""

    def __init__(self, log: object) -> None:
        self.log = log
        self.asked: list[int] = []

    def select(self, **kwargs: object) -> object:
        got = self.log.select(**kwargs)  # type: ignore[attr-defined]
        self.asked.append(len(got))
        return got


def test_a_bounded_read_sends_no_query_that_can_only_come_back_empty(tmp_path: Path) -> None:
    from contextledger.application.following.notifications import read_notifications

    with Ledger.open(f"sqlite:///{tmp_path / 'log.db'}", run_policy=False) as ledger:
        cid = ledger.start("sys")
        for i in range(4):
            ledger.append(cid, {"role": "user", "content": f"m{i}"})
        head = ledger.recorder.max_notification_id()
        assert head == 5
        for page, stop in [(2, head), (5, head), (7, head), (2, None), (2, 3)]:
            log = CountingLog(ledger.notification_log)
            ids = [n.id for p in read_notifications(log, stop=stop, page=page) for n in p]  # type: ignore[arg-type]
            assert ids == list(range(1, (stop or head) + 1))
            # pages of 2 up to 5: 2, 2, 1 (short: the last); a page that reaches stop is the
            # last; without a stop the log may grow, so the read ends on an empty page
            assert log.asked == {(2, head): [2, 2, 1], (5, head): [5], (7, head): [5],
                                 (2, None): [2, 2, 1, 0], (2, 3): [2, 1]}[(page, stop)]
