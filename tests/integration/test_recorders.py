"""The ledger's own recorders: eventsourcing's recorder contract, group commit under
concurrent writers (threads and processes), a failure inside a shared transaction, and
followers that never miss a notification while writers race."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, PersistenceError, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests.persistence import ApplicationRecorderTestCase

from contextledger.application import Ledger, Settings
from contextledger.application.following.notifications import read_notifications
from contextledger.infrastructure.persistence.recorders import (
    PostgresConversationRecorder,
    PostgresSnapshotRecorder,
    SQLiteConversationRecorder,
    WindowedPOPORecorder,
)
from tests.conftest import POSTGRES_URL, _postgres_admin
from tests.support.processes import process_context

# -- eventsourcing's contract -----------------------------------------------------------


@pytest.mark.postgres
class TestPostgresConversationRecorderContract(ApplicationRecorderTestCase[PostgresConversationRecorder]):
    # Timings only (they print, and assert nothing).
    test_performance = None  # type: ignore[assignment]
    test_concurrent_throughput = None  # type: ignore[assignment]

    def setUp(self) -> None:
        self.admin: Any = _postgres_admin()
        self.schema = f"t_{uuid.uuid4().hex[:12]}"
        self.admin.execute(f'CREATE SCHEMA "{self.schema}"')
        self.datastore = PostgresDatastore(
            "test", "127.0.0.1", 5432, "postgres", "", schema=self.schema, pool_size=4, max_overflow=8
        )
        self.recorders: list[PostgresConversationRecorder] = []

    def tearDown(self) -> None:
        for recorder in self.recorders:
            recorder.close_save_connection()
        self.datastore.close()
        self.admin.execute(f'DROP SCHEMA "{self.schema}" CASCADE')
        self.admin.close()

    def create_recorder(self) -> PostgresConversationRecorder:
        recorder = PostgresConversationRecorder(self.datastore, events_table_name="contract_events")
        recorder.create_table()
        self.recorders.append(recorder)
        return recorder


class TestSQLiteConversationRecorderContract(ApplicationRecorderTestCase[SQLiteConversationRecorder]):
    test_performance = None  # type: ignore[assignment]
    test_concurrent_throughput = None  # type: ignore[assignment]

    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.datastore = SQLiteDatastore(str(Path(self.folder.name) / "contract.db"))
        self.threads_before = set(threading.enumerate())

    def tearDown(self) -> None:
        # The library's concurrency test stops its reader threads without joining them;
        # closing SQLite connections under a running query crashes the interpreter. Only
        # the test's own threads: not one the process ran before it (the suite's mypy run).
        for thread in threading.enumerate():
            if thread not in self.threads_before and not thread.daemon:
                thread.join(10)
        self.datastore.close()
        self.folder.cleanup()

    def create_recorder(self) -> SQLiteConversationRecorder:
        recorder = SQLiteConversationRecorder(self.datastore, events_table_name="contract_events")
        recorder.create_table()
        return recorder


def test_a_sqlite_save_that_conflicts_leaves_nothing_of_itself(tmp_path: Path) -> None:
    datastore = SQLiteDatastore(str(tmp_path / "c.db"))
    try:
        recorder = SQLiteConversationRecorder(datastore, events_table_name="app_events")
        recorder.create_table()
        first, second = uuid.uuid4(), uuid.uuid4()
        assert recorder.insert_events([_event(first, 1), _event(first, 2)]) == [1, 2]
        with pytest.raises(IntegrityError):  # the second event conflicts: none of the save lands
            recorder.insert_events([_event(second, 1), _event(first, 2)])
        assert [(e.originator_version) for e in recorder.select_events(first)] == [1, 2]
        assert recorder.select_events(second) == []
        # SQLite hands out the rolled-back rowid again (as the library's recorder does).
        assert recorder.insert_events([_event(second, 1)]) == [3]
        assert recorder.max_notification_id() == 3
    finally:
        datastore.close()


def test_a_lone_sqlite_save_is_one_insert_in_autocommit_and_several_share_a_transaction(
    tmp_path: Path,
) -> None:
    datastore = SQLiteDatastore(str(tmp_path / "c.db"))
    try:
        recorder = SQLiteConversationRecorder(datastore, events_table_name="app_events")
        recorder.create_table()
        statements: list[str] = []
        connection: Any = datastore.pool.get_connection(is_writer=True)
        sqlite_conn = connection.cursor().sqlite_cursor.connection
        sqlite_conn.set_trace_callback(statements.append)
        datastore.pool.put_connection(connection)
        oid = uuid.uuid4()
        assert recorder.insert_events([_event(oid, 1)]) == [1]
        # No BEGIN: the one compiled statement the connection caches stays the INSERT.
        assert [s.split()[0] for s in statements] == ["INSERT"]
        with pytest.raises(IntegrityError):
            recorder.insert_events([_event(oid, 1)])
        statements.clear()
        assert recorder.insert_events([_event(oid, 2), _event(oid, 3)]) == [2, 3]
        assert [s.split()[0] for s in statements] == ["BEGIN", "INSERT", "INSERT", "COMMIT"]
        sqlite_conn.set_trace_callback(None)
        # Each save is committed: another connection sees all of them, the conflict none.
        other = sqlite3.connect(tmp_path / "c.db")
        assert other.execute("SELECT originator_version FROM app_events ORDER BY rowid").fetchall() == [
            (1,),
            (2,),
            (3,),
        ]
        other.close()
    finally:
        datastore.close()


class TestWindowedPOPORecorderContract(ApplicationRecorderTestCase[WindowedPOPORecorder]):
    test_performance = None  # type: ignore[assignment]
    test_concurrent_throughput = None  # type: ignore[assignment]

    def create_recorder(self) -> WindowedPOPORecorder:
        return WindowedPOPORecorder()


def test_the_windowed_memory_recorder_reads_what_the_library_reads() -> None:
    ours, theirs = WindowedPOPORecorder(), POPOApplicationRecorder()
    oid = uuid.uuid4()
    for v in range(1, 41):
        event = StoredEvent(originator_id=oid, originator_version=v, topic="t", state=b"%d" % v)
        ours.insert_events([event])
        theirs.insert_events([event])
    cases = [
        {"gt": gt, "lte": lte, "limit": limit}
        for gt in (None, 0, 1, 17, 39, 40, 55)
        for lte in (None, 1, 20, 40)
        for limit in (None, 1, 5)
    ]
    for kwargs in cases:
        assert ours.select_events(oid, **kwargs) == theirs.select_events(oid, **kwargs), kwargs
        assert ours.select_events(oid, desc=True, **kwargs) == theirs.select_events(oid, desc=True, **kwargs)
    assert ours.select_events(uuid.uuid4(), gt=3) == []


# -- group commit -------------------------------------------------------------------------


@pytest.fixture
def schema() -> Iterator[str]:
    admin: Any = _postgres_admin()
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield name
    finally:
        admin.execute(f'DROP SCHEMA "{name}" CASCADE')
        admin.close()


@pytest.fixture
def recorder(schema: str) -> Iterator[PostgresConversationRecorder]:
    """The ledger's recorder on a fresh ``app_events`` table in ``schema``."""
    datastore = PostgresDatastore(
        "test", "127.0.0.1", 5432, "postgres", "", schema=schema, pool_size=2, max_overflow=4
    )
    try:
        recorder = PostgresConversationRecorder(datastore, events_table_name="app_events")
        recorder.create_table()
        yield recorder
        recorder.close_save_connection()
    finally:
        datastore.close()


