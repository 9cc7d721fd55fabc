"""Past a gap in the notification ids (a rolled-back insert, as a write conflict leaves),
a PostgreSQL store's log is final once the transactions that were writing to *its*
event table have ended: transactions of other sessions elsewhere on the server (another
database, another table) hold nothing back, one that inserted into the event table and
stays open does (docs/operations.md). Ids below the first gap are readable at once.

The open transactions are real ones on other connections; other tests run beside these
on the same server, so nothing here assumes the server is otherwise quiet."""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from contextledger.application import Ledger, Settings
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.cli.commands import worker
from contextledger.infrastructure.cli.common import Failure
from contextledger.infrastructure.cli.waiting import waiting_for
from contextledger.infrastructure.persistence.recorders import PostgresConversationRecorder
from contextledger.infrastructure.web.views import ConversationIndex
from tests.conftest import POSTGRES_URL

pytestmark = pytest.mark.postgres

SERVER = POSTGRES_URL.split("?")[0]
#: The old mark stalled for as long as any unrelated transaction stayed open; followers
#: now return within a poll or two. Generous for a loaded 2-core machine, and far below
#: the time the unrelated transaction stays open (the whole test, well over 10 s).
PROMPT = 3.0
STALL = 10.0


def settings(url: str, **kw: Any) -> Settings:
    return Settings(database_url=url, poll_interval=0.02, **kw)


def _schema(url: str) -> str:
    return url.split("schema=")[1]


def _table(ledger: Ledger) -> str:
    recorder: Any = ledger.recorder
    return f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'


def _insert(conn: Any, table: str) -> int:
    """Insert one event row on ``conn`` (its transaction left open); its id."""
    row = conn.execute(
        f"INSERT INTO {table} (originator_id, originator_version, topic, state) "
        "VALUES (%s, 1, 'not.a.conversation', '\\x7b7d') RETURNING notification_id",
        (uuid.uuid4(),),
    ).fetchone()
    return int(row[0])


def _rolled_back_insert(ledger: Ledger) -> int:
    """A gap: an insert into the event table that rolls back; the id it drew."""
    with psycopg.connect(SERVER) as conn:
        drawn = _insert(conn, _table(ledger))
        conn.rollback()
    return drawn


@pytest.fixture(params=["another-database", "same-database-another-table"])
def unrelated(request: pytest.FixtureRequest, postgres_url: str) -> Iterator[Any]:
    """A transaction that holds an xid all through the test and never touches the event
    table: in another database, or in the store's own database on a table of its own."""
    if request.param == "another-database":
        conn: Any = psycopg.connect(SERVER.rsplit("/", 1)[0] + "/postgres")
        conn.execute("SELECT pg_current_xact_id()")  # an xid, held until rollback
    else:
        conn = psycopg.connect(SERVER)
        table = f'"{_schema(postgres_url)}".unrelated'
        conn.execute(f"CREATE TABLE {table} (x int)")
        conn.commit()
        conn.execute(f"INSERT INTO {table} VALUES (1)")  # open: an xid, a row lock
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def test_an_unrelated_open_transaction_hides_nothing_past_a_gap(
    postgres_url: str, unrelated: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with Ledger.open(settings=settings(postgres_url, run_policy=False)) as writer:
        before = writer.start("You help.", model="gpt-4o-mini")
        writer.append(before, {"role": "user", "content": "hello"})
        gap = _rolled_back_insert(writer)
        after = writer.start("You help.", model="gpt-4o-mini")
        writer.append(after, {"role": "user", "content": "again"})
        committed = writer.recorder.max_committed_notification_id()  # type: ignore[attr-defined]
        assert committed is not None and committed > gap

        with Ledger.open(settings=settings(postgres_url)) as fresh:  # the policy follows the log
            assert fresh.recorder.max_notification_id() == committed
            assert set(fresh.conversation_ids()) == {before, after}
            started = time.monotonic()
            idle = fresh.wait_idle(STALL)
            waited = time.monotonic() - started
            assert idle and waited < PROMPT, f"wait_idle: {idle} after {waited:.2f} s"

        capsys.readouterr()
        assert main(["list", "--json", "--database", postgres_url]) == 0
        listed = {row["conversation_id"] for row in json.loads(capsys.readouterr().out)}
        assert listed == {str(before), str(after)}
        assert main(["stats", "--json", "--database", postgres_url]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert stats["conversations"] == 2 and stats["messages"] == 2
        # The unrelated transaction was open throughout.
        assert unrelated.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def test_an_open_insert_into_the_event_table_holds_followers_and_the_ids_below_it_are_read(
    postgres_url: str,
) -> None:
    # Both ledgers open first: opening one creates its tables if missing, which waits
    # for the table lock an open insert holds.
    with Ledger.open(settings=settings(postgres_url, run_policy=False)) as writer, \
            Ledger.open(settings=settings(postgres_url)) as reader:
        first = writer.start("You help.", model="gpt-4o-mini")
        below = writer.recorder.max_committed_notification_id()  # type: ignore[attr-defined]
        in_flight: Any = psycopg.connect(SERVER)
        try:
            drawn = _insert(in_flight, _table(writer))
            second = writer.start("You help.", model="gpt-4o-mini")
            # A reader that has seen nothing yet: ids below the first gap are final, the
            # open insert's id is not.
            fresh = PostgresConversationRecorder(reader.recorder.datastore, events_table_name="contextledger_events")  # type: ignore[attr-defined]
            assert fresh.max_notification_id() == below == drawn - 1
            assert reader.recorder.max_notification_id() == below
            assert not reader.wait_idle(1.0)  # the old safety: the open insert may still commit
            assert [row.id for row in ConversationIndex(reader).rows()] == [str(second), str(first)]
            reason = waiting_for(reader, [])
            assert f"final through notification {drawn - 1} of {drawn + 1} committed" in reason
            pid = in_flight.info.backend_pid
            assert f"1 open transaction writing to the event table (server pid {pid})" in reason
            in_flight.commit()
            started = time.monotonic()
            assert reader.wait_idle(STALL)
            assert time.monotonic() - started < PROMPT
            assert fresh.max_notification_id() == drawn + 1
            assert reader.recorder.max_notification_id() == drawn + 1
        finally:
            in_flight.close()


def test_worker_once_that_gives_up_names_the_open_insert_it_waits_for(postgres_url: str) -> None:
    # The worker's own loop on a ledger opened before the insert (see above).
    with Ledger.open(settings=settings(postgres_url, run_policy=False)) as ledger:
        ledger.start("You help.", model="gpt-4o-mini")
        in_flight: Any = psycopg.connect(SERVER)
        try:
            drawn = _insert(in_flight, _table(ledger))
            ledger.start("You help.", model="gpt-4o-mini")
            args = argparse.Namespace(database=postgres_url, shard=None, follow_store=None, once=True, timeout=1.0)
            with pytest.raises(Failure) as failed:
                worker._follow(ledger, args, threading.Event())
            pid = in_flight.info.backend_pid
        finally:
            in_flight.close()
    said = str(failed.value)
    assert said.startswith("not idle after 1 s: the log is final through notification "
                           f"{drawn - 1} of {drawn + 1} committed, held by 1 open transaction "
                           f"writing to the event table (server pid {pid})"), said
