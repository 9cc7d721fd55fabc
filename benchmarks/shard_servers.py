"""Stores on one and on two PostgreSQL servers, and one server's outage as the other's
conversations see it.

    .venv/bin/python benchmarks/shard_servers.py [--runs 3] [--seconds 4]

Starts two servers of its own (tests/support/own_postgres.py). 4 writer threads in one
process append, one message per call, to conversations of their own through one
ledger: over one store (the first server), then over two stores (one per server,
the conversations spread evenly), rounds alternating, medians reported. Then the
second server is stopped: the latency of appends to the first server's conversations
is taken before and during the outage, while a thread keeps calling a conversation
of the stopped server (each call failing with ``StoreError``).

Both servers and the writers share this machine's cores: two servers here cannot
add cores, so the second only shows what a second server's own WAL and processes
change. Writes only its own section of docs/benchmarks.md (between the
``shard_servers`` markers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from sections import write_section  # benchmarks/sections.py (run as a script)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contextledger.application import Ledger, Settings  # noqa: E402
from contextledger.application.storage.sharding import home_store  # noqa: E402
from contextledger.domain.values.errors import StoreError  # noqa: E402
from tests.support.own_postgres import OwnPostgres  # noqa: E402

WRITERS = 4


def _settings(urls: tuple[str, ...]) -> Settings:
    return Settings(
        database_url=urls[0],
        stores=urls if len(urls) > 1 else (),
        run_policy=False,
        connect_timeout=2,
        write_deadline=3,
        statement_timeout=10,
    )


def _conversations(ledger: Ledger, stores: int, each: int) -> dict[int, list[UUID]]:
    homes: dict[int, list[UUID]] = {i: [] for i in range(stores)}
    while min(len(v) for v in homes.values()) < each:
        cid = ledger.start("You answer questions.")
        if len(homes[home_store(cid, stores)]) < each:
            homes[home_store(cid, stores)].append(cid)
    return homes


def _throughput(ledger: Ledger, cids: list[UUID], seconds: float) -> float:
    stop = threading.Event()
    counts = [0] * len(cids)

    def write(k: int) -> None:
        while not stop.is_set():
            ledger.append(cids[k], {"role": "user", "content": f"message {counts[k]}"})
            counts[k] += 1

    threads = [threading.Thread(target=write, args=(k,)) for k in range(len(cids))]
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    return sum(counts) / (time.monotonic() - started)


def _latencies(ledger: Ledger, cids: list[UUID], calls: int) -> list[float]:
    taken = []
    for n in range(calls):
        cid = cids[n % len(cids)]
        started = time.monotonic()
        ledger.append(cid, {"role": "user", "content": f"timed {n}"})
        taken.append(time.monotonic() - started)
    return taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--no-write", action="store_true", help="print the section only")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    first, second = OwnPostgres(), OwnPostgres()
    rates: dict[int, list[float]] = {1: [], 2: []}
    try:
        first.start()
        second.start()
        one = (first.create_database("one"),)
        two = (first.create_database("two"), second.create_database("two"))
        with Ledger.open(settings=_settings(one)) as single, Ledger.open(settings=_settings(two)) as double:
            single_cids = _conversations(single, 1, WRITERS)[0]
            spread = _conversations(double, 2, WRITERS // 2)
            double_cids = spread[0] + spread[1]
            for _ in range(args.runs):
                rates[1].append(_throughput(single, single_cids, args.seconds))
                rates[2].append(_throughput(double, double_cids, args.seconds))
            before = _latencies(double, spread[0], args.calls)
            second.stop()
            stop = threading.Event()
            failed = [0]

            def knock() -> None:
                while not stop.is_set():
                    try:
                        double.append(spread[1][0], {"role": "user", "content": "during the outage"})
                    except StoreError:
                        failed[0] += 1

            knocking = threading.Thread(target=knock)
            knocking.start()
            try:
                during = _latencies(double, spread[0], args.calls)
            finally:
                stop.set()
                knocking.join(60)
            second.start()
    finally:
        second.close()
        first.close()

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    r1, r2 = statistics.median(rates[1]), statistics.median(rates[2])
    lines = [
        "## Stores on two PostgreSQL servers, and one server's outage",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `benchmarks/shard_servers.py --runs {args.runs} "
        f"--seconds {args.seconds:g}` on this machine ({os.cpu_count()} cores, load average {load} at the "
        "start): two servers of their own on one machine, 4 writer threads in one process, one message "
        "per append. Both servers and the writers share the machine's cores: a second server here adds "
        "its own WAL and processes, not cores.",
        "",
        "| stores | appends/s (median of the rounds) |",
        "|---|---|",
        f"| 1 (one server) | {r1:,.0f} |",
        f"| 2 (one per server) | {r2:,.0f} ({r2 / r1:.2f}x) |",
        "",
        f"Appends to the first server's conversations, {args.calls} one after the other, before and while "
        f"the second server was stopped (another thread calling one of its conversations meanwhile: "
        f"{failed[0]} calls, each failing with `StoreError`):",
        "",
        "| | median | p90 |",
        "|---|---|---|",
        f"| before | {ms(before, 0.5):.2f} ms | {ms(before, 0.9):.2f} ms |",
        f"| during the outage | {ms(during, 0.5):.2f} ms ({ms(during, 0.5) / ms(before, 0.5):.2f}x) "
        f"| {ms(during, 0.9):.2f} ms |",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("shard_servers", text.split("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
