"""Agents SDK sessions compared: time per turn and what each hands the model.

    TIKTOKEN_CACHE_DIR=../shared/tiktoken_cache .venv/bin/python benchmarks/sessions.py \
        [--sizes 500,2000,20000] [--runs 3] [--turns 15]

For each history size, every session is filled with the same items (user questions,
function calls with their outputs, answers), then a *turn* — ``add_items`` of a user
item and an answer, then ``get_items()`` as the Runner does — is timed. Sessions:
``LedgerSession`` on a SQLite file and on PostgreSQL, the SDK's ``SQLiteSession`` (a
SQLite file) and ``SQLAlchemySession`` (PostgreSQL via asyncpg; the
``openai-agents[sqlalchemy]`` extra). Runs are interleaved across sessions; the table
shows the median over runs of each run's median turn, and the tokens of what
``get_items()`` returns (counted as the model is charged: tiktoken, per-message
overhead). Prints a markdown table.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from agents import SQLiteSession
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

import contextledger as cl
from contextledger.domain.items import messages_from_items
from contextledger.integrations.agents import LedgerSession

POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
POLICY = cl.ReductionPolicy(trigger_messages=100, keep_messages=20, keep_tool_results=10)
WORDS = ("the", "customer", "asked", "about", "the", "order", "status", "and", "the", "delivery",
         "window", "for", "the", "parcel")


def block(n: int) -> list[dict[str, Any]]:
    """Four items of one exchange: a question, a function call, its output, an answer."""
    say = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(30))
    return [
        {"role": "user", "content": f"question {n}: {say}"},
        {"type": "function_call", "call_id": f"call_{n}", "name": "lookup", "arguments": f'{{"n": {n}}}'},
        {"type": "function_call_output", "call_id": f"call_{n}", "output": say * 3},
        {"role": "assistant", "content": f"answer {n}: {say}"},
    ]


def tokens(items: list[Any]) -> int:
    counter = cl.TiktokenCounter("gpt-4o-mini")
    return counter.reply_priming + sum(counter.count_message(m) for m, _ in messages_from_items(items))


class Contender:
    """One session kind at one history size."""

    def __init__(self, name: str, session: Any, after_fill: Callable[[], None] | None = None) -> None:
        self.name, self.session, self.after_fill = name, session, after_fill
        self.run_medians: list[float] = []
        self.sent_tokens = 0

    async def fill(self, size: int) -> None:
        items = [i for n in range(size // 4) for i in block(n)]
        for start in range(0, len(items), 400):
            await self.session.add_items(items[start : start + 400])
        if self.after_fill:
            self.after_fill()

    async def turns(self, count: int, offset: int) -> None:
        times = []
        for n in range(offset, offset + count):
            started = time.perf_counter()
            await self.session.add_items(
                [{"role": "user", "content": f"new question {n}"},
                 {"role": "assistant", "content": f"reply {n}"}]
            )
            sent = await self.session.get_items()
            times.append(time.perf_counter() - started)
        self.run_medians.append(statistics.median(times))
        self.sent_tokens = tokens(sent)


async def measure(
    size: int, runs: int, turns: int, work: Path, ledgers: dict[str, cl.Ledger]
) -> list[Contender]:
    tag = uuid.uuid4().hex[:8]
    engine = create_async_engine(POSTGRES.replace("postgresql://", "postgresql+asyncpg://"))
    contenders = [
        Contender("LedgerSession (SQLite)",
                  LedgerSession(f"s{size}-{tag}", ledgers["sqlite"], policy=POLICY),
                  lambda: ledgers["sqlite"].wait_idle(timeout=600)),
        Contender("LedgerSession (PostgreSQL)",
                  LedgerSession(f"p{size}-{tag}", ledgers["postgres"], policy=POLICY),
                  lambda: ledgers["postgres"].wait_idle(timeout=600)),
        Contender("SQLiteSession (SQLite file)", SQLiteSession(f"s{size}", work / f"sdk-{size}.db")),
        Contender(
            "SQLAlchemySession (PostgreSQL)",
            SQLAlchemySession(f"a{size}-{tag}", engine=engine, create_tables=True,
                              sessions_table=f"bench_sessions_{tag}", messages_table=f"bench_messages_{tag}"),
        ),
    ]
    for contender in contenders:
        started = time.perf_counter()
        await contender.fill(size)
        took = time.perf_counter() - started
        print(f"  filled {contender.name} with {size} items in {took:.1f}s", file=sys.stderr)
    for run in range(runs):
        for contender in contenders:  # interleaved: each run visits every session once
            await contender.turns(turns, offset=run * turns)
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
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            with cl.Ledger.open(f"sqlite:///{work / 'ledger.db'}") as lite, \
                    cl.Ledger.open(f"{POSTGRES}?schema={schema}") as pg:
                for size in sizes:
                    print(f"{size} items", file=sys.stderr)
                    ledgers = {"sqlite": lite, "postgres": pg}
                    done = asyncio.run(measure(size, args.runs, args.turns, work, ledgers))
                    for c in done:
                        rows.append((size, c.name, statistics.median(c.run_medians) * 1000, c.sent_tokens))
                        print(f"| {size:,} | {c.name} | {rows[-1][2]:.1f} | {c.sent_tokens:,} |",
                              file=sys.stderr, flush=True)
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()
    print(f"\nPer turn: add_items (2 items) + get_items(); median of {args.runs} interleaved runs "
          f"x {args.turns} turns.\n")
    print("| stored items | session | ms per turn | tokens handed to the model |")
    print("|---:|---|---:|---:|")
    for size, name, ms, sent in rows:
        print(f"| {size:,} | {name} | {ms:.1f} | {sent:,} |")


if __name__ == "__main__":
    main()
