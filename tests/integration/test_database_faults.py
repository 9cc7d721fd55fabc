"""The database goes away under a running ledger: nothing is lost, work resumes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from contextledger.application import Ledger
from contextledger.domain import StoreError


def terminate_backends(admin_url: str, ledger: Ledger) -> int:
    """Kill the server side of every pooled connection, as a server restart does."""
    pool: Any = ledger.factory.datastore.pool  # type: ignore[attr-defined]
    pids = []
    with pool.connection() as conn:
        pids.append(conn.info.backend_pid)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(pids)


@pytest.mark.postgres
def test_a_dropped_database_connection_is_replaced_and_nothing_is_lost(postgres_url: str) -> None:
    url = postgres_url + "&pool_size=1&max_overflow=0"
    with Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "before"})
        assert terminate_backends(postgres_url.split("?")[0], ledger) == 1
        ledger.append(cid, {"role": "assistant", "content": "after"})
        assert [e.message["content"] for e in ledger.transcript(cid)] == ["before", "after"]


def test_an_unreachable_database_is_a_store_error_with_a_clear_message() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=1"
    with pytest.raises(StoreError, match="event store"), Ledger.open(url, run_policy=False) as ledger:
        ledger.start("s")
