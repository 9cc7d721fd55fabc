"""The write side of benchmarks/write_path.py: one writer's per-append latency against a
plain ``INSERT`` + commit (the *latency* section), and writer processes side by side on
one PostgreSQL (the *throughput* section: contextledger, the plain ``INSERT`` and the
Agents SDK's ``SQLAlchemySession``, spawned as separate processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from sqlite_wal import recycle_wal_now
from write_path_common import POLICY, med, message, open_ledger, pg_base, pg_url, sdk_engine

# --------------------------------------------------------------- writer processes


def _writer(
    system: str, schema: str, cids: list[str], index: int, seconds: float, barrier: Any, out: Any
) -> None:
    """One writer process: ``len(cids)`` threads (tasks), each appending to its conversation
    until ``seconds`` have passed after the barrier; puts the number of appends and the
    process's CPU seconds (all its threads, the policy's included) while they ran."""
    try:
        if system == "sdk":
            count, cpu = asyncio.run(_sdk_writer(schema, cids, index, seconds, barrier))
        else:
            count, cpu = _threaded_writer(system, schema, cids, index, seconds, barrier)
        out.put(("ok", count, cpu))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))
        barrier.abort()  # the others (and the parent) stop waiting for this writer
        raise


def _threaded_writer(
    system: str, schema: str, cids: list[str], index: int, seconds: float, barrier: Any
) -> tuple[int, float]:
    counts = [0] * len(cids)
    ready = threading.Barrier(len(cids) + 1, timeout=300)
    deadline: list[float] = []
    ledger = open_ledger(pg_url(schema)) if system == "ledger" else None

    def run(k: int) -> None:
        cid = uuid.UUID(cids[k])
        conn = None
        if system == "plain":
            conn = psycopg.connect(pg_base(), autocommit=True)
        # one warm-up write each (connections open, statements prepared)
        pos = (index * 10 + k) * 1_000_000
        try:
            if ledger is not None:
                ledger.append(cid, message(0))
            else:
                assert conn is not None
                conn.execute(
                    f'INSERT INTO "{schema}".plain_messages VALUES (%s, %s, %s)',
                    (cid, pos, json.dumps(message(0))),
                    prepare=True,
                )
        except BaseException:
            ready.abort()  # a failed warm-up ends the run with its error, not a wait forever
            raise
        ready.wait()
        ready.wait()
        i = 0
        while time.monotonic() < deadline[0]:
            i += 1
            if ledger is not None:
                ledger.append(cid, message(i))
            else:
                assert conn is not None
                conn.execute(
                    f'INSERT INTO "{schema}".plain_messages VALUES (%s, %s, %s)',
                    (cid, pos + i, json.dumps(message(i))),
                    prepare=True,
                )
            counts[k] += 1
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(cids))]
    for t in threads:
        t.start()
    ready.wait()
    barrier.wait(300)
    deadline.append(time.monotonic() + seconds)
    cpu = time.process_time()
    ready.wait()
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu
    if ledger is not None:
        ledger.close()
    return sum(counts), cpu


async def _sdk_writer(
    schema: str, cids: list[str], index: int, seconds: float, barrier: Any
) -> tuple[int, float]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    engine = sdk_engine(schema, len(cids))
    sessions = [SQLAlchemySession(c, engine=engine) for c in cids]
    for s in sessions:
        await s.add_items([message(0)])
    await asyncio.get_running_loop().run_in_executor(None, barrier.wait, 300)
    deadline = time.monotonic() + seconds
    cpu = time.process_time()

    async def run(session: Any) -> int:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            await session.add_items([message(n)])
        return n

    counts = await asyncio.gather(*(run(s) for s in sessions))
    cpu = time.process_time() - cpu
    await engine.dispose()
    return sum(counts), cpu


SCENARIOS = [
    ("1 process", 1, 1, False),
    ("4 processes", 4, 1, False),
    ("8 processes", 8, 1, False),
    ("2 processes x 8 threads", 2, 8, False),
    ("8 processes, one conversation", 8, 1, True),
]
SYSTEMS = [("ledger", "contextledger"), ("plain", "plain INSERT"), ("sdk", "SQLAlchemySession")]


def checkpoint() -> None:
    """A CHECKPOINT before a timed run (skipped for a role that may not take one)."""
    try:
        with psycopg.connect(pg_base(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        pass


def throughput(
    system: str, schema: str, processes: int, threads: int, shared: bool, seconds: float
) -> tuple[float, float]:
    """Appends per second of ``processes`` x ``threads`` writers, and the writer
    processes' CPU microseconds per append while they ran."""
    if shared:
        one = uuid.uuid4()
        cid_sets = [[str(one)] * threads for _ in range(processes)]
    else:
        cid_sets = [[str(uuid.uuid4()) for _ in range(threads)] for _ in range(processes)]
    if system == "ledger":
        with open_ledger(pg_url(schema)) as ledger:
            for cid in {c for cids in cid_sets for c in cids}:
                ledger.start("You are a helpful assistant.", conversation_id=uuid.UUID(cid), policy=POLICY)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(system, schema, cid_sets[n], n, seconds, barrier, out))
        for n in range(processes)
    ]
    for p in procs:
        p.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a writer failed: raised below
        barrier.wait(300)
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r[1] for r in results if r[0] == "error"]
    if errors:
        raise RuntimeError(f"{system}: {errors[0]}")
    appends = sum(r[1] for r in results)
    return appends / seconds, 1e6 * sum(r[2] for r in results) / max(appends, 1)