def _event(oid: UUID, version: int, topic: str = "t") -> StoredEvent:
    return StoredEvent(originator_id=oid, originator_version=version, topic=topic, state=b"{}")


def _settled_mark(recorder: PostgresConversationRecorder, expected: int, timeout: float = 10.0) -> int | None:
    """``max_notification_id()`` once it reaches ``expected`` (or the timeout). Past a gap
    the mark waits for the transactions that were writing to the event table when the
    gap was seen, so it may take a moment."""
    deadline = time.monotonic() + timeout
    mark = recorder.max_notification_id()
    while mark != expected and time.monotonic() < deadline:
        time.sleep(0.02)
        mark = recorder.max_notification_id()
    return mark


def _held(schema: str) -> Any:
    """A connection holding the events table's lock, so saves queue behind it."""
    conn: Any = psycopg.connect(POSTGRES_URL.split("?")[0])
    conn.execute(f'LOCK TABLE "{schema}".app_events IN EXCLUSIVE MODE')
    return conn


def _save_all(recorder: PostgresConversationRecorder, saves: list[list[StoredEvent]]) -> list[Any]:
    """Submit every save from its own thread; returns each one's ids or error."""
    outcomes: list[Any] = [None] * len(saves)

    def run(i: int) -> None:
        try:
            outcomes[i] = recorder.insert_events(saves[i])
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(saves))]
    for t in threads:
        t.start()
    return [threads, outcomes]  # type: ignore[list-item]


