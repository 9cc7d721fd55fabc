"""Close a ledger while calls are in flight, round after round (run with ``python -m``).

    python -m tests.support.close_under_load URL[,URL...] ROUNDS [threads,async]

Each round opens a ledger on URL (several: a sharded ledger) with its summarization
policy running, starts calls -- 8 threads (``threads``) or 48 asyncio tasks through
``AsyncLedger`` (``async``) appending and reading -- and closes it while they run;
the rounds take the modes in turn, ROUNDS of each. Every call must either succeed or
raise ``LedgerClosedError``. Every call ends refused (each loops until it is), so the
refusals say little about the race: what does is the calls *in flight*, started before
``close`` was called and returned after it, which close must let finish. The rounds
with some are counted.

Every append that returned a position must be in the log when the store is opened
again, the log gap-free and its digests intact. The store is opened again once, after
the last round, for the conversations of every round (each round starts its own): the
earlier rounds' logs are checked after every later round's open and close too. An
in-memory store ends with its ledger: each round's log is read from the closed ledger.

Prints one JSON line (rounds, calls, refusals, calls in flight, rounds with calls in
flight, per mode; problems) and exits 1 on any problem; a crash shows as the process
dying (a negative return code).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from contextledger import AsyncLedger, Ledger, LedgerClosedError, ReductionPolicy, Settings
from contextledger.domain.events import MessageAppended

POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2)
CONVERSATIONS = 4
READS = ("context", "transcript", "totals")


class Tally:
    """What the calls of one round did (shared by its threads and tasks)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.appended: dict[UUID, set[int]] = {}
        self.calls = 0
        self.refused = 0
        self.in_flight = 0
        self.closing: float | None = None
        self.problems: list[str] = []

    def close_called(self) -> None:
        """Note the time, just before ``close`` is called."""
        self.closing = time.monotonic()

    def _returned(self, started: float) -> None:
        self.calls += 1
        if self.closing is not None and started < self.closing:
            self.in_flight += 1  # called before close, returned after

    def appended_at(self, cid: UUID, position: int, started: float) -> None:
        with self.lock:
            self.appended.setdefault(cid, set()).add(position)
            self._returned(started)

    def read(self, started: float) -> None:
        with self.lock:
            self._returned(started)

    def ended(self, exc: BaseException) -> None:
        """A call raised ``exc``: refused by the closed ledger, or a problem."""
        with self.lock:
            if isinstance(exc, LedgerClosedError):
                self.refused += 1
            else:
                self.problems.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


def _message(cid: UUID, index: int) -> dict[str, str]:
    return {"role": "user", "content": f"message {index} of {cid}"}


def _stores(url: str) -> str | list[str]:
    """One URL, or the URLs of a sharded ledger (separated by commas)."""
    urls = url.split(",")
    return urls if len(urls) > 1 else url


def threads_round(url: str, tally: Tally) -> tuple[Ledger, list[UUID]]:
    ledger = Ledger.open(_stores(url), settings=Settings(poll_interval=0.01))
    cids = [ledger.start("You close under load.", policy=POLICY) for _ in range(CONVERSATIONS)]
    go = threading.Event()

    def work(n: int) -> None:
        go.wait()
        cid = cids[n % CONVERSATIONS]
        for index in range(100_000):
            try:
                started = time.monotonic()
                tally.appended_at(cid, ledger.append(cid, _message(cid, index)), started)
                started = time.monotonic()
                getattr(ledger, random.choice(READS))(cid)
                tally.read(started)
            except BaseException as exc:  # sorted by Tally.ended
                tally.ended(exc)
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    go.set()
    time.sleep(random.uniform(0.0, 0.05))
    tally.close_called()
    ledger.close()
    for thread in threads:
        thread.join()
    ledger.close()  # closing twice is harmless
    return ledger, cids


async def _async_round(url: str, tally: Tally) -> tuple[Ledger, list[UUID]]:
    ledger = AsyncLedger.open(_stores(url), settings=Settings(poll_interval=0.01))
    await ledger.start_up()
    cids = [await ledger.start("You close under load.", policy=POLICY) for _ in range(CONVERSATIONS)]

    async def work(n: int) -> None:
        cid = cids[n % CONVERSATIONS]
        for index in range(100_000):
            try:
                started = time.monotonic()
                tally.appended_at(cid, await ledger.append(cid, _message(cid, index)), started)
                started = time.monotonic()
                read: Callable[[UUID], Awaitable[Any]] = getattr(ledger, random.choice(READS))
                await read(cid)
                tally.read(started)
            except BaseException as exc:  # sorted by Tally.ended
                tally.ended(exc)
                return

    tasks = [asyncio.create_task(work(n)) for n in range(48)]
    await asyncio.sleep(random.uniform(0.0, 0.05))
    tally.close_called()
    await ledger.aclose()
    await asyncio.gather(*tasks)
    await ledger.aclose()  # closing twice is harmless
    return ledger.sync, cids


def async_round(url: str, tally: Tally) -> tuple[Ledger, list[UUID]]:
    return asyncio.run(_async_round(url, tally))


ROUNDS = {"threads": threads_round, "async": async_round}


def check_log(ledger: Ledger, cids: list[UUID], tally: Tally, *, verify: bool) -> None:
    """Every position an append of the round returned is in ``ledger``'s store; the log
    is gap-free and (``verify``: a ledger opened again) its digests intact."""
    for cid in cids:
        events = ledger.store.events(cid)
        positions = [e.position for e in events if isinstance(e, MessageAppended)]
        if positions != list(range(len(positions))):
            tally.problems.append(f"{cid}: positions not gap-free: {positions}")
        lost = tally.appended.get(cid, set()) - set(positions)
        if lost:
            tally.problems.append(f"{cid}: appends lost: {sorted(lost)}")
        if verify and (problems := ledger.verify(cid).problems):
            tally.problems.append(f"{cid}: verify: {problems}")


def run(url: str, rounds: int, modes: list[str]) -> dict[str, Any]:
    """``rounds`` rounds of each mode, in turn; the report."""
    totals: dict[str, Any] = {
        mode: {"rounds": 0, "calls": 0, "refused": 0, "in_flight": 0, "rounds_in_flight": 0} for mode in modes
    }
    problems: list[str] = []
    kept: list[tuple[list[UUID], Tally]] = []  # checked after the last round
    for mode in modes * rounds:
        tally = Tally()
        ledger, cids = ROUNDS[mode](url, tally)
        if url.startswith("memory:"):
            check_log(ledger, cids, tally, verify=False)
        else:
            kept.append((cids, tally))
        mode_totals = totals[mode]
        mode_totals["rounds"] += 1
        mode_totals["calls"] += tally.calls
        mode_totals["refused"] += tally.refused
        mode_totals["in_flight"] += tally.in_flight
        mode_totals["rounds_in_flight"] += tally.in_flight > 0
        problems += tally.problems
    if kept:
        with Ledger.open(_stores(url), run_policy=False) as reopened:
            for cids, tally in kept:
                tally.problems.clear()
                check_log(reopened, cids, tally, verify=True)
                problems += tally.problems
    totals["problems"] = problems
    return totals


def main() -> None:
    url, rounds = sys.argv[1], int(sys.argv[2])
    modes = sys.argv[3].split(",") if len(sys.argv) > 3 else list(ROUNDS)
    report = run(url, rounds, modes)
    print(json.dumps(report))
    sys.exit(1 if report["problems"] else 0)


if __name__ == "__main__":
    main()
