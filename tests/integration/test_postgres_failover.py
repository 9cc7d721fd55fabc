"""Failover to a standby, on servers of the test's own (tests/support/own_postgres.py):
the primary is killed (``kill -9``, every process of it) while writers append, the
standby is promoted and a ledger opened on it.

With a synchronous standby (``synchronous_standby_names``) every append acknowledged
before the kill is on the promoted standby, once, and the store verifies. With an
asynchronous one, acknowledged appends may be missing: the test counts them (the
window docs/operations.md describes) and checks that what is there is whole.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from uuid import UUID

import psycopg
import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.readmodels import SQLReadModels
from tests.support.own_postgres import OwnPostgres, postgres_binaries
from tests.support.readmodel_checks import assert_read_models_equal_ledger

pytestmark = [pytest.mark.postgres]

WRITERS = 4
POLICY = ReductionPolicy(trigger_messages=8, keep_messages=2, max_summary_tokens=200)


@pytest.fixture
def primary() -> Iterator[OwnPostgres]:
    if postgres_binaries() is None:
        pytest.fail("no PostgreSQL binaries under /usr/lib/postgresql to start servers of the test's own")
    server = OwnPostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        run_policy=False,
        connect_timeout=2,
        write_deadline=3,
        statement_timeout=10,
        retry_base_seconds=0.05,
        retry_max_seconds=0.5,
    )


def _write_then_fail_over(primary: OwnPostgres, standby: OwnPostgres) -> tuple[dict[UUID, list[str]], Ledger]:
    """Writers append until the primary is killed; the standby is promoted. What each
    conversation had acknowledged, and a ledger open on the promoted standby."""
    url = primary.create_database("app")
    standby.replayed(primary)
    acknowledged: dict[UUID, list[str]] = {}
    stop = threading.Event()
    with Ledger.open(settings=_settings(url)) as ledger:
        cids = [ledger.start("You answer questions.") for _ in range(WRITERS)]
        for cid in cids:
            acknowledged[cid] = []

        def write(cid: UUID) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                text = f"message {n}"
                try:
                    ledger.append(cid, {"role": "user", "content": text}, client_message_id=f"m{n}")
                except Exception:  # the primary is gone: stop
                    return
                acknowledged[cid].append(text)

        threads = [threading.Thread(target=write, args=(cid,)) for cid in cids]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while min(len(v) for v in acknowledged.values()) < 20:
            assert time.monotonic() < deadline, "the writers made no progress"
            time.sleep(0.05)
        primary.kill()
        for t in threads:
            t.join(60)
        stop.set()
    standby.promote()
    return acknowledged, Ledger.open(settings=_settings(standby.database_url("app")))


def test_after_failover_to_a_synchronous_standby_no_acknowledged_append_is_lost(primary: OwnPostgres) -> None:
    standby = OwnPostgres.standby_of(primary, synchronous=True)
    try:
        acknowledged, ledger = _write_then_fail_over(primary, standby)
        with ledger:
            for cid, texts in acknowledged.items():
                contents = [e.message["content"] for e in ledger.transcript(cid)]
                assert [t for t in texts if t not in contents] == []  # none lost
                assert len(contents) == len(set(contents))  # none twice
                # What is there beyond the acknowledged: at most the one append in flight.
                assert len(contents) - len(texts) in (0, 1)
            assert ledger.verify().ok
            first = next(iter(acknowledged))
            ledger.append(first, {"role": "user", "content": "after the failover"})
            assert ledger.transcript(first)[-1].message["content"] == "after the failover"
            print(f"acknowledged {sum(len(v) for v in acknowledged.values())} appends; all present once")
    finally:
        standby.close()


def test_after_failover_to_an_asynchronous_standby_what_is_there_is_whole(primary: OwnPostgres) -> None:
    standby = OwnPostgres.standby_of(primary)
    try:
        acknowledged, ledger = _write_then_fail_over(primary, standby)
        with ledger:
            lost = 0
            for cid, texts in acknowledged.items():
                contents = [e.message["content"] for e in ledger.transcript(cid)]
                assert len(contents) == len(set(contents))
                # A prefix of what was acknowledged (appends to a conversation are ordered).
                assert contents[: len(texts)] == texts[: len(contents)]
                lost += max(0, len(texts) - len(contents))
            assert ledger.verify().ok
            print(
                f"acknowledged {sum(len(v) for v in acknowledged.values())} appends; {lost} lost with async"
            )
    finally:
        standby.close()


def test_a_multi_host_url_reaches_the_promoted_standby_by_itself(primary: OwnPostgres) -> None:
    """One ledger, opened on ``host1,host2`` with ``target_session_attrs=read-write``:
    writers retry (with their client message ids) through the kill and the promotion,
    and land on the promoted standby without the ledger being opened again; its
    summarization policy carries on there, summarizing each range once."""
    standby = OwnPostgres.standby_of(primary, synchronous=True)
    try:
        primary.create_database("app")
        standby.replayed(primary)
        url = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/app"
            "?target_session_attrs=read-write"
        )
        acknowledged: dict[UUID, list[str]] = {}
        errors: list[BaseException] = []
        stop = threading.Event()
        with Ledger.open(settings=_settings(url).model_copy(update={"run_policy": True})) as ledger:
            cids = [ledger.start("You answer questions.", policy=POLICY) for _ in range(WRITERS)]
            for cid in cids:
                acknowledged[cid] = []

            def write(cid: UUID) -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    text = f"message {n}"
                    deadline = time.monotonic() + 60
                    while True:
                        try:
                            ledger.append(cid, {"role": "user", "content": text}, client_message_id=f"m{n}")
                            break
                        except StoreError as exc:
                            if time.monotonic() > deadline:
                                errors.append(exc)
                                return
                            time.sleep(0.1)
                    acknowledged[cid].append(text)

            threads = [threading.Thread(target=write, args=(cid,)) for cid in cids]
            for t in threads:
                t.start()
            try:
                _until(lambda: min(len(v) for v in acknowledged.values()) >= 10)
                primary.kill()
                time.sleep(1)
                standby.promote()
                before = {cid: len(v) for cid, v in acknowledged.items()}
                _until(lambda: all(len(acknowledged[c]) >= before[c] + 5 for c in cids))
            finally:
                stop.set()
                for t in threads:
                    t.join(90)
            assert not errors, errors
            assert ledger.wait_idle(120)  # the policy, on the new primary, caught up
            for cid, texts in acknowledged.items():
                contents = [e.message["content"] for e in ledger.transcript(cid)]
                assert contents == texts  # each acknowledged append once, in order, nothing else
                summaries = ledger.summaries(cid)
                assert summaries and ledger.pending_summary(cid) is None
                ranges = [(s.from_position, s.through_position) for s in summaries]
                assert len(ranges) == len(set(ranges)), ranges  # each threshold crossing summarized once
                covered = sorted(p for a, b in ranges for p in range(a, b + 1))
                assert covered == sorted(set(covered)), ranges  # no message summarized twice
            assert ledger.verify().ok
            # The read models' engine reaches the promoted standby through the same URL.
            models = SQLReadModels.for_ledger(ledger)
            runner = models.runner(ledger)
            try:
                runner.catch_up(timeout=30)
                assert_read_models_equal_ledger(models, ledger)
            finally:
                runner.stop()
        with psycopg.connect(standby.database_url("app")) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        with Ledger.open(settings=_settings(url), read_only=True) as reader:  # an audit, same URL
            assert [e.message["content"] for e in reader.transcript(cids[0])] == acknowledged[cids[0]]
    finally:
        standby.close()


def _until(condition: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the writers made no progress"
        time.sleep(0.05)