def _wait_queued(recorder: PostgresConversationRecorder, n: int) -> None:
    """Until ``n`` saves wait behind the one in flight."""
    for _ in range(2000):
        with recorder.group_commit._lock:
            if len(recorder.group_commit._queue) >= n:
                return
        threading.Event().wait(0.005)
    raise AssertionError("the saves did not queue")


def _batched(
    recorder: PostgresConversationRecorder, schema: str, saves: list[list[StoredEvent]]
) -> list[Any]:
    """Each save from its own thread while the table is locked, so one is in flight
    and the other five queue behind it; then the lock goes. Returns each save's ids
    or error."""
    lock = _held(schema)
    threads, outcomes = _save_all(recorder, saves)
    _wait_queued(recorder, 5)
    lock.rollback()
    lock.close()
    for t in threads:
        t.join(30)
    return outcomes


def _terminate(pid: int) -> None:
    """Kill a server backend, as a server restart does, and wait until it is gone
    (``pg_terminate_backend`` returns before the backend exits)."""
    admin: Any = _postgres_admin()
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    for _ in range(500):
        if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            break
        time.sleep(0.01)
    admin.close()


def _stored(recorder: PostgresConversationRecorder) -> list[tuple[UUID, int]]:
    """Every stored event, read through the log once it is final through the highest
    committed id: a save still writing to the table when a gap was seen holds the
    final mark back until it ends."""
    with recorder.datastore.get_connection() as conn:
        row = conn.execute(
            f'SELECT coalesce(max(notification_id), 0) AS top FROM "{recorder.datastore.schema}".app_events'
        ).fetchone()
    top = row["top"] if row else 0
    deadline = time.monotonic() + 30
    while (recorder.max_notification_id() or 0) < top and time.monotonic() < deadline:
        time.sleep(0.01)
    return [(n.originator_id, n.originator_version) for n in recorder.select_notifications(1, 10_000)]


@pytest.mark.postgres
def test_concurrent_saves_share_one_statement_with_ordered_ids(
    recorder: PostgresConversationRecorder, schema: str
) -> None:
    oids = [uuid.uuid4() for _ in range(6)]
    outcomes = _batched(recorder, schema, [[_event(o, 1), _event(o, 2)] for o in oids])
    gc = recorder.group_commit
    assert gc.saves == 6 and gc.batches == 2 and gc.largest == 5
    ids = [i for o in outcomes for i in o]
    assert all(len(o) == 2 and o[1] == o[0] + 1 for o in outcomes)  # each save's ids in order
    assert sorted(ids) == list(range(1, 13))  # no gaps: one statement per batch
    assert sorted(_stored(recorder)) == sorted((o, v) for o in oids for v in (1, 2))


class _InFlight:
    """A save whose transaction stays open (holding its notification id) until
    ``end(commit)``: the out-of-order commit a reader must not pass over."""

    def __init__(self, recorder: PostgresConversationRecorder, event: StoredEvent) -> None:
        self.ids: list[int] = []
        self._inserted = threading.Event()
        self._release = threading.Event()
        self._commit = True
        self._error: list[BaseException] = []
        params = ([event.originator_id], [event.originator_version], [event.topic], [event.state])

        def run() -> None:
            try:
                with recorder.datastore.get_connection() as conn, conn.transaction():
                    cur = conn.execute(recorder.append_statement, params)
                    self.ids = [r["id"] for r in cur.fetchall()]
                    self._inserted.set()
                    self._release.wait(30)
                    if not self._commit:
                        raise psycopg.Rollback()
            except BaseException as exc:  # surfaced by end()
                self._error.append(exc)
                self._inserted.set()

        self._thread = threading.Thread(target=run)
        self._thread.start()
        assert self._inserted.wait(30) and not self._error, self._error

    def end(self, commit: bool) -> None:
        self._commit = commit
        self._release.set()
        self._thread.join(30)
        assert not self._error, self._error


