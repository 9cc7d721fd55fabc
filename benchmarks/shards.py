"""Write throughput over K = 1, 2, 4 stores (shards) on one PostgreSQL server.

    .venv/bin/python benchmarks/shards.py [--runs 3] [--seconds 5]

8 writer processes, each appending one message per transaction to its own
conversation through one ``Ledger`` opened over K stores (K schemas of one database,
each with its own event table, sequence and notification log). The conversations
are chosen so that each store gets 8/K writers, as a large population of conversations
spreads evenly over the stores. Runs are interleaved (K = 1, 2, 4, then again) and the
medians of the runs are reported, with the ratio to K = 1 measured in the same run.

Writes only its own section of docs/benchmarks.md (between the ``shards`` markers).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
from sections import write_section  # benchmarks/sections.py (run as a script)

import contextledger as cl
from contextledger.application.storage.sharding import home_store

REPO = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
WRITERS = 8
SHARD_COUNTS = (1, 2, 4)
#: Small pools: 8 processes x 4 stores must stay well under the server's connection limit.
POOL = "pool_size=1&max_overflow=2"


def ids_spread_evenly(stores: int, writers: int) -> list[uuid.UUID]:
    """``writers`` fresh conversation ids, ``writers / stores`` homed in each store."""
    wanted = [w % stores for w in range(writers)]
    found: list[uuid.UUID] = []
    for index in wanted:
        while True:
            cid = uuid.uuid4()
            if home_store(cid, stores) == index:
                found.append(cid)
                break
    return found


def writer(urls: list[str], cid: str, ready: Any, go: Any, seconds: float, out: Any) -> None:
    with cl.Ledger.open(urls, run_policy=False) as ledger:
        conversation = ledger.start("You are a benchmark.", conversation_id=uuid.UUID(cid))
        ledger.append(conversation, {"role": "user", "content": "warm up"})
        ready.release()
        go.wait()
        count = 0
        cpu = time.process_time()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            ledger.append(conversation, {"role": "user", "content": f"message {count} of a benchmark turn"})
            count += 1
        out.put((count, time.process_time() - cpu))


@dataclass(frozen=True)
class Run:
    #: Appends per second of all writers together.
    rate: float
    #: The writers' own CPU time per append (ms): Python, encoding, the client side.
    cpu_ms: float
    #: The writers' CPU time over the window's wall time, as a share of the machine's cores.
    cpu_share: float
    #: Of the writers' server backends busy in a statement, the share waiting for a lock.
    lock_wait: float


def sample_lock_waits(schemas: list[str], stop: threading.Event, into: list[tuple[int, int]]) -> None:
    """Every 20 ms: of the server backends running the writers' statements (their
    SQL names the stores' schemas), how many wait for a lock of any kind."""
    pattern = "|".join(schemas)
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), count(*) "
                "FROM pg_stat_activity WHERE state <> 'idle' AND query ~ %s "
                "AND pid <> pg_backend_pid()",
                (pattern,),
            ).fetchone()
            if row is not None and row[1]:
                into.append((int(row[0]), int(row[1])))
            time.sleep(0.02)


def one_run(stores: int, seconds: float) -> Run:
    """All 8 writers over ``stores`` fresh schemas."""
    admin = psycopg.connect(POSTGRES, autocommit=True)
    schemas = [f"bench_shards_{stores}_{i}_{uuid.uuid4().hex[:8]}" for i in range(stores)]
    for schema in schemas:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    urls = [f"{POSTGRES}?schema={schema}&{POOL}" for schema in schemas]
    try:
        with cl.Ledger.open(urls, run_policy=False):
            pass  # create the tables once, before the writers race to
        ctx = mp.get_context("spawn")
        ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=writer, args=(urls, str(cid), ready, go, seconds, out))
            for cid in ids_spread_evenly(stores, WRITERS)
        ]
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=300):
                raise RuntimeError("a writer did not start")
        sampling = threading.Event()
        samples: list[tuple[int, int]] = []
        sampler = threading.Thread(target=sample_lock_waits, args=(schemas, sampling, samples))
        go.set()
        sampler.start()
        time.sleep(seconds)
        sampling.set()
        sampler.join()
        done = [out.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        appends = sum(n for n, _ in done)
        cpu = sum(c for _, c in done)
        waiting = sum(w for w, _ in samples) / max(1, sum(n for _, n in samples))
        return Run(
            appends / seconds, 1000 * cpu / max(appends, 1), cpu / seconds / (os.cpu_count() or 1), waiting
        )
    finally:
        for schema in schemas:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


def machine() -> str:
    cores = os.cpu_count()
    with psycopg.connect(POSTGRES) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"- machine: {platform.platform()}, {cpu}, {cores} cores\n"
        f"- Python {platform.python_version()}, PostgreSQL {server}, "
        f"eventsourcing {version('eventsourcing')}, psycopg {version('psycopg')}"
    )


