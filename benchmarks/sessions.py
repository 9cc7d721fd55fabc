"""Agents SDK sessions compared: time per turn and what each hands the model.

    .venv/bin/python benchmarks/sessions.py \
        [--sizes 500,2000,20000] [--runs 3] [--turns 15]

For each history size, every session is filled with the same items (user questions,
function calls with their outputs, answers), then a *turn* — ``add_items`` of a user
item and an answer, then ``get_items()`` as the Runner does — is timed. Sessions:
``LedgerSession`` on a SQLite file and on PostgreSQL, the SDK's ``SQLiteSession`` (a
SQLite file) and ``SQLAlchemySession`` (PostgreSQL through SQLAlchemy's asyncio engine
on psycopg's async connection). Runs are interleaved across sessions; the table
shows the median over runs of each run's median turn, the tokens of what
``get_items()`` returns (counted as the model is charged: tiktoken, per-message
overhead), the *cold load* (open the store afresh, as a new process would, and the
first ``get_items()``; median of ``--runs``) and the *fill* (adding the history in
``add_items`` batches of 400, the bulk path every session has; for ``LedgerSession``
up to idle, i.e. including the background summaries the policy makes on the way).
A turn of ``LedgerSession`` on SQLite is split into *the append* -- ``Ledger.extend`` of
the same two messages in one transaction, timed in a twin conversation of the same
history and policy in the same ledger, right after each of its turns -- and *the rest*
(the turn less that: items to messages, ``get_items()``'s read and rendering, the
hop to the session's thread and back for the append; ``get_items()`` reads in place
when it can, and the line says how often it did). Before the timed runs, each SQLite
file (the SDK's, the ledger's) is written to until its write-ahead log stops growing
(``benchmarks/sqlite_wal.py``): a commit that grows the file costs half as much again
to twice the flush of one that writes over the log, so neither side is timed while its log grows.
Writes its section of docs/benchmarks.md (``sessions``) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from agents import SQLiteSession
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

import contextledger as cl
from contextledger.domain.values.items import messages_from_items
from contextledger.integrations.agents import LedgerSession

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sections import write_section
from sqlite_wal import recycle_wal

POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
ASYNC_POSTGRES = POSTGRES.replace("postgresql://", "postgresql+psycopg://", 1)
COUNTER = cl.TiktokenCounter("gpt-4o-mini")
POLICY = cl.ReductionPolicy(trigger_messages=100, keep_messages=20, keep_tool_results=10)
WORDS = (
    "the",
    "customer",
    "asked",
    "about",
    "the",
    "order",
    "status",
    "and",
    "the",
    "delivery",
    "window",
    "for",
    "the",
    "parcel",
)


def block(n: int) -> list[dict[str, Any]]:
    """Four items of one exchange: a question, a function call, its output, an answer."""
    say = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(30))
    return [
        {"role": "user", "content": f"question {n}: {say}"},
        {"type": "function_call", "call_id": f"call_{n}", "name": "lookup", "arguments": f'{{"n": {n}}}'},
        {"type": "function_call_output", "call_id": f"call_{n}", "output": say * 3},
        {"role": "assistant", "content": f"answer {n}: {say}"},
    ]


def turn_items(n: int) -> list[dict[str, Any]]:
    """What a turn adds: a user item and the answer."""
    return [{"role": "user", "content": f"new question {n}"}, {"role": "assistant", "content": f"reply {n}"}]


def tokens(items: list[Any]) -> int:
    counter = COUNTER
    return counter.reply_priming + sum(counter.count_message(m) for m, _ in messages_from_items(items))


class Contender:
    """One session kind at one history size."""

    def __init__(
        self,
        name: str,
        session: Any,
        after_fill: Callable[[], None] | None = None,
        cold: Callable[[], Awaitable[float]] | None = None,
    ) -> None:
        self.name, self.session, self.after_fill, self.cold = name, session, after_fill, cold
        self.run_medians: list[float] = []
        self.cold_loads: list[float] = []
        self.sent_tokens = 0
        self.fill_seconds = 0.0
        #: Seconds per 2,000 items added, block by block (is the cost flat as it grows?).
        self.block_seconds: list[float] = []
        #: The append alone (``Ledger.extend`` of a turn's two messages in a twin
        #: conversation), timed after each turn; its median per run.
        self.append_only: Callable[[list[dict[str, Any]]], Any] | None = None
        self.append_medians: list[float] = []
        #: CPU seconds per turn (``time.process_time``: every thread of the process), per run.
        self.cpu_medians: list[float] = []
        #: Timed ``get_items()`` calls, and those whose read went to the session's thread.
        self.reads = 0
        self.thread_reads: list[int] = []

    async def fill(self, size: int) -> None:
        started = block_started = time.perf_counter()
        items = [i for n in range(size // 4) for i in block(n)]
        for start in range(0, len(items), 400):
            await self.session.add_items(items[start : start + 400])
            if (start + 400) % 2000 == 0:
                now = time.perf_counter()
                self.block_seconds.append(now - block_started)
                block_started = now
        if self.after_fill:
            self.after_fill()
        self.fill_seconds = time.perf_counter() - started

    async def turns(self, count: int, offset: int) -> None:
        times, appends, cpu = [], [], []
        for n in range(offset, offset + count):
            started, cpu_started = time.perf_counter(), time.process_time()
            await self.session.add_items(turn_items(n))
            sent = await self.session.get_items()
            times.append(time.perf_counter() - started)
            self.reads += 1
            cpu.append(time.process_time() - cpu_started)
            if self.append_only is not None:
                started = time.perf_counter()
                self.append_only(turn_items(n))
                appends.append(time.perf_counter() - started)
        self.run_medians.append(statistics.median(times))
        self.cpu_medians.append(statistics.median(cpu))
        if appends:
            self.append_medians.append(statistics.median(appends))
        self.sent_tokens = tokens(sent)


def count_thread_reads(contender: Contender) -> None:
    """Count the reads of a LedgerSession's ``get_items()`` that go to its thread
    (the others ran in place)."""
    session = contender.session
    on_thread = session._items

    def counted() -> Any:
        contender.thread_reads.append(1)
        return on_thread()

    session._items = counted


async def first_get(session: Any) -> int:
    return len(await session.get_items())


async def measure(
    size: int, runs: int, turns: int, work: Path, urls: dict[str, str], ledgers: dict[str, cl.Ledger]
) -> list[Contender]:
    tag = uuid.uuid4().hex[:8]
    engine = create_async_engine(ASYNC_POSTGRES)
    names = {"sqlite": f"s{size}-{tag}", "postgres": f"p{size}-{tag}"}
    tables = {"sessions_table": f"bench_sessions_{tag}", "messages_table": f"bench_messages_{tag}"}

    def ledger_cold(kind: str) -> Callable[[], Awaitable[float]]:
        async def load() -> float:
            started = time.perf_counter()
            with cl.Ledger.open(urls[kind], run_policy=False) as fresh:
                await first_get(LedgerSession(names[kind], fresh, policy=POLICY))
                return time.perf_counter() - started

        return load

    async def sqlite_cold() -> float:
        started = time.perf_counter()
        fresh = SQLiteSession(f"s{size}", work / f"sdk-{size}.db")
        await first_get(fresh)
        took = time.perf_counter() - started
        fresh.close()
        return took

    async def alchemy_cold() -> float:
        started = time.perf_counter()
        fresh_engine = create_async_engine(ASYNC_POSTGRES)
        await first_get(SQLAlchemySession(f"a{size}-{tag}", engine=fresh_engine, **tables))
        took = time.perf_counter() - started
        await fresh_engine.dispose()
        return took

    contenders = [
        Contender(
            "LedgerSession (SQLite)",
            LedgerSession(names["sqlite"], ledgers["sqlite"], policy=POLICY),
            lambda: ledgers["sqlite"].wait_idle(timeout=1200),
            ledger_cold("sqlite"),
        ),
        Contender(
            "LedgerSession (PostgreSQL)",
            LedgerSession(names["postgres"], ledgers["postgres"], policy=POLICY),
            lambda: ledgers["postgres"].wait_idle(timeout=1200),
            ledger_cold("postgres"),
        ),
        Contender(
            "SQLiteSession (SQLite file)",
            SQLiteSession(f"s{size}", work / f"sdk-{size}.db"),
            cold=sqlite_cold,
        ),
        Contender(
            "SQLAlchemySession (PostgreSQL)",
            SQLAlchemySession(f"a{size}-{tag}", engine=engine, create_tables=True, **tables),
            cold=alchemy_cold,
        ),
    ]
    twin = ledgers["sqlite"].start(policy=POLICY)  # the append alone, beside the SQLite session's turns
    contenders[0].append_only = lambda items: ledgers["sqlite"].extend(twin, items)
    count_thread_reads(contenders[0])
    history = [i for n in range(size // 4) for i in block(n)]
    for start in range(0, len(history), 400):
        ledgers["sqlite"].extend(twin, history[start : start + 400])
    for contender in contenders:
        await contender.fill(size)
        print(
            f"  filled {contender.name} with {size} items in {contender.fill_seconds:.1f}s",
            file=sys.stderr,
            flush=True,
        )
    warm_sdk = SQLiteSession("warm", work / f"sdk-{size}.db")
    warm_cid = ledgers["sqlite"].start(policy=POLICY)

    async def sdk_write(n: int) -> None:
        await warm_sdk.add_items([{"role": "user", "content": f"warm {n}"}])

    async def ledger_write(n: int) -> None:
        ledgers["sqlite"].append(warm_cid, {"role": "user", "content": f"warm {n}"})

    warmed = (
        await recycle_wal(sdk_write, work / f"sdk-{size}.db-wal"),
        await recycle_wal(ledger_write, work / "ledger.db-wal"),
    )
    warm_sdk.close()
    ledgers["sqlite"].wait_idle(timeout=1200)
    print(f"  logs reused after {warmed[0]} SDK and {warmed[1]} ledger writes", file=sys.stderr, flush=True)
    for run in range(runs):
        for contender in contenders:  # interleaved: each run visits every session once
            await contender.turns(turns, offset=run * turns)
            if contender.cold is not None:
                contender.cold_loads.append(await contender.cold())
    async with engine.begin() as conn:
        await conn.execute(text(f"DROP TABLE IF EXISTS bench_messages_{tag}, bench_sessions_{tag}"))
    await engine.dispose()
    return contenders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,20000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=15)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(POSTGRES, autocommit=True)
    admin.execute(f'CREATE SCHEMA "{schema}"')
    rows = []
    splits: list[tuple[int, float, float, int, int]] = []
    cpu: dict[tuple[int, str], float] = {}
    blocks: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            urls = {"sqlite": f"sqlite:///{work / 'ledger.db'}", "postgres": f"{POSTGRES}?schema={schema}"}
            with cl.Ledger.open(urls["sqlite"]) as lite, cl.Ledger.open(urls["postgres"]) as pg:
                for size in sizes:
                    print(f"{size} items", file=sys.stderr)
                    ledgers = {"sqlite": lite, "postgres": pg}
                    done = asyncio.run(measure(size, args.runs, args.turns, work, urls, ledgers))
                    for c in done:
                        rows.append(
                            (
                                size,
                                c.name,
                                statistics.median(c.run_medians) * 1000,
                                c.sent_tokens,
                                statistics.median(c.cold_loads) * 1000,
                                c.fill_seconds,
                            )
                        )
                        cpu[(size, c.name)] = statistics.median(c.cpu_medians) * 1e6
                        if c.append_medians:
                            append_ms = statistics.median(c.append_medians) * 1000
                            in_place = c.reads - len(c.thread_reads)
                            splits.append((size, rows[-1][2], append_ms, in_place, c.reads))
                        if size >= 20000 and c.name.startswith("LedgerSession"):
                            blocks[c.name] = c.block_seconds
                        print(
                            f"| {size:,} | {c.name} | {rows[-1][2]:.1f} | {c.sent_tokens:,} | "
                            f"{rows[-1][4]:.0f} | {c.fill_seconds:.1f} |",
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## Agents SDK sessions: LedgerSession, SQLiteSession, SQLAlchemySession",
        "",
        f"Written by `benchmarks/sessions.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    .venv/bin/python benchmarks/sessions.py "
        f"--sizes {args.sizes} --runs {args.runs} --turns {args.turns}",
        "",
        "Each session is filled with the same history (blocks of a user question, a function call, "
        "its output and an answer), then timed in interleaved runs. *Per turn*: `add_items` of 2 items "
        f"then `get_items()`, as the Runner does each turn (median of {args.runs} runs x {args.turns} "
        "turns). *Tokens handed to the model*: what `get_items()` returns, counted with tiktoken. "
        "*Cold load*: open the store afresh (a new `Ledger`, a new `SQLiteSession`, a new engine) and "
        f"the first `get_items()`, median of {args.runs}. *Fill*: the history added in `add_items` "
        "batches of 400 (the bulk path of every session); for `LedgerSession` the time runs until the "
        "ledger is idle, so it includes the offline summarizer's background summaries "
        "(policy: trigger 100, keep 20, keep_tool_results 10). Before the timed runs, each SQLite file "
        "(the SDK's, the ledger's) is written to until its write-ahead log stops growing "
        "(`benchmarks/sqlite_wal.py`: a commit that grows the file costs half as much again to twice "
        "the flush of one that writes over the log), as in a service that has run a while. "
        f"{os.cpu_count()} cores, shared: load "
        f"average {load_avg:.1f} at the end of the run.",
        "",
        "What a `LedgerSession` turn still does per call: `add_items` hops to the session's thread once, "
        "checks and copies the items as the log gives them back (one JSON round trip for the list), "
        "groups them into chat messages, counts their tokens and appends them in one transaction "
        "(the ledger's append path: the conversation's lock, the digest chain, "
        "encryption under the subject's key, one commit); `get_items()` brings the "
        "cached conversation up to date from the store (one query for events after its version, "
        "under its lock), renders the working memory again only if the conversation changed since "
        "the session's last rendering, and hands out a private copy of it (one `marshal` round "
        "trip): in place, on the event loop's thread, when the store is local (SQLite), nothing of "
        "the session is in flight, the lock is free and only new entries need rendering; on the "
        "session's thread otherwise. The policy's thread is woken only by a save that reaches a "
        "threshold.",
        "",
        "| stored items | session | ms per turn | tokens handed to the model | cold load ms "
        "| fill s | fill s per 1,000 items |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for size, name, ms, sent, cold, fill in rows:
        lines.append(
            f"| {size:,} | {name} | {ms:.1f} | {sent:,} | {cold:.0f} | {fill:.1f} "
            f"| {fill / size * 1000:.2f} |"
        )
    per_k = {(size, name): fill / size * 1000 for size, name, _, _, _, fill in rows}
    lines.append("")
    for name in dict.fromkeys(name for _, name, *_ in rows):
        if name.startswith("LedgerSession") and (2000, name) in per_k and (20000, name) in per_k:
            lines.append(
                f"- {name}: filling costs {per_k[(2000, name)]:.2f} s per 1,000 items at 2,000 "
                f"and {per_k[(20000, name)]:.2f} s at 20,000 (ratio "
                f"{per_k[(20000, name)] / per_k[(2000, name)]:.2f}; 1.0 is linear)."
            )
    for size, turn_ms, append_ms, in_place, reads in splits:
        turn_us, append_us = turn_ms * 1000, append_ms * 1000
        lines.append(
            f"- LedgerSession (SQLite) at {size:,} items, a turn of {turn_us:.0f} µs: the append of its 2 "
            f"items {append_us:.0f} µs (`Ledger.extend` of the same 2 messages in a twin conversation, "
            f"median of the runs' medians), the rest {turn_us - append_us:.0f} µs (items to messages, "
            "`get_items()`'s read and rendering, the hop to the session's thread and back for the "
            f"append); `get_items()` read in place in {in_place:,} of {reads:,} turns."
        )
    turn_us = {(size, name): ms * 1000 for size, name, ms, *_ in rows}
    measures = (
        ("Per turn", "wall clock", turn_us),
        ("CPU per turn", "`time.process_time`, every thread of the process", cpu),
    )
    for title, how, by in measures:
        for size in dict.fromkeys(size for size, *_ in rows):
            mine = by.get((size, "LedgerSession (SQLite)"))
            theirs = by.get((size, "SQLiteSession (SQLite file)"))
            if mine is not None and theirs is not None:
                lines.append(
                    f"- {title} at {size:,} items ({how}, median of the runs' medians): LedgerSession "
                    f"(SQLite) {mine:.0f} µs, SQLiteSession {theirs:.0f} µs ({mine / theirs:.2f}x)."
                )
    for name, seconds in blocks.items():
        tenth = max(1, len(seconds) // 5)
        lines.append(
            f"- {name}, block by block while filling to 20,000: the first {tenth * 2000:,} items "
            f"took {statistics.median(seconds[:tenth]):.1f} s per 2,000, the last {tenth * 2000:,} "
            f"{statistics.median(seconds[-tenth:]):.1f} s per 2,000 (median per block; all: "
            + ", ".join(f"{x:.1f}" for x in seconds)
            + ")."
        )
    lines.append("")
    write_section("sessions", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