@pytest.mark.postgres
@pytest.mark.parametrize("commit", [True, False], ids=["commits", "rolls-back"])
def test_a_reader_never_passes_an_id_whose_transaction_is_still_open(
    recorder: PostgresConversationRecorder, commit: bool
) -> None:
    first = recorder.insert_events([_event(uuid.uuid4(), 1)])
    assert first == [1] and recorder.max_notification_id() == 1
    open_save = _InFlight(recorder, _event(uuid.uuid4(), 1))
    assert open_save.ids == [2]
    later = recorder.insert_events([_event(uuid.uuid4(), 1)])
    assert later == [3]  # committed before id 2
    for _ in range(3):  # however often it is asked, the log ends before the open id
        assert recorder.max_notification_id() == 1
        assert [n.id for n in recorder.select_notifications(1, 100)] == [1]
        assert [n.id for n in recorder.select_notifications(1, 100, stop=3)] == [1]
    open_save.end(commit)
    assert _settled_mark(recorder, 3) == 3
    ids = [n.id for n in recorder.select_notifications(1, 100)]
    assert ids == ([1, 2, 3] if commit else [1, 3])


@pytest.mark.postgres
def test_a_reader_never_passes_an_open_save_whose_transaction_is_newer_than_the_top(
    recorder: PostgresConversationRecorder, schema: str
) -> None:
    """The race two concurrent saves can run: the later transaction (a higher xid)
    draws the lower notification id, and the earlier one commits the higher id first.
    A snapshot's running set lists only xids below its ``xmax`` (the newest *ended*
    xid + 1), so the open save's xid is in no snapshot's list while nothing newer has
    ended: the mark must still wait for it."""
    assert recorder.insert_events([_event(uuid.uuid4(), 1)]) == [1]
    assert recorder.max_notification_id() == 1
    params = lambda: ([uuid.uuid4()], [1], ["t"], [b"{}"])  # noqa: E731
    earlier: Any = psycopg.connect(POSTGRES_URL.split("?")[0])
    later: Any = psycopg.connect(POSTGRES_URL.split("?")[0])
    try:
        (a,) = earlier.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        (b,) = later.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert b > a
        assert [r[0] for r in later.execute(recorder.append_statement, params())] == [2]
        assert [r[0] for r in earlier.execute(recorder.append_statement, params())] == [3]
        earlier.commit()  # id 3 is visible, id 2 is not, and xid b is above every ended one
        for _ in range(3):
            assert recorder.max_notification_id() == 1
            assert [n.id for n in recorder.select_notifications(1, 100)] == [1]
        later.commit()
    finally:
        earlier.close()
        later.close()
    assert _settled_mark(recorder, 3) == 3
    assert [n.id for n in recorder.select_notifications(1, 100)] == [1, 2, 3]


@pytest.mark.postgres
def test_a_subscription_sees_later_saves_without_notify(recorder: PostgresConversationRecorder) -> None:
    recorder.insert_events([_event(uuid.uuid4(), 1)])
    with recorder.subscribe(gt=0) as subscription:
        oid = uuid.uuid4()
        recorder.insert_events([_event(oid, 1), _event(oid, 2)])
        got = [next(subscription).id for _ in range(3)]
    assert got == [1, 2, 3]