def section(results: dict[int, list[Run]], runs: int, seconds: float, command: str, load: str) -> str:
    def med(k: int, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in results[k])

    rows = []
    ratio: dict[int, float] = {}
    for k in SHARD_COUNTS:
        ratio[k] = statistics.median(
            r.rate / b.rate for r, b in zip(results[k], results[1], strict=True)
        )
        rows.append(
            f"| {k} | {med(k, 'rate'):,.0f} | {ratio[k]:.2f} | {med(k, 'cpu_ms'):.2f} | "
            f"{med(k, 'cpu_share'):.0%} | {med(k, 'lock_wait'):.0%} | "
            + ", ".join(f"{r.rate:,.0f}" for r in results[k]) + " |"
        )
    cores = os.cpu_count() or 1
    return "\n".join([
        "## Shards: 8 writers over K = 1, 2, 4 stores (PostgreSQL)",
        "",
        f"Written by `benchmarks/shards.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        machine(),
        f"- load average when it started: {load} (the machine is shared)",
        "",
        f"{WRITER_TEXT} Each run lasts {seconds:g} s; {runs} runs per K, interleaved "
        "(K = 1, 2, 4, then again); the ratio is each run's throughput over the K = 1 run "
        "of the same round; the table shows medians. Writer CPU is the writer processes' "
        f"own CPU time (client side only, not the server's), per append and as a share "
        f"of the machine's {cores} cores over the run. Lock waits are sampled every 20 ms "
        "from `pg_stat_activity`: of the writers' backends inside a statement, the share "
        "waiting for a lock of any kind (saves take no table lock: a row's key, a "
        "sequence or a relation extension are what they can wait for).",
        "",
        "| stores K | appends/s | ratio to K = 1 | writer CPU ms per append "
        "| writer CPU share of the cores | busy backends waiting for a lock | runs (appends/s) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Throughput with two stores is {ratio[2]:.2f}x, with four {ratio[4]:.2f}x the "
        "one-store figure (medians of the per-round ratios). Saves take no table lock, so "
        f"the writers' busy backends seldom wait for a lock ({med(1, 'lock_wait'):.0%} with "
        f"one store, {med(2, 'lock_wait'):.0%} with two, {med(4, 'lock_wait'):.0%} with "
        "four): on one server, stores no longer remove a bottleneck, and the limit is CPU. "
        f"On this {cores}-core machine the 8 writers, the server and whatever else runs "
        f"share {cores} cores (see the load average and the writers' share of them), so "
        "more stores on this machine cannot add throughput. On separate servers "
        "(docs/scale.md) each store brings its own cores, disk and WAL.",
    ])


WRITER_TEXT = (
    "8 writer processes, each appending one message per transaction to its own "
    "conversation through one `Ledger` opened over K stores (K schemas of one database, "
    "each with its own event table, sequence and notification log; pools of 1 + 2 "
    "connections per store and process, plus each store's save connection), the "
    "conversations chosen so that each store gets 8/K writers; no policy thread (a "
    "worker would summarize)."
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--no-write", action="store_true", help="print the section only")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    command = ".venv/bin/python benchmarks/shards.py"
    if args.runs != 3 or args.seconds != 5.0:
        command += f" --runs {args.runs} --seconds {args.seconds:g}"
    results: dict[int, list[Run]] = {k: [] for k in SHARD_COUNTS}
    for run in range(args.runs):
        for k in SHARD_COUNTS:
            result = one_run(k, args.seconds)
            results[k].append(result)
            print(f"run {run + 1}: K = {k}: {result.rate:,.0f} appends/s, writer CPU "
                  f"{result.cpu_ms:.2f} ms per append, {result.cpu_share:.0%} of the cores",
                  file=sys.stderr, flush=True)
    text = section(results, args.runs, args.seconds, command, load)
    print(text)
    if not args.no_write:
        write_section("shards", text.split("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
