"""What ``Settings.check_digests`` costs a read: off, on load from the store, on every read.

    .venv/bin/python benchmarks/check_digests.py [--runs 5] [--conversations 8] \\
        [--messages 150] [--turns 30] [--stores sqlite,postgres]

One store per backend (a SQLite file; a schema of its own in PostgreSQL's database
``test``) is filled, untimed, with ``--conversations`` conversations of ``--messages``
chat messages each under the default policy (100/10: each holds a summary, made by the
offline summarizer). Then ``--runs`` rounds, in each of which the three levels, in an
order rotated from round to round, do in turn:

- *cold load*: a new ``Ledger`` with the level (empty cache), then ``context()`` of
  every conversation, ms per conversation (the open not counted);
- *per turn*: on that ledger, now warm, ``--turns`` turns of one ``append`` and one
  ``context()`` over the conversations, µs per turn.

The table shows the medians over the rounds (in brackets, this process's CPU time),
and each level's ratio to *off* measured in the same round. Writes its section of
docs/benchmarks.md (``check_digests``) and prints it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg

import contextledger as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_model, load_text, package_versions, postgres_version
from sections import write_section

POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
LEVELS = ("off", "load", "read")


def say(n: int) -> dict[str, str]:
    role = "user" if n % 2 == 0 else "assistant"
    return {
        "role": role,
        "content": f"Message {n}: the flight to Lisbon leaves at {8 + n % 12}:15 from gate {n % 40}.",
    }


def fill(url: str, conversations: int, messages: int) -> list[uuid.UUID]:
    with cl.Ledger.open(url, summarizer=cl.OfflineSummarizer()) as ledger:
        cids = []
        for _ in range(conversations):
            cid = ledger.start("You answer travel questions.")
            for n in range(messages):
                ledger.append(cid, say(n))
            cids.append(cid)
        assert ledger.wait_idle(120)
        assert all(ledger.summaries(cid) for cid in cids), "every conversation should hold a summary"
    return cids


def round_of(
    url: str, level: str, cids: list[uuid.UUID], turns: int, next_message: dict[uuid.UUID, int]
) -> dict[str, tuple[float, float]]:
    settings = cl.Settings(database_url=url, check_digests=level, run_policy=False)  # type: ignore[arg-type]
    with cl.Ledger(settings) as ledger:
        began, cpu = time.perf_counter(), time.process_time()
        for cid in cids:
            ledger.context(cid)
        cold = (
            (time.perf_counter() - began) / len(cids) * 1e3,
            (time.process_time() - cpu) / len(cids) * 1e3,
        )
        began, cpu = time.perf_counter(), time.process_time()
        for turn in range(turns):
            cid = cids[turn % len(cids)]
            ledger.append(cid, say(next_message[cid]))
            next_message[cid] += 1
            ledger.context(cid)
        per_turn = ((time.perf_counter() - began) / turns * 1e6, (time.process_time() - cpu) / turns * 1e6)
    return {"cold": cold, "turn": per_turn}


def measure(
    url: str, args: argparse.Namespace, label: str
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    cids = fill(url, args.conversations, args.messages)
    next_message = dict.fromkeys(cids, args.messages)
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {lv: {"cold": [], "turn": []} for lv in LEVELS}
    for r in range(args.runs):
        order = LEVELS[r % 3 :] + LEVELS[: r % 3]
        for level in order:
            for name, value in round_of(url, level, cids, args.turns, next_message).items():
                samples[level][name].append(value)
        print(f"  {label}: round {r + 1} of {args.runs} done", file=sys.stderr)
    return samples


def postgres_schema() -> str:
    schema = f"bench_digests_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"'.encode())
    return schema


def drop_schema(schema: str) -> None:
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())


def med(values: list[tuple[float, float]], i: int) -> float:
    return statistics.median(v[i] for v in values)


def ratio(top: list[tuple[float, float]], bottom: list[tuple[float, float]], i: int) -> float:
    return statistics.median(t[i] / b[i] for t, b in zip(top, bottom, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--messages", type=int, default=150)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    started, load_start = time.monotonic(), os.getloadavg()
    results: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        if "sqlite" in args.stores:
            results["SQLite file"] = measure(f"sqlite:///{folder}/digests.db", args, "sqlite")
        if "postgres" in args.stores:
            schema = postgres_schema()
            try:
                results["PostgreSQL"] = measure(f"{POSTGRES}?schema={schema}", args, "postgres")
            finally:
                drop_schema(schema)
    command = " ".join(["python", "benchmarks/check_digests.py", *sys.argv[1:]])
    lines = [
        "## Checked reads: what check_digests costs (benchmarks/check_digests.py)",
        "",
        f"Written by `benchmarks/check_digests.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    .venv/bin/{command}",
        "",
        f"- machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} cores; load average at the "
        f"start: {load_text(load_start)}, at the end: {load_text(os.getloadavg())} (the machine is shared)",
        f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"PostgreSQL {postgres_version(POSTGRES)}; {package_versions(('eventsourcing', 'psycopg'))}",
        "",
        f"{args.conversations} conversations of {args.messages} chat messages each under the default "
        "policy (100/10, so each holds a summary), filled untimed; then "
        f"{args.runs} rounds, the levels' order rotated from round to round, each level in turn "
        "doing: *cold load*, a new `Ledger` with the level, then `context()` of every conversation "
        f"(ms per conversation, the open not counted); *per turn*, {args.turns} turns of one `append` "
        "and one `context()` on that ledger, now warm (µs per turn). Medians over the rounds; in "
        "brackets, this process's CPU time. Ratios: the median of the per-round ratios to *off*.",
        "",
        "| store | check_digests | cold load ms/conversation | per turn µs "
        "| cold load / off | per turn / off |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for store, samples in results.items():
        off = samples["off"]
        for level in LEVELS:
            s = samples[level]
            lines.append(
                f"| {store} | `{level}` | {med(s['cold'], 0):.2f} ({med(s['cold'], 1):.2f}) | "
                f"{med(s['turn'], 0):,.0f} ({med(s['turn'], 1):,.0f}) | "
                f"{ratio(s['cold'], off['cold'], 0):.2f} ({ratio(s['cold'], off['cold'], 1):.2f}) | "
                f"{ratio(s['turn'], off['turn'], 0):.2f} ({ratio(s['turn'], off['turn'], 1):.2f}) |"
            )
    lines += [
        "",
        "A checked read runs what `verify` runs for the conversation: every stored event and "
        "snapshot is read and every digest recomputed. So `load` costs a cold load the whole "
        "log instead of the latest snapshot and the events after it, and grows with the "
        "log's length; turns served from the cache cost what they cost with `off`. `read` "
        "pays that on every `context()`. The default stays `off`: `verify` (and "
        "`contextledger verify`) checks the same on demand, and a store whose writers are "
        "not trusted turns on `load` (the per-turn cost unchanged) or `read`.",
        "",
        f"Run time: {time.monotonic() - started:.0f} s.",
    ]
    write_section("check_digests", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
