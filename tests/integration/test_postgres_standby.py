"""Audits on a hot standby: servers of the test's own (tests/support/own_postgres.py),
a primary and a ``pg_basebackup -R`` standby streaming from it (one pair for the
module, a database per test).

A reader on a standby cannot see the primary's open transactions (``pg_locks``
shows none of them), so past a gap in the notification ids it moves only as far as
the primary's published mark (infrastructure/persistence/pgstandby.py). These tests hold a
primary transaction open for real -- an append of a ledger held after it drew its
id, by a trigger waiting on an advisory lock the test holds -- and check that a
follower on the standby stops before it, then catches up once it commits.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, Settings
from contextledger.infrastructure.readmodels import SQLReadModels
from tests.support.own_postgres import OwnPostgres, postgres_binaries
from tests.support.processes import run_cli
from tests.support.readmodel_checks import assert_read_models_equal_ledger
from tests.support.viewer import serve

pytestmark = [pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
#: The advisory lock a held append waits on (see ``Holder``).
HOLD_LOCK = 4141


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[OwnPostgres, OwnPostgres]]:
    """A primary and an asynchronous hot standby of it, for the module."""
    if postgres_binaries() is None:
        pytest.fail("no PostgreSQL binaries under /usr/lib/postgresql to start servers of the test's own")
    primary = OwnPostgres()
    standby: OwnPostgres | None = None
    try:
        primary.start()
        standby = OwnPostgres.standby_of(primary)
        yield primary, standby
    finally:
        if standby is not None:
            standby.close()
        primary.close()


@pytest.fixture
def databases(servers: tuple[OwnPostgres, OwnPostgres]) -> tuple[str, str]:
    """A fresh database: its URL on the primary and on the standby."""
    primary, standby = servers
    name = f"t_{uuid.uuid4().hex[:12]}"
    primary_url = primary.create_database(name)
    standby.replayed(primary)
    return primary_url, standby.database_url(name)


def _settings(url: str, **updates: Any) -> Settings:
    return Settings(database_url=url, poll_interval=0.02, statement_timeout=20, write_deadline=20, **updates)


class Holder:
    """Holds appends of chosen conversations open on the primary after they drew their
    notification id: an ``AFTER INSERT`` trigger on the event table waits on an
    advisory lock the test holds, so the inserting transaction stays open until
    ``release()`` (then it commits, filling the gap it left)."""

    def __init__(self, url: str, ledger: Ledger) -> None:
        recorder: Any = ledger.recorder
        table = f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'
        self.events = table
        self.url = url
        self.control = psycopg.connect(url, autocommit=True)
        self.control.execute("CREATE TABLE IF NOT EXISTS held (id uuid PRIMARY KEY)")
        self.control.execute(
            "CREATE OR REPLACE FUNCTION hold_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF EXISTS (SELECT 1 FROM held WHERE id = NEW.originator_id) THEN "
            f"PERFORM pg_advisory_xact_lock_shared({HOLD_LOCK}); END IF; RETURN NEW; END $$"
        )
        self.control.execute(
            f"CREATE OR REPLACE TRIGGER hold AFTER INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION hold_insert()"
        )
        self.locked = False

    def hold(self, cid: uuid.UUID) -> None:
        self.control.execute("INSERT INTO held VALUES (%s) ON CONFLICT DO NOTHING", (cid,))
        if not self.locked:
            self.control.execute(f"SELECT pg_advisory_lock({HOLD_LOCK})")
            self.locked = True

    def wait_blocked(self, count: int = 1) -> None:
        """Until ``count`` transactions wait on the lock (their ids are drawn)."""
        deadline = time.monotonic() + 20
        while self.control.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND NOT granted",
            (HOLD_LOCK,),
        ).fetchone() != (count,):
            assert time.monotonic() < deadline, "the held append never reached its trigger"
            time.sleep(0.01)

    def release(self) -> None:
        self.control.execute("DELETE FROM held")
        if self.locked:
            self.control.execute(f"SELECT pg_advisory_unlock({HOLD_LOCK})")
            self.locked = False

    def rolled_back_insert(self) -> psycopg.Connection[Any]:
        """A transaction that has drawn a notification id and is still open: the caller
        rolls it back (a save that failed) or leaves it open a while."""
        conn = psycopg.connect(self.url)
        conn.execute(
            f"INSERT INTO {self.events} (originator_id, originator_version, topic, state) "
            "VALUES (%s, 1, 'rolled back', ''::bytea)",
            (uuid.uuid4(),),
        )
        return conn

    def close(self) -> None:
        self.release()
        self.control.close()


def _append_in_thread(
    ledger: Ledger, cid: uuid.UUID, content: str, errors: list[BaseException]
) -> threading.Thread:
    def run() -> None:
        try:
            ledger.append(cid, {"role": "user", "content": content})
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_the_fixture_streams_to_async_and_sync_standbys(servers: tuple[OwnPostgres, OwnPostgres]) -> None:
    primary, standby = servers
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = primary.create_database(name)
    synchronous = OwnPostgres.standby_of(primary, synchronous=True)
    try:
        states = dict(primary.execute("SELECT application_name, sync_state FROM pg_stat_replication"))
        assert states[standby.standby_name] == "async"
        assert states[synchronous.standby_name] == "sync"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (a int)")
            conn.execute("INSERT INTO t VALUES (1), (2)")
        for server in (standby, synchronous):
            server.replayed(primary)
            with psycopg.connect(server.database_url(name)) as conn:
                assert conn.execute("SELECT pg_is_in_recovery(), count(*) FROM t").fetchone() == (True, 2)
    finally:
        synchronous.close()
    assert primary.execute("SHOW synchronous_standby_names") == [("",)]


def test_a_standby_follower_never_passes_an_id_an_open_primary_transaction_drew(
    servers: tuple[OwnPostgres, OwnPostgres], databases: tuple[str, str]
) -> None:
    primary_server, standby_server = servers
    primary_url, standby_url = databases
    errors: list[BaseException] = []
    with (
        Ledger.open(settings=_settings(primary_url, run_policy=False)) as writer,
        Ledger.open(settings=_settings(primary_url, run_policy=False)) as held_writer,
    ):
        holder = Holder(primary_url, writer)
        try:
            free = writer.start("You answer questions.")
            held = held_writer.start("You answer questions.")
            holder.hold(held)
            thread = _append_in_thread(held_writer, held, "held back", errors)
            holder.wait_blocked()
            writer.append(free, {"role": "user", "content": "committed after the held one drew its id"})
            top = writer.recorder.max_committed_notification_id() or 0
            standby_server.replayed(primary_server)
            with Ledger.open(standby_url, read_only=True) as reader:
                recorder: Any = reader.recorder
                assert (recorder.max_committed_notification_id() or 0) == top
                # The held append's id lies below the top: the standby must stop before it.
                assert (reader.recorder.max_notification_id() or 0) < top - 1
                holder.release()
                thread.join(20)
                assert not errors
                writer.recorder.max_notification_id()  # the primary's own check
                standby_server.replayed(primary_server)
                assert (reader.recorder.max_notification_id() or 0) == top + 0
                assert [e.message["content"] for e in reader.transcript(held)] == ["held back"]
        finally:
            holder.close()


def test_a_standby_passes_a_rolled_back_id_once_the_primary_published_its_mark(
    servers: tuple[OwnPostgres, OwnPostgres], databases: tuple[str, str]
) -> None:
    primary_server, standby_server = servers
    primary_url, standby_url = databases
    with Ledger.open(settings=_settings(primary_url, run_policy=False)) as writer:
        holder = Holder(primary_url, writer)
        try:
            cid = writer.start("You answer questions.")
            failed = holder.rolled_back_insert()
            writer.append(cid, {"role": "user", "content": "after a save that fails"})
            failed.rollback()
            failed.close()
            top = writer.recorder.max_committed_notification_id() or 0
            standby_server.replayed(primary_server)
            with Ledger.open(standby_url, read_only=True) as reader:
                assert (reader.recorder.max_notification_id() or 0) < top  # nothing published yet
                assert writer.recorder.max_notification_id() == top  # passes the gap, publishes
                standby_server.replayed(primary_server)
                assert reader.recorder.max_notification_id() == top
        finally:
            holder.close()


def _cli(*args: str, database: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--database", database, *args], cwd=REPO)


def test_every_read_command_works_on_a_standby_while_the_primary_takes_writes(
    servers: tuple[OwnPostgres, OwnPostgres], databases: tuple[str, str]
) -> None:
    primary_server, standby_server = servers
    primary_url, standby_url = databases
    stop = threading.Event()
    written: list[int] = []

    with Ledger.open(settings=_settings(primary_url)) as writer:
        cid = writer.start("You answer questions.", key="audited")
        for i in range(6):
            writer.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
        busy = writer.start("You answer questions.")

        def keep_writing() -> None:
            while not stop.is_set():
                writer.append(busy, {"role": "user", "content": f"load {len(written)}"})
                written.append(1)
                time.sleep(0.005)

        load = threading.Thread(target=keep_writing)
        load.start()
        try:
            standby_server.replayed(primary_server)
            with Ledger.open(standby_url, read_only=True) as reader:
                assert [e.message["content"] for e in reader.transcript(cid)] == [
                    f"message {i}" for i in range(6)
                ]
                assert reader.context(cid) == writer.context(cid)
                assert reader.verify(cid).ok
            outputs = {
                "list": _cli("list", database=standby_url),
                "transcript": _cli("transcript", str(cid), database=standby_url),
                "context": _cli("context", str(cid), database=standby_url),
                "replay": _cli("replay", str(cid), database=standby_url),
                "export": _cli("export", database=standby_url),
                "verify": _cli("verify", str(cid), database=standby_url),
                "stats": _cli("--json", "stats", database=standby_url),
            }
            with serve(standby_url, cwd=REPO) as base:
                listing = httpx.get(f"{base}/conversations.json", timeout=30)
                page = httpx.get(f"{base}/conversations", timeout=30)
        finally:
            stop.set()
            load.join(30)
    for command, done in outputs.items():
        assert done.returncode == 0, (command, done.stderr)
    assert str(cid) in outputs["list"].stdout
    assert "message 5" in outputs["transcript"].stdout
    assert str(cid) in outputs["export"].stdout
    stats = json.loads(outputs["stats"].stdout)
    assert stats["standby"] is True
    assert isinstance(stats["replay_lag_bytes"], int) and stats["replay_lag_bytes"] >= 0
    assert written  # the primary took writes all along
    assert listing.status_code == 200 and str(cid) in listing.text
    assert listing.json()["standby"]["standby"] is True
    assert 'id="standby"' in page.text and "Read on a hot standby" in page.text


def test_stats_on_a_primary_reports_no_standby(databases: tuple[str, str]) -> None:
    primary_url, _ = databases
    with Ledger.open(settings=_settings(primary_url, run_policy=False)) as writer:
        writer.start("You answer questions.")
    done = _cli("--json", "stats", database=primary_url)
    assert done.returncode == 0, done.stderr
    assert "standby" not in json.loads(done.stdout)


# One operation of a schedule run against the primary while a follower reads the standby.
OPERATION = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2)),
    st.tuples(st.just("hold"), st.integers(0, 2)),
    st.tuples(st.just("open"), st.just(0)),
    st.tuples(st.just("end"), st.just(0)),
    st.tuples(st.just("follow"), st.just(0)),
)


@pytest.fixture(scope="module")
def interleaved(
    servers: tuple[OwnPostgres, OwnPostgres], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A database for the property test: writers on the primary, a follower on the
    standby with its read models in a SQLite file of its own."""
    primary, standby = servers
    name = f"t_{uuid.uuid4().hex[:12]}"
    primary_url = primary.create_database(name)
    with (
        Ledger.open(settings=_settings(primary_url)) as writer,
        Ledger.open(settings=_settings(primary_url, run_policy=False)) as held_writer,
    ):
        holder = Holder(primary_url, writer)
        cids = [writer.start("You answer questions.") for _ in range(3)]
        standby.replayed(primary)
        reader = Ledger.open(standby.database_url(name), read_only=True)
        models = SQLReadModels.for_url(f"sqlite:///{tmp_path_factory.mktemp('standby-models') / 'models.db'}")
        runner = models.runner(reader)
        try:
            yield {
                "writer": writer,
                "held_writer": held_writer,
                "holder": holder,
                "cids": cids,
                "reader": reader,
                "models": models,
                "runner": runner,
                "primary": primary,
                "standby": standby,
            }
        finally:
            holder.close()
            reader.close()
            models.close()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=st.lists(OPERATION, min_size=4, max_size=16))
