"""Stores on two PostgreSQL servers (docs/scale.md), both the test's own
(tests/support/own_postgres.py), the placements on the first: a conversation's events
are on its server only; with the second server stopped, calls for its conversations
fail with ``StoreError`` within the documented bound (docs/operations.md) while the
first server's conversations carry on; once it is back, everything resumes and
nothing acknowledged is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from uuid import UUID

import psycopg
import pytest

from contextledger.application import Ledger, Settings
from contextledger.application.storage.sharding import home_store
from contextledger.domain.values.errors import StoreError
from tests.support.own_postgres import OwnPostgres, postgres_binaries

pytestmark = [pytest.mark.postgres]

CONNECT_TIMEOUT = 2.0
WRITE_DEADLINE = 3.0
#: docs/operations.md: a call ends within connect_timeout + write_deadline + 2 s.
BOUND = CONNECT_TIMEOUT + WRITE_DEADLINE + 2.0


@pytest.fixture
def two_servers() -> Iterator[tuple[OwnPostgres, OwnPostgres]]:
    if postgres_binaries() is None:
        pytest.fail("no PostgreSQL binaries under /usr/lib/postgresql to start servers of the test's own")
    first, second = OwnPostgres(), OwnPostgres()
    try:
        first.start()
        second.start()
        yield first, second
    finally:
        second.close()
        first.close()


def _settings(urls: tuple[str, str]) -> Settings:
    return Settings(
        database_url=urls[0],
        stores=urls,
        run_policy=False,
        poll_interval=0.05,
        connect_timeout=CONNECT_TIMEOUT,
        write_deadline=WRITE_DEADLINE,
        statement_timeout=10,
        retry_base_seconds=0.05,
        retry_max_seconds=1,
    )


def _started(ledger: Ledger, each: int) -> dict[int, list[UUID]]:
    """Conversations started until each store is the home of ``each`` of them."""
    homes: dict[int, list[UUID]] = {0: [], 1: []}
    while min(len(v) for v in homes.values()) < each:
        cid = ledger.start("You answer questions.")
        homes[home_store(cid, 2)].append(cid)
    return homes


def _events_of(url: str, cids: list[UUID]) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM contextledger_events WHERE originator_id = ANY(%s)", (cids,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_one_server_stopped_fails_its_conversations_typed_and_spares_the_other(
    two_servers: tuple[OwnPostgres, OwnPostgres],
) -> None:
    first, second = two_servers
    urls = (first.url, second.url)
    with Ledger.open(settings=_settings(urls)) as ledger:
        homes = _started(ledger, 2)
        acknowledged: dict[UUID, list[str]] = {cid: [] for cids in homes.values() for cid in cids}

        def append(cid: UUID, text: str) -> None:
            ledger.append(cid, {"role": "user", "content": text})
            acknowledged[cid].append(text)

        for cid in acknowledged:
            append(cid, "before")
        # Each conversation's events are on its own server only.
        for index, url in enumerate(urls):
            assert _events_of(url, homes[index]) > 0
            assert _events_of(url, homes[1 - index]) == 0

        second.stop()
        failures: list[tuple[str, float, BaseException]] = []
        stop = threading.Event()

        def on_the_stopped_server(cid: UUID, what: str) -> None:
            # Each conversation of the stopped server and each kind of call in a thread
            # of its own, all at once: each call waits out connect_timeout, one after
            # another they would keep the test waiting that long four times a round.
            n = 0
            while n == 0 or not stop.is_set():
                n += 1
                call: Callable[[], object]
                if what == "append":
                    call = partial(append, cid, f"during {n}")
                else:
                    call = partial(ledger.context, cid)
                started = time.monotonic()
                try:
                    call()
                except Exception as exc:
                    failures.append((what, time.monotonic() - started, exc))
                else:
                    raise AssertionError(f"{what} of a conversation on the stopped server succeeded")

        blocked = [
            threading.Thread(target=on_the_stopped_server, args=(cid, what))
            for cid in homes[1]
            for what in ("append", "context")
        ]
        for thread in blocked:
            thread.start()
        try:
            served = 0
            for n in range(20):
                for cid in homes[0]:
                    append(cid, f"during {n}")
                    assert ledger.context(cid)[-1]["content"] == f"during {n}"
                    served += 1
        finally:
            stop.set()
            for thread in blocked:
                thread.join(60)
        assert served == 20 * len(homes[0])
        assert failures, "no call reached the stopped server"
        print(
            f"served {served} calls on the first server during the outage; {len(failures)} calls to the "
            f"stopped one failed, longest {max(f[1] for f in failures):.2f} s (bound {BOUND:.1f} s)"
        )
        wrong = [(what, repr(exc)[:160]) for what, _, exc in failures if not isinstance(exc, StoreError)]
        assert not wrong, wrong
        slow = [(what, round(seconds, 2)) for what, seconds, _ in failures if seconds > BOUND]
        assert not slow, slow

        second.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                for cid in homes[1]:
                    append(cid, "after")
                break
            except StoreError:
                assert time.monotonic() < deadline, "the second server's conversations did not resume"
                time.sleep(0.2)
        for cid in homes[0]:
            append(cid, "after")
        for cid, texts in acknowledged.items():
            contents = [e.message["content"] for e in ledger.transcript(cid)]
            assert [t for t in texts if t not in contents] == []
            assert len(contents) == len(set(contents))
        assert ledger.verify().ok
