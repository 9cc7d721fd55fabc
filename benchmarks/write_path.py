"""The write path: where an append's time goes, and writers side by side on one PostgreSQL.

    .venv/bin/python benchmarks/write_path.py [--quick]

Writes the section between ``<!-- write_path:begin -->`` and ``<!-- write_path:end -->``
of docs/benchmarks.md (appended if missing; the rest of the file is left alone):

- *profile*: one writer, 200 appends under cProfile on a SQLite file and on PostgreSQL
  (the ledger's recorder, and eventsourcing's own recorder with a pre-ping per checkout
  as it was configured before): the share of time in the domain command, in encoding,
  in the recorder (SQL and commit), round trips and statements per append;
- *latency*: one writer, per-append median against a plain ``INSERT`` + commit of the
  same JSON into a ``(conversation_id, position, body)`` table, SQLite file and PostgreSQL;
- *throughput*: contextledger, the plain ``INSERT`` baseline (a connection per writer, a
  commit per message) and the OpenAI Agents SDK's ``SQLAlchemySession`` (psycopg 3 async)
  on the same PostgreSQL: 1, 4, 8 writer processes on separate conversations, 2 processes
  x 8 threads (one Ledger per process; the SDK: 8 tasks on one engine per process), and
  8 processes on one conversation;
- *window*: an append's CPU with 100, 1,000 and 5,000 messages in the window, on every backend;
- *context()*: latency at 2,000 and 20,000 messages on every backend, policy thread running;
- *cold load*: a fresh process opens the store and reads a 20,000-message conversation's
  context, against ``SQLiteSession`` / ``SQLAlchemySession.get_items()`` of 20,000 items.

Every figure is the median over interleaved runs (``--runs``, default 3) measured in this
one run; ledgers run their policy thread with a summarizer that answers at once (the
offline summarizer's own cost is measured in benchmarks/run.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import psycopg
from sections import write_section  # benchmarks/sections.py (run as a script)
from write_path_common import POLICY, REPO, message, open_ledger, pg_base, plain_setup_pg, sdk_setup
from write_path_findings import FINDINGS
from write_path_profile import section_profile
from write_path_reads import section_cold, section_context, section_window
from write_path_writers import section_latency, section_throughput

#: Imported from here by other scripts (benchmarks/append_floor.py).
__all__ = ["POLICY", "main", "message", "open_ledger"]


def machine(load_before: str) -> list[str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    with psycopg.connect(pg_base()) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    pkgs = ", ".join(f"{p} {version(p)}" for p in ("eventsourcing", "psycopg", "SQLAlchemy", "openai-agents"))
    return [
        f"- machine: {platform.platform()}, {cpu}, {os.cpu_count()} cores; load average at the start: "
        f"{load_before}, at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])} "
        "(the machine is shared)",
        f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"PostgreSQL {row[0] if row else '?'}; {pkgs}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short runs, for a fast check")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--only", choices=["profile", "latency", "throughput", "window", "context"], default=None
    )
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    quick = args.quick
    seconds = 1.0 if quick else args.seconds
    big = 4000 if quick else 20_000
    command = (
        ".venv/bin/python benchmarks/write_path.py"
        + (" --quick" if quick else "")
        + (f" --runs {args.runs}" if args.runs != 3 else "")
        + (f" --seconds {args.seconds:g}" if args.seconds != 3.0 and not quick else "")
        + (f" --only {args.only}" if args.only else "")
    )
    schema = f"bench_wp_{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    body: list[str] = []
    with psycopg.connect(pg_base(), autocommit=True) as admin:
        for s in (schema, schema + "_lib"):
            admin.execute(f'CREATE SCHEMA "{s}"')
        try:
            plain_setup_pg(schema)
            sdk_setup(schema)
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                if args.only in (None, "profile"):
                    section_profile(body, tmp, schema, 60 if quick else 200)
                if args.only in (None, "latency"):
                    section_latency(body, tmp, schema, args.runs, 60 if quick else 300)
                if args.only in (None, "throughput"):
                    section_throughput(body, schema, args.runs, seconds)
                if args.only in (None, "window"):
                    section_window(body, tmp, schema, args.runs, 100 if quick else 400)
                if args.only in (None, "context"):
                    kept = section_context(body, tmp, schema, args.runs, 100 if quick else 400, big)
                    section_cold(body, tmp, schema, kept, args.runs, big)
        finally:
            for s in (schema, schema + "_lib"):
                admin.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
    head = [
        "## The write path (benchmarks/write_path.py)",
        "",
        f"Written by `benchmarks/write_path.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(load_before),
        "",
        "Targets: 8 writer processes ≥ 0.4x plain INSERT and above 1 writer; 2 x 8 threads ≥ 0.5x; "
        "1 writer ≤ 2x a plain INSERT + commit on both stores; context() at 20k within 1.2x of 2k.",
        "",
        *FINDINGS,
    ]
    body.append(f"Run time: {time.perf_counter() - started:.0f} s.")
    write_section("write_path", head + body, args.output)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