def test_a_standby_follower_equals_a_rebuild_on_the_primary(
    interleaved: dict[str, Any], schedule: list[tuple[str, Any]]
) -> None:
    writer: Ledger = interleaved["writer"]
    held_writer: Ledger = interleaved["held_writer"]
    holder: Holder = interleaved["holder"]
    cids: list[uuid.UUID] = interleaved["cids"]
    primary: OwnPostgres = interleaved["primary"]
    standby: OwnPostgres = interleaved["standby"]
    runner = interleaved["runner"]
    errors: list[BaseException] = []
    held: threading.Thread | None = None
    open_inserts: list[psycopg.Connection[Any]] = []
    held_cid = held_writer.start("You answer questions.")  # written only by the held writer

    def end_all() -> None:
        nonlocal held
        for conn in open_inserts:
            conn.rollback()
            conn.close()
        open_inserts.clear()
        if held is not None:
            holder.release()
            held.join(20)
            held = None

    try:
        for step, (what, arg) in enumerate(schedule):
            if what == "append":
                writer.append(cids[arg], {"role": "user", "content": f"step {step}"})
            elif what == "hold" and held is None:
                holder.hold(held_cid)
                held = _append_in_thread(held_writer, held_cid, f"held {step}", errors)
                holder.wait_blocked()
            elif what == "open":
                open_inserts.append(holder.rolled_back_insert())
            elif what == "end":
                end_all()
            elif what == "follow":
                writer.recorder.max_notification_id()  # the primary's follower steps too
                standby.replayed(primary)
                runner.catch_up(timeout=10)
        end_all()
        assert not errors
        committed = writer.recorder.max_committed_notification_id() or 0
        deadline = time.monotonic() + 30
        while (writer.recorder.max_notification_id() or 0) < committed:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        standby.replayed(primary)
        deadline = time.monotonic() + 30
        while runner.head() < committed or not runner.idle_at(runner.head()):
            assert time.monotonic() < deadline, (runner.head(), committed)
            runner.catch_up(timeout=5)
        assert_read_models_equal_ledger(interleaved["models"], writer)
    finally:
        end_all()
