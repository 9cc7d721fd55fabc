"""The read-side sections of benchmarks/write_path.py: an append's cost by the window's
length (*window*), ``context()`` at 2,000 and 20,000 messages (*context()*), and a fresh
process's cold load of a long conversation against the Agents SDK's sessions (*cold load*).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from write_path_common import POLICY, med, message, open_ledger, pg_url, sdk_engine, sdk_url

from contextledger.application import Ledger, ReductionPolicy


def fill(ledger: Ledger, cid: uuid.UUID, n: int) -> None:
    done = 1
    while done < n:
        k = min(100, n - done)
        ledger.extend(cid, [message(done + j) for j in range(k)])
        done += k
        ledger.wait_idle(120)


WINDOWS = (100, 1_000, 5_000)


def section_window(lines: list[str], tmp: Path, schema: str, runs: int, n: int) -> None:
    lines += [
        "### An append's cost by the window's length",
        "",
        f"A trigger far above the message count keeps every message in the window (as a token trigger "
        f"over short messages does): each conversation is filled to 100, 1,000 or 5,000 messages, "
        f"then {n} more appends are timed (CPU of the process, policy thread running, default "
        f"snapshot interval); {runs} interleaved runs, median. The ratio compares the longest window "
        "with the shortest: an append that passed over the window, or snapshotted it at a fixed "
        "interval, grew with it.",
        "",
        "| store | "
        + " | ".join(f"{w:,} µs" for w in WINDOWS)
        + f" | ratio {WINDOWS[-1]:,} / {WINDOWS[0]} |",
        "|---|" + "---|" * (len(WINDOWS) + 1),
    ]
    for label, url in (
        ("memory://", "memory://"),
        ("SQLite file", f"sqlite:///{tmp / 'window.db'}"),
        ("PostgreSQL", pg_url(schema)),
    ):
        ledger = open_ledger(url)
        try:
            cids = {}
            for w in WINDOWS:
                policy = ReductionPolicy(trigger_messages=w + (runs + 1) * n + 10, keep_messages=10)
                cids[w] = ledger.start("s", policy=policy)
                fill(ledger, cids[w], w)
            results: dict[int, list[float]] = {w: [] for w in WINDOWS}
            for _ in range(runs):
                for w in WINDOWS:
                    cpu = time.process_time()
                    for i in range(n):
                        ledger.append(cids[w], message(i))
                    results[w].append((time.process_time() - cpu) / n)
            cells = [med(results[w]) * 1e6 for w in WINDOWS]
            lines.append(
                f"| {label} | " + " | ".join(f"{c:.0f}" for c in cells) + f" | {cells[-1] / cells[0]:.2f} |"
            )
            print(lines[-1], flush=True)
        finally:
            ledger.close()
    lines.append("")


def section_context(lines: list[str], tmp: Path, schema: str, runs: int, n: int, big: int) -> dict[str, Any]:
    lines += [
        f"### context() at 2,000 and {big:,} messages",
        "",
        f"One ledger per backend with its policy thread running; two conversations filled to 2,000 and "
        f"{big:,} messages (policy trigger 100 / keep 10, summaries recorded as they fall due); "
        f"{n} `context()` calls per run alternating between them, {runs} runs.",
        "",
        f"| backend | 2,000 µs | {big:,} µs | ratio {big // 1000}k / 2k |",
        "|---|---|---|---|",
    ]
    kept: dict[str, Any] = {}
    for label, url in (
        ("memory://", "memory://"),
        ("SQLite file", f"sqlite:///{tmp / 'context.db'}"),
        ("PostgreSQL", pg_url(schema)),
    ):
        ledger = open_ledger(url)
        small = ledger.start("s", policy=POLICY)
        large = ledger.start("s", policy=POLICY)
        fill(ledger, small, 2000)
        fill(ledger, large, big)
        per: dict[uuid.UUID, list[float]] = {small: [], large: []}
        for _ in range(runs):
            samples: dict[uuid.UUID, list[float]] = {small: [], large: []}
            for i in range(n):
                cid = small if i % 2 == 0 else large
                t = time.perf_counter()
                ledger.context(cid)
                samples[cid].append(time.perf_counter() - t)
            for cid in per:
                per[cid].append(med(samples[cid]))
        s, b = med(per[small]) * 1e6, med(per[large]) * 1e6
        lines.append(f"| {label} | {s:.0f} | {b:.0f} | {b / s:.2f} |")
        print(lines[-1], flush=True)
        ledger.close()
        kept[label] = (url, str(large))
    lines.append("")
    return kept


COLD = r"""
import sys, time, json, asyncio
t0 = time.perf_counter()
kind, url, ident, schema = sys.argv[1:5]
if kind == "ledger":
    from contextledger.application import Ledger
    t1 = time.perf_counter()
    ledger = Ledger.open(url)
    n = len(ledger.context(ident))
    t2 = time.perf_counter()
    ledger.close()
