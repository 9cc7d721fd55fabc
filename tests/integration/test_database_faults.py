"""The database goes away under a running ledger: nothing is lost, work resumes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError

from contextledger.application import Ledger, Settings
from contextledger.domain import StoreError


def terminate_backends(admin_url: str, ledger: Ledger) -> int:
    """Kill the server side of every connection (the pooled one, the one saves keep),
    as a server restart does."""
    pool: Any = ledger.factory.datastore.pool  # type: ignore[attr-defined]
    pids = []
    with pool.connection() as conn:
        pids.append(conn.info.backend_pid)
    writer = ledger.recorder._writer  # type: ignore[attr-defined]
    pids.append(writer.info.backend_pid)
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
        assert terminate_backends(postgres_url.split("?")[0], ledger) == 2
        ledger.append(cid, {"role": "assistant", "content": "after"})
        assert [e.message["content"] for e in ledger.transcript(cid)] == ["before", "after"]


def test_an_unreachable_database_is_a_store_error_with_a_clear_message() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=1"
    with pytest.raises(StoreError, match="event store"), Ledger.open(url, run_policy=False) as ledger:
        ledger.start("s")


class LostAckLedger(Ledger):
    """Commits, then reports a conflict: what a retried insert sees when the answer
    to the first, successful one was lost with its connection."""

    lose_next = False

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        if self.lose_next:
            self.lose_next = False
            raise IntegrityError("duplicate key value violates unique constraint")
        return recordings


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_commit_whose_answer_was_lost_is_not_appended_twice(
    store: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    url = request.getfixturevalue("postgres_url") if store == "postgres" else f"sqlite:///{tmp_path / 'l.db'}"
    with LostAckLedger(Settings(database_url=url, run_policy=False)) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "first"})
        ledger.lose_next = True
        assert ledger.append(cid, {"role": "assistant", "content": "second"}) == 1
        assert ledger.append(cid, {"role": "user", "content": "third"}) == 2
        assert [e.message["content"] for e in ledger.transcript(cid)] == ["first", "second", "third"]