@pytest.mark.postgres
def test_a_conflict_in_a_shared_transaction_fails_only_its_own_save(
    recorder: PostgresConversationRecorder, schema: str
) -> None:
    taken = uuid.uuid4()
    recorder.insert_events([_event(taken, 1)])
    oids = [uuid.uuid4() for _ in range(4)]
    saves = [
        [_event(uuid.uuid4(), 1)],
        *[[_event(o, 1)] for o in oids[:2]],
        [_event(taken, 1)],
        *[[_event(o, 1)] for o in oids[2:]],
    ]
    outcomes = _batched(recorder, schema, saves)
    assert isinstance(outcomes[3], IntegrityError)
    assert all(isinstance(o, list) and len(o) == 1 for i, o in enumerate(outcomes) if i != 3)
    assert recorder.group_commit.largest == 5  # the conflict came in a shared batch
    stored = _stored(recorder)
    assert stored.count((taken, 1)) == 1
    assert {(o, 1) for o in oids} <= set(stored)


@pytest.mark.postgres
def test_a_failing_statement_leaves_nothing_of_the_batch_half_written(
    recorder: PostgresConversationRecorder, schema: str
) -> None:
    admin: Any = _postgres_admin()
    admin.execute(
        f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ '
        "BEGIN IF NEW.topic = 'refused' THEN RAISE EXCEPTION 'refused by the server'; END IF; "
        "RETURN NEW; END $$"
    )
    admin.execute(
        f'CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".app_events '
        f'FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()'
    )
    admin.close()
    oids = [uuid.uuid4() for _ in range(5)]
    bad = uuid.uuid4()
    # The refused save's first event is fine: only its second one fails.
    saves = [[_event(o, 1)] for o in oids[:3]] + [[_event(bad, 1), _event(bad, 2, "refused")]]
    saves += [[_event(o, 1)] for o in oids[3:]]
    outcomes = _batched(recorder, schema, saves)
    assert isinstance(outcomes[3], PersistenceError) and "refused" in str(outcomes[3])
    assert all(isinstance(o, list) for i, o in enumerate(outcomes) if i != 3)
    assert recorder.group_commit.largest == 5
    stored = _stored(recorder)
    assert not [s for s in stored if s[0] == bad]  # nothing of the refused save
    assert sorted(stored) == sorted((o, 1) for o in oids)


@pytest.mark.postgres
def test_a_dead_pooled_connection_costs_one_more_try_not_an_error(
    recorder: PostgresConversationRecorder,
) -> None:
    recorder.insert_events([_event(uuid.uuid4(), 1)])
    with recorder.datastore.pool.connection() as conn:
        pid = conn.info.backend_pid
    _terminate(pid)
    assert recorder.max_notification_id() == 1
    assert len(recorder.insert_events([_event(uuid.uuid4(), 1)])) == 1


@pytest.mark.postgres
def test_saves_keep_one_connection_outside_the_pool_and_reopen_it_when_it_dies(
    recorder: PostgresConversationRecorder,
) -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    assert recorder.insert_events([_event(first, 1)]) == [1]
    writer: Any = recorder._writer
    pid = writer.info.backend_pid
    with recorder.datastore.pool.connection() as conn:
        assert conn is not writer
    assert recorder.insert_events([_event(first, 2)]) == [2]
    assert recorder._writer is writer  # kept, not checked out per save
    _terminate(pid)
    assert recorder.insert_events([_event(second, 1), _event(second, 2)]) == [3, 4]
    assert recorder._writer is not writer and recorder._writer.info.backend_pid != pid
    with pytest.raises(IntegrityError):  # a conflict on the lone-event path is the library's error
        recorder.insert_events([_event(first, 2)])
    assert sorted(_stored(recorder)) == sorted([(first, 1), (first, 2), (second, 1), (second, 2)])
    current: Any = recorder._writer
    recorder.close_save_connection()
    assert writer.closed and current.closed and recorder._writer is None


# -- ledgers: threads and processes, followers that never miss a notification ------------------

THREADS = 4
PER_THREAD = 25