def _plain_sqlite(path: Path) -> Callable[[int], None]:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS plain_messages (conversation_id TEXT, position INTEGER, "
        "body TEXT, PRIMARY KEY (conversation_id, position))"
    )
    cid = str(uuid.uuid4())

    def insert(i: int) -> None:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO plain_messages VALUES (?, ?, ?)", (cid, i, json.dumps(message(i))))
        conn.execute("COMMIT")

    return insert


def _plain_pg(schema: str) -> Callable[[int], None]:
    conn = psycopg.connect(pg_base(), autocommit=True)
    cid = uuid.uuid4()

    def insert(i: int) -> None:
        conn.execute(
            f'INSERT INTO "{schema}".plain_messages VALUES (%s, %s, %s)',
            (cid, i, json.dumps(message(i))),
            prepare=True,
        )

    return insert


def section_latency(lines: list[str], tmp: Path, schema: str, runs: int, n: int) -> None:
    lines += [
        "### One writer: per-append latency",
        "",
        f"{n} appends timed one by one per run, {runs} interleaved runs (median of the runs' medians); "
        "the ledger runs its policy thread. The plain baseline inserts the same JSON into a "
        "`(conversation_id, position, body)` table and commits each message (SQLite: WAL and "
        "`synchronous=FULL`, SQLite's default, as the event store's connections have them: one "
        "`fdatasync` per commit on both, counted with strace; PostgreSQL: autocommit, a prepared "
        "statement, the server's `synchronous_commit` for both). On SQLite both first write until "
        "their files' write-ahead logs stop growing (`benchmarks/sqlite_wal.py`), as in a service "
        "that has run a while.",
        "",
        "| store | contextledger µs | plain INSERT + commit µs | ratio "
        "| eventsourcing's recorder (pre-ping) µs |",
        "|---|---|---|---|---|",
    ]
    for label, url in (("SQLite file", f"sqlite:///{tmp / 'latency.db'}"), ("PostgreSQL", pg_url(schema))):
        ledger = open_ledger(url)
        library = open_ledger(pg_url(schema + "_lib"), library=True) if "postgres" in url else None
        plain = _plain_sqlite(tmp / "plain.db") if "sqlite" in url else _plain_pg(schema)
        cid = ledger.start("s", policy=POLICY)
        lcid = library.start("s", policy=POLICY) if library else None
        results: dict[str, list[float]] = {"ledger": [], "plain": [], "library": []}
        counter = [0]
        if "sqlite" in url:  # both timed writing over their logs, not growing them
            ledger_writes = recycle_wal_now(
                lambda k, lg=ledger, c=cid: lg.append(c, message(k)), tmp / "latency.db-wal"
            )
            plain_writes = recycle_wal_now(
                lambda k, p=plain, base=ledger_writes: p(base + k), tmp / "plain.db-wal"
            )
            counter[0] = ledger_writes + plain_writes
            ledger.wait_idle(timeout=600)

        def time_one(fn: Callable[[], Any]) -> float:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

        for _ in range(runs):
            for system in ("ledger", "plain", "library"):
                if system == "library" and library is None:
                    continue
                samples = []
                for _ in range(n):
                    counter[0] += 1
                    i = counter[0]
                    if system == "ledger":
                        samples.append(time_one(lambda i=i, lg=ledger, c=cid: lg.append(c, message(i))))
                    elif system == "plain":
                        samples.append(time_one(lambda i=i, p=plain: p(i)))
                    else:
                        assert library is not None and lcid is not None
                        samples.append(time_one(lambda i=i, lb=library, c=lcid: lb.append(c, message(i))))
                results[system].append(med(samples))
        ledger.close()
        if library is not None:
            library.close()
        lm, pm = med(results["ledger"]) * 1e6, med(results["plain"]) * 1e6
        lib = f"{med(results['library']) * 1e6:.0f}" if results["library"] else "—"
        lines.append(f"| {label} | {lm:.0f} | {pm:.0f} | {lm / pm:.2f} | {lib} |")
        print(lines[-1], flush=True)
    lines.append("")


