"""The followers' read of the log's head costs the same whatever the log's size.

It runs on every policy and read-model step. Prepared, its cached generic plan was made
once, for the table as it was then: a small table's plan scans it sequentially, and
that plan stayed in use as the table grew (a count of the ids above the mark read the
whole table twice on every step, 0.16 ms at 6 events and 5 ms at 30,000). The store
now plans these reads for the table as it is; this test grows one from a few rows to
50,000 on one connection without ``ANALYZE`` and looks at the plans that connection
would use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL

from contextledger.application import Ledger
from contextledger.infrastructure.persistence.pgreads import FinalMark
from tests.conftest import POSTGRES_URL

pytestmark = pytest.mark.postgres

GROWN = 50_000


@pytest.fixture
def small_store(postgres_url: str) -> Iterator[tuple[psycopg.Connection[Any], str, str]]:
    """An admin connection, the schema and the event table of a store holding 6 events,
    vacuumed and analyzed while small (as autovacuum leaves a young store), with
    autovacuum off for the table so nothing replans behind the test's back."""
    ledger = Ledger.open(postgres_url, run_policy=False)
    try:
        recorder: Any = ledger.recorder
        schema, table = recorder.datastore.schema, recorder.events_table_name
    finally:
        ledger.close()
    admin = psycopg.connect(POSTGRES_URL.split("?")[0], autocommit=True)
    try:
        qualified = f'"{schema}"."{table}"'
        admin.execute(f"ALTER TABLE {qualified} SET (autovacuum_enabled = false)")
        _grow(admin, qualified, 6)
        admin.execute(f"VACUUM ANALYZE {qualified}")
        yield admin, schema, table
    finally:
        admin.close()


def _grow(admin: psycopg.Connection[Any], qualified: str, rows: int) -> None:
    admin.execute(
        f"INSERT INTO {qualified} (originator_id, originator_version, topic, state) "
        "SELECT gen_random_uuid(), 1, 'not.a.conversation', '\\x7b7d'::bytea FROM generate_series(1, %s)",
        (rows,),
    )


def _plan(conn: Any, statement: Any, params: Any = None) -> str:
    return "\n".join(row["QUERY PLAN"] for row in conn.execute(statement, params).fetchall())


def test_the_head_reads_scan_the_index_after_the_log_grows_from_small(
    small_store: tuple[psycopg.Connection[Any], str, str],
) -> None:
    admin, schema, table = small_store
    server = urlsplit(POSTGRES_URL)
    datastore = PostgresDatastore(
        dbname=server.path.lstrip("/"),
        host=server.hostname or "127.0.0.1",
        port=server.port or 5432,
        user=server.username or "postgres",
        password=server.password or "",
        schema=schema,
        pool_size=1,  # one connection: every read below runs on it
    )
    try:
        mark = FinalMark(datastore, table)
        for _ in range(10):  # past the server's five custom plans of a prepared statement
            assert mark.top() == 6
            assert mark.committed_top() == 6
        _grow(admin, f'"{schema}"."{table}"', GROWN)
        assert mark.top() == 6 + GROWN
        assert mark.committed_top() == 6 + GROWN

        with datastore.get_connection() as conn:
            # Whatever this connection keeps prepared on the event table is planned
            # for the table as it is now, not as it was.
            prepared = conn.execute(
                "SELECT name, statement, cardinality(parameter_types) AS n FROM pg_prepared_statements "
                "WHERE statement LIKE %s",
                (f"%{table}%",),
            ).fetchall()
            for row in prepared:
                args = "(" + ", ".join(["5"] * row["n"]) + ")" if row["n"] else ""
                plan = _plan(conn, f"EXPLAIN EXECUTE {row['name']}{args}")
                assert "Seq Scan" not in plan, f"{row['statement']}\n{plan}"
            # The reads themselves, as this connection plans them with the follower's
            # values: the index, never the whole table.
            settled = mark.settled
            reads = [
                (mark.top_statement, {"asked": settled - 3}),
                (mark.top_statement, {"asked": 0}),
                (mark.committed_statement, None),
                (mark.gap_statement, {"asked": settled - 3, "top": settled, "modes": ["RowExclusiveLock"]}),
            ]
            for statement, params in reads:
                plan = _plan(conn, SQL("EXPLAIN ") + statement, params)
                assert f"Seq Scan on {table}" not in plan, plan
                assert "Index" in plan, plan
    finally:
        datastore.close()


def test_a_gap_past_the_mark_still_holds_the_mark_at_the_run_end(
    small_store: tuple[psycopg.Connection[Any], str, str],
) -> None:
    """The gap read is bounded by the top it was asked about: the run of ids above the
    mark still ends where the first id is missing."""
    admin, schema, table = small_store
    qualified = f'"{schema}"."{table}"'
    _grow(admin, qualified, 4)  # ids 7..10
    admin.execute(f"DELETE FROM {qualified} WHERE notification_id = 8")  # a rolled-back id
    server = urlsplit(POSTGRES_URL)
    datastore = PostgresDatastore(
        dbname=server.path.lstrip("/"),
        host=server.hostname or "127.0.0.1",
        port=server.port or 5432,
        user=server.username or "postgres",
        password=server.password or "",
        schema=schema,
        pool_size=1,
    )
    try:
        mark = FinalMark(datastore, table)
        mark.settled = 6
        # Another session holds a write lock on the table: the gap is not final yet.
        with psycopg.connect(POSTGRES_URL.split("?")[0]) as writer:
            writer.execute(f"LOCK TABLE {qualified} IN ROW EXCLUSIVE MODE")
            assert mark.top() == 7
            assert mark.settled == 7
        assert mark.top() == 10  # the writer ended: the gap is final
    finally:
        datastore.close()