def _threaded_writer(url: str, n: int, barrier: Any, out: Any) -> None:
    with Ledger(Settings(database_url=url, run_policy=False)) as ledger:
        cids = [ledger.start("s") for _ in range(THREADS)]
        barrier.wait(60)

        def write(cid: UUID) -> None:
            for i in range(PER_THREAD):
                ledger.append(cid, {"role": "user", "content": f"{n}-{i}"}, client_message_id=f"{n}-{i}")

        threads = [threading.Thread(target=write, args=(c,)) for c in cids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        gc = ledger.recorder.group_commit  # type: ignore[attr-defined]
        out.put((n, [str(c) for c in cids], gc.saves, gc.batches))


@pytest.mark.postgres
def test_followers_miss_no_notification_under_concurrent_writers(postgres_url: str) -> None:
    processes = 2
    with Ledger(Settings(database_url=postgres_url, run_policy=False)) as reader:
        ctx = process_context()
        barrier = ctx.Barrier(processes + 1)
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_threaded_writer, args=(postgres_url, n, barrier, out))
            for n in range(processes)
        ]
        for p in procs:
            p.start()
        seen: list[int] = []
        position = 0
        try:
            barrier.wait(60)
            # Tail the log the way every follower does: read up to the head, move on.
            while any(p.is_alive() for p in procs) or position < (reader.recorder.max_notification_id() or 0):
                head = reader.recorder.max_notification_id() or 0
                for page in read_notifications(reader.notification_log, after=position, stop=head, page=50):
                    seen.extend(n.id for n in page)
                position = max(position, head)
        finally:
            for p in procs:
                p.join(120)
        results = [out.get(timeout=10) for _ in range(processes)]
        assert all(p.exitcode == 0 for p in procs)
        everything = [n.id for page in read_notifications(reader.notification_log) for n in page]
        assert seen == everything  # nothing passed over, nothing twice, in order
        # every append and its client-id index, starts included
        assert len(everything) == processes * THREADS * (1 + 2 * PER_THREAD)
        for _, cids, saves, batches in results:
            assert saves == THREADS * (1 + PER_THREAD) and batches <= saves
            for cid in cids:
                assert [e.message["content"] for e in reader.transcript(cid)][-1].endswith(
                    f"-{PER_THREAD - 1}"
                )
                assert len(reader.transcript(cid)) == PER_THREAD
        assert reader.verify().ok


@pytest.mark.postgres
def test_snapshots_are_written_in_binary_and_load_a_cold_ledger_as_the_events_do(postgres_url: str) -> None:
    settings = Settings(database_url=postgres_url, snapshot_interval=4, run_policy=False)
    with Ledger(settings) as ledger:
        assert isinstance(ledger.snapshots.recorder, PostgresSnapshotRecorder)  # type: ignore[union-attr]
        cid = ledger.start("s")
        for i in range(10):
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} \x00\\x"})
        warm = ledger.context(cid)
        stored = ledger.snapshots.recorder.select_events(cid)  # type: ignore[union-attr]
        assert [s.originator_version for s in stored] == [4, 8]
        with pytest.raises(IntegrityError):  # a snapshot is written once per version
            ledger.snapshots.recorder.insert_events([stored[-1]])  # type: ignore[union-attr]
    with Ledger(settings) as cold:
        conversation = cold.store.load(cid)  # the snapshot at 8 and the events after it
        assert conversation.version == 11
        assert cold.context(cid) == warm
        replayed: Any = None
        for event in cold.store.events(cid):  # the events alone, folded
            replayed = event.mutate(replayed)
        assert replayed.version == 11
        assert replayed.working_memory() == conversation.working_memory()


def test_the_sqlite_saves_keep_one_warm_writer_and_the_pool_hands_out_the_connection_used_last(
    tmp_path: Path,
) -> None:
    with Ledger(Settings(database_url=f"sqlite:///{tmp_path / 'l.db'}", run_policy=False)) as ledger:
        pool: Any = ledger.factory.datastore.pool  # type: ignore[attr-defined]
        cid = ledger.start("s")
        kept = pool._writer  # the connection the saves keep checked out, statements compiled
        assert kept is not None
        held = [pool.get_connection(is_writer=False) for _ in range(3)]
        for conn in held:  # three idle connections, the last of them returned last
            pool.put_connection(conn)
        for i in range(3):
            ledger.append(cid, {"role": "user", "content": f"m{i}"})
            assert pool._writer is kept  # every save on the same warm connection
            assert kept not in held
            taken = pool.get_connection(is_writer=True)  # the library's own writes (snapshots)
            assert taken is held[-1]  # the idle connection returned last, still warm
            pool.put_connection(taken)
        assert [e.message["content"] for e in ledger.transcript(cid)] == ["m0", "m1", "m2"]