def section_throughput(lines: list[str], schema: str, runs: int, seconds: float) -> None:
    lines += [
        "### Writers on one PostgreSQL: appends per second",
        "",
        f"Each cell: writers start together (a barrier) and append for {seconds:g} s, one message per "
        f"transaction; the median of {runs} interleaved runs (the three systems take turns going "
        "first, and each run starts after a CHECKPOINT). contextledger: one `Ledger` per process "
        "(policy thread running), the recorder's group commit shares a statement among the "
        "process's concurrent appends. plain INSERT: a connection per writer, a commit per message. "
        "SQLAlchemySession (openai-agents, `postgresql+psycopg://`): one engine per process; "
        "threads are 8 asyncio tasks. On one conversation the plain writers use disjoint positions "
        "(no ordering between writers, which contextledger guarantees). *CPU µs / append*: the "
        "writer processes' own CPU (every thread, the policy's included) while they ran, per "
        "append, contextledger / plain; the server's CPU is not in it.",
        "",
        "*per run*: each run's contextledger / plain, in run order (the two ran within seconds of "
        "each other).",
        "",
        "| writers | contextledger /s | plain INSERT /s | SQLAlchemySession /s | contextledger / plain "
        "| per run | contextledger / SQLAlchemySession | CPU µs / append |",
        "|---|---|---|---|---|---|---|---|",
    ]
    results: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    for run in range(runs):
        for label, procs, threads, shared in SCENARIOS:
            # The systems take turns going first, and each run starts after a checkpoint:
            # a run that follows another inherits its dirty pages and autovacuum work.
            order = SYSTEMS[run % len(SYSTEMS) :] + SYSTEMS[: run % len(SYSTEMS)]
            for system, _ in order:
                checkpoint()
                rate, cpu = throughput(system, schema, procs, threads, shared, seconds)
                results.setdefault((label, system), []).append(rate)
                cpus.setdefault((label, system), []).append(cpu)
                print(
                    f"run {run + 1} {label} {system}: {rate:.0f}/s, {cpu:.0f} µs CPU per append", flush=True
                )
    for label, *_ in SCENARIOS:
        led, pla, sdk = (med(results[(label, s)]) for s, _ in SYSTEMS)
        lcpu, pcpu = med(cpus[(label, "ledger")]), med(cpus[(label, "plain")])
        per_run = " ".join(
            f"{a / b:.2f}" for a, b in zip(results[(label, "ledger")], results[(label, "plain")], strict=True)
        )
        lines.append(
            f"| {label} | {led:.0f} | {pla:.0f} | {sdk:.0f} | {led / pla:.2f} | {per_run} "
            f"| {led / sdk:.2f} | {lcpu:.0f} / {pcpu:.0f} |"
        )
    lines.append("")
