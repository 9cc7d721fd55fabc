"""A PostgreSQL outage is bounded: while the server is down, every call of the ledger
returns or raises ``StoreError`` (naming the outage) within ``connect_timeout +
write_deadline`` and the documented slack (docs/operations.md), never a contention
error; once the server is back, calls succeed and nothing acknowledged is lost.

The server is a test's own (tests/support/own_postgres.py), stopped for real under
writer and reader threads; never the shared one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

import pytest

from contextledger.application import Ledger, Settings
from contextledger.domain.values.errors import StoreError
from tests.support.own_postgres import OwnPostgres, postgres_binaries

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        postgres_binaries() is None, reason="no PostgreSQL binaries to start a server of our own"
    ),
]

CONNECT_TIMEOUT = 2.0
WRITE_DEADLINE = 3.0
#: docs/operations.md: a call ends within connect_timeout + write_deadline + 2 s.
SLACK = 2.0
BOUND = CONNECT_TIMEOUT + WRITE_DEADLINE + SLACK
#: How long the server stays down: longer than BOUND with room to spare, so that a
#: call that waited for the server instead of failing within the bound takes more
#: than BOUND and fails the test; and at least two connect_timeout + write_deadline
#: rounds, so that each writer fails, retries and fails again while the server is down.
DOWN = max(BOUND + 5.0, 2 * (CONNECT_TIMEOUT + WRITE_DEADLINE))
#: Every kind of call the load makes.
KINDS = {"append", "context", "context at version 1", "transcript"}


def _until(condition: Any, failure: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.02)


@dataclass(frozen=True)
class Call:
    what: str
    started: float
    seconds: float
    error: BaseException | None


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    server = OwnPostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        poll_interval=0.05,
        connect_timeout=CONNECT_TIMEOUT,
        write_deadline=WRITE_DEADLINE,
        statement_timeout=10,
        retry_base_seconds=0.05,
        retry_max_seconds=1,
        snapshot_interval=4,
    )


class Load:
    """Threads calling the ledger in a loop, each call timed and its outcome kept."""

    def __init__(self, ledger: Ledger, cids: list[UUID]) -> None:
        self.ledger = ledger
        self.cids = cids
        self.calls: list[Call] = []
        self.acknowledged: dict[UUID, list[str]] = {cid: [] for cid in cids}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _timed(self, what: str, call: Any) -> Any:
        started = time.monotonic()
        try:
            result = call()
        except Exception as exc:
            self._note(Call(what, started, time.monotonic() - started, exc))
            return None
        self._note(Call(what, started, time.monotonic() - started, None))
        return result

    def _note(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def writer(self, k: int, cid: UUID) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            text = f"writer {k} message {n}"
            done = self._timed(
                "append",
                partial(
                    self.ledger.append, cid, {"role": "user", "content": text}, client_message_id=f"w{k}-{n}"
                ),
            )
            if done is not None:
                with self._lock:
                    self.acknowledged[cid].append(text)
            time.sleep(0.05)

    def reader(self, k: int) -> None:
        while not self._stop.is_set():
            cid = self.cids[k % len(self.cids)]
            self._timed("context", partial(self.ledger.context, cid))
            self._timed("context at version 1", partial(self.ledger.context, cid, version=1))
            self._timed("transcript", partial(self.ledger.transcript, cid))
            time.sleep(0.05)

    def running(self) -> bool:
        """Whether each writer has had an append acknowledged and each kind of call has
        succeeded."""
        with self._lock:
            written = {text.split(" message ")[0] for texts in self.acknowledged.values() for text in texts}
            succeeded = {c.what for c in self.calls if c.error is None}
        return written >= {f"writer {k}" for k in range(4)} and succeeded >= KINDS

    def start(self) -> None:
        # Three writers share the first conversation (they queue for it), one has its own.
        plan = [(0, self.cids[0]), (1, self.cids[0]), (2, self.cids[0]), (3, self.cids[1])]
        self._threads = [threading.Thread(target=self.writer, args=plan_k) for plan_k in plan]
        self._threads += [threading.Thread(target=self.reader, args=(k,)) for k in range(2)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)
        assert not any(t.is_alive() for t in self._threads)


def test_calls_during_an_outage_end_within_the_bound_with_a_store_error(own_postgres: OwnPostgres) -> None:
    with Ledger.open(settings=_settings(own_postgres.url)) as ledger:
        cids = [ledger.start("You are a booking assistant.", model="gpt-4o-mini") for _ in range(2)]
        for cid in cids:
            ledger.append(cid, {"role": "user", "content": "first"})
        load = Load(ledger, cids)
        load.start()
        try:
            # The stop comes once every thread is under way: each writer has an append
            # acknowledged and each kind of read has succeeded.
            _until(lambda: load.running(), "the load did not get going")
            own_postgres.stop()
            down_at = time.monotonic()
            time.sleep(DOWN)
            own_postgres.start()
            up_at = time.monotonic()
            # Back: every kind of call succeeds again (the pool reconnects in the background).
            deadline = up_at + 30
            while time.monotonic() < deadline:
                time.sleep(0.1)
                with load._lock:
                    recent = [c for c in load.calls if c.started > up_at + 0.5]
                if {c.what for c in recent if c.error is None} >= KINDS:
                    break
        finally:
            load.stop()
        assert ledger.wait_idle(30)

        during = [c for c in load.calls if c.started + c.seconds > down_at and c.started < up_at]
        failures = [c for c in during if c.error is not None]
        longest = max(c.seconds for c in load.calls)
        back = min(
            (c.started + c.seconds - up_at for c in load.calls if c.error is None and c.started > up_at),
            default=-1.0,
        )
        print(
            f"calls {len(load.calls)}, during the outage {len(during)} ({len(failures)} failed), "
            f"longest {longest:.2f} s, bound {BOUND:.1f} s, first success {back:.2f} s after the start"
        )
        assert failures, "the outage was not seen"
        slow = [(c.what, round(c.seconds, 2), repr(c.error)[:120]) for c in load.calls if c.seconds > BOUND]
        assert not slow, slow
        wrong = [
            (c.what, repr(c.error)[:160])
            for c in load.calls
            if c.error is not None and not isinstance(c.error, StoreError)
        ]
        assert not wrong, wrong
        unnamed = [
            repr(c.error)[:160]
            for c in failures
            if c.error is not None
            and getattr(c.error, "cause", None)
            not in ("connection_lost", "server_unreachable", "connect_timeout")
        ]
        assert not unnamed, unnamed
        after = [c for c in load.calls if c.started > up_at + 0.5]
        assert any(c.error is None and c.what == "append" for c in after)

        # Nothing acknowledged is lost: every acknowledged append is in the transcript once.
        for cid in cids:
            contents = [entry.message["content"] for entry in ledger.transcript(cid)]
            missing = [t for t in load.acknowledged[cid] if t not in contents]
            assert not missing, missing
            assert len(contents) == len(set(contents))
