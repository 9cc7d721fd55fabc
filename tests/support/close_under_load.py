"""Close a ledger while calls are in flight, round after round (run with ``python -m``).

    python -m tests.support.close_under_load URL[,URL...] ROUNDS threads|async

Each round opens a ledger on URL (several: a sharded ledger) with its summarization
policy running, starts
calls -- 8 threads (``threads``) or 48 asyncio tasks through ``AsyncLedger``
(``async``) appending and reading -- and closes it while they run. Every call must
either succeed or raise ``LedgerClosedError``; every append that returned a position
must be in the log when the store is opened again, the log gap-free and its digests
intact. Prints one JSON line (rounds, calls, refusals, problems) and exits 1 on any
problem; a crash shows as the process dying (a negative return code).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
import time
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
        self.problems: list[str] = []

    def appended_at(self, cid: UUID, position: int) -> None:
        with self.lock:
            self.appended.setdefault(cid, set()).add(position)
            self.calls += 1

    def read(self) -> None:
        with self.lock:
            self.calls += 1

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
                tally.appended_at(cid, ledger.append(cid, _message(cid, index)))
                getattr(ledger, random.choice(READS))(cid)
                tally.read()
            except BaseException as exc:  # sorted by Tally.ended
                tally.ended(exc)
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    go.set()
    time.sleep(random.uniform(0.0, 0.05))
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
                tally.appended_at(cid, await ledger.append(cid, _message(cid, index)))
                await getattr(ledger, random.choice(READS))(cid)
                tally.read()
            except BaseException as exc:  # sorted by Tally.ended
                tally.ended(exc)
                return

    tasks = [asyncio.create_task(work(n)) for n in range(48)]
    await asyncio.sleep(random.uniform(0.0, 0.05))
    await ledger.aclose()
    await asyncio.gather(*tasks)
    await ledger.aclose()  # closing twice is harmless
    return ledger.sync, cids


def async_round(url: str, tally: Tally) -> tuple[Ledger, list[UUID]]:
    return asyncio.run(_async_round(url, tally))


def check_log(url: str, closed: Ledger, cids: list[UUID], tally: Tally) -> None:
    """Every position an append returned is stored; the log is gap-free and intact
    (an in-memory store ends with its ledger: its events are read from the closed one)."""
    reopened = None if url.startswith("memory:") else Ledger.open(_stores(url), run_policy=False)
    try:
        for cid in cids:
            events = (reopened or closed).store.events(cid)
            positions = [e.position for e in events if isinstance(e, MessageAppended)]
            if positions != list(range(len(positions))):
                tally.problems.append(f"{cid}: positions not gap-free: {positions}")
            lost = tally.appended.get(cid, set()) - set(positions)
            if lost:
                tally.problems.append(f"{cid}: appends lost: {sorted(lost)}")
            if reopened is not None and (problems := reopened.verify(cid).problems):
                tally.problems.append(f"{cid}: verify: {problems}")
    finally:
        if reopened is not None:
            reopened.close()


def main() -> None:
    url, rounds, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    run_round = threads_round if mode == "threads" else async_round
    totals = {"rounds": 0, "calls": 0, "refused": 0, "problems": []}
    for _ in range(rounds):
        tally = Tally()
        ledger, cids = run_round(url, tally)
        check_log(url, ledger, cids, tally)
        totals["rounds"] += 1  # type: ignore[operator]
        totals["calls"] += tally.calls  # type: ignore[operator]
        totals["refused"] += tally.refused  # type: ignore[operator]
        totals["problems"] += tally.problems  # type: ignore[operator]
    print(json.dumps(totals))
    sys.exit(1 if totals["problems"] else 0)


if __name__ == "__main__":
    main()