elif kind == "sqlite_session":
    from agents import SQLiteSession
    t1 = time.perf_counter()
    n = len(asyncio.run(SQLiteSession(ident, url).get_items()))
    t2 = time.perf_counter()
else:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine
    t1 = time.perf_counter()
    async def main():
        engine = create_async_engine(url, connect_args={"options": f"-csearch_path={schema}"})
        items = await SQLAlchemySession(ident, engine=engine).get_items()
        await engine.dispose()
        return len(items)
    n = asyncio.run(main())
    t2 = time.perf_counter()
print(json.dumps({"open_read": t2 - t1, "process": t2 - t0, "items": n}))
"""


def section_cold(lines: list[str], tmp: Path, schema: str, kept: dict[str, Any], runs: int, big: int) -> None:
    from agents import SQLiteSession
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    sqlite_sdk = tmp / "sdk.db"
    items = [message(i) for i in range(big)]

    async def fill_sdk() -> None:
        s1 = SQLiteSession("cold", str(sqlite_sdk))
        engine = sdk_engine(schema, 1)
        s2 = SQLAlchemySession("cold", engine=engine, create_tables=True)
        for k in range(0, big, 1000):
            await s1.add_items(items[k : k + 1000])
            await s2.add_items(items[k : k + 1000])
        await engine.dispose()

    asyncio.run(fill_sdk())
    cases = [
        ("SQLite", "ledger", kept["SQLite file"][0], kept["SQLite file"][1]),
        ("SQLite", "sqlite_session", str(sqlite_sdk), "cold"),
        ("PostgreSQL", "ledger", kept["PostgreSQL"][0], kept["PostgreSQL"][1]),
        ("PostgreSQL", "sqlalchemy_session", sdk_url(), "cold"),
    ]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    env = dict(os.environ)
    for _ in range(runs):
        for store, kind, url, ident in cases:
            out = subprocess.run(
                [sys.executable, "-c", COLD, kind, url, ident, schema],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
                check=True,
            )
            results.setdefault((store, kind), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    names = {
        "ledger": "contextledger: `Ledger.open()` + `context()`",
        "sqlite_session": "`SQLiteSession.get_items()`",
        "sqlalchemy_session": "`SQLAlchemySession.get_items()`",
    }
    lines += [
        f"### Cold load of a {big:,}-message conversation",
        "",
        f"A fresh process per sample ({runs} interleaved runs, medians): *open + read* is timed after "
        "the imports, from opening the store to holding what the model is sent (contextledger: the "
        "reduced context, policy thread started; the SDK sessions: all of their items); *process* "
        "includes the imports.",
        "",
        "| store | reader | items returned | open + read ms | process ms |",
        "|---|---|---|---|---|",
    ]
    for store, kind, _, _ in cases:
        rs = results[(store, kind)]
        lines.append(
            f"| {store} | {names[kind]} | {int(rs[0]['items']):,} | "
            f"{med([r['open_read'] for r in rs]) * 1000:.0f} | "
            f"{med([r['process'] for r in rs]) * 1000:.0f} |"
        )
        print(lines[-1], flush=True)
    lines.append("")
