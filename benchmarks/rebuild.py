"""Benchmark of read-model rebuilds and catch-up against the rate the log decodes at.

    .venv/bin/python benchmarks/rebuild.py \\
        --events 20000,200000 [--stores sqlite,postgres,sqlite+key,postgres+key] [--catchup 0.1]
        [--section rebuild] [--no-write]

How the stores are built (quickly, and not through ``Ledger.append``): one template
conversation of ``--messages`` messages is written through a memory ledger with
summaries (a constant-time summarizer), so its events are real ones the domain made
(digests, token counts, ``SummaryCreated``). The generator then decodes them and
writes copies under fresh conversation ids through the target ledger's own mapper
(``to_stored_event``) and recorder (``insert_events``), 5,000 events per
transaction, so 200,000 events take seconds, not the minutes that one save per
append would. The copies are what the log holds after as many conversations of the
same shape; their digest chains name the template's history, which no read model
looks at.

What each store holds (``--stores``):

- ``sqlite``, ``postgres``: no encryption at all (``key_scope="store"`` without a cipher
  key: no key table, the events' state and the read models' values in clear). This is
  the plaintext baseline; since per-subject keys became the default, a store opened
  without a cipher key otherwise still encrypts its events under unwrapped data keys;
- ``+key`` (``sqlite+key``, ``postgres+key``): the default with a master key (a random
  cipher key, ``key_scope="subject"``): a data key per conversation, wrapped under the
  master key in the store's key table; every event's state AES-GCM-encrypted under its
  conversation's key, and the read models' values sealed per subject
  (``readmodels/sealing.py``), so both the decryption and the sealing are in its rates;
- ``+subject``: the default without a master key (``key_scope="subject"``, no cipher
  key): the events under unwrapped per-subject data keys, the read models' values in
  clear.

On PostgreSQL the event
table is analyzed once the generator has written it, as autovacuum would (the test
server runs without it): without statistics the planner reads each page of the log as
a bitmap scan of every row up to the head, sorted, which makes reading the whole log
quadratic in its length and measures the missing statistics, not the code.

Measured in one run, per store and size:

- raw read: the notification log's rows, 5,000 per query, not decoded;
- decode: the same rows decoded to domain events by the ledger's mapper (the rate
  every reader of the log is bounded by), and ``Ledger.replay`` per conversation;
- each read model's rebuild alone, and all four in one pass (``rebuild`` without a
  name), as events of the log per second and as a share of the decode rate;
- catch-up: a worker that was down while ``--catchup`` times the log's events were
  appended, catching all four read models up (``ReadModelRunner.catch_up``, what the
  ``worker`` command runs on starting).

The report ends with the targets: all four read models in one pass and a worker's
catch-up at 10,000 events/s or more, and each encrypted store's rebuild at half the rate
of the plaintext store of the same kind and size or more (``+key`` over the plain one,
when both are in the run).

Writes its section of docs/benchmarks.md (between ``<!-- rebuild:begin -->`` and
``<!-- rebuild:end -->``, or the section ``--section`` names; the rest is left alone).
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_model, postgres_version
from sections import write_section

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult
from contextledger.infrastructure.persistence.database import Database
from contextledger.infrastructure.readmodel_names import READ_MODEL_NAMES
from contextledger.infrastructure.readmodels import SQLReadModels

POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
POLICY = ReductionPolicy(trigger_messages=100, keep_messages=10)
#: Events per insert transaction while generating a store.
CHUNK = 5000


class ConstantSummarizer:
    """A summarizer that answers at once (the benchmark measures the read models)."""

    model = "constant"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        text = f"Turns {request.from_position}-{request.through_position}: parcels were tracked."
        return SummaryResult(
            text=text,
            model=self.model,
            prompt_version="bench",
            input_tokens=10 * len(request.messages),
            output_tokens=7,
        )


def template(messages: int) -> list[Any]:
    """The domain events of one conversation of ``messages`` messages, summarized as
    it grew, written through a memory ledger."""
    summarizer = ConstantSummarizer()
    with Ledger.open("memory://", summarizer=summarizer, run_policy=False) as ledger:
        cid = ledger.start("You track parcels for a shop.", policy=POLICY)
        for i in range(0, messages, 2):
            ledger.extend(
                cid,
                [
                    {
                        "role": "user",
                        "content": f"Turn {i}: where is order {i * 7919 % 100000}? It was due on "
                        f"day {i % 28 + 1}.",
                    },
                    {
                        "role": "assistant",
                        "content": f"Turn {i}: order {i * 7919 % 100000} left the depot in "
                        f"city {i % 37} and arrives tomorrow.",
                    },
                ],
            )
            while (request := ledger.pending_summary(cid)) is not None:
                ledger.record_summary(request, summarizer.summarize(request))
        notifications = ledger.recorder.select_notifications(1, 10 * messages + 100)
        return [ledger.mapper.to_domain_event(n) for n in notifications]


def generate(ledger: Ledger, events: list[Any], total: int) -> int:
    """Append copies of ``events`` under fresh conversation ids until ``total`` events
    are written; returns the events written."""
    mapper, recorder = ledger.mapper, ledger.recorder
    written, pending = 0, []
    while written + len(pending) < total:
        cid = uuid.uuid4()
        for event in events:
            pending.append(mapper.to_stored_event(event.model_copy(update={"originator_id": cid})))
            if len(pending) >= CHUNK:
                recorder.insert_events(pending)
                written, pending = written + len(pending), []
    if pending:
        recorder.insert_events(pending)
        written += len(pending)
    return written


def timed(work: Callable[[], Any]) -> tuple[float, Any, float]:
    """(wall seconds, result, this process's CPU seconds)."""
    began, cpu = time.perf_counter(), time.process_time()
    result = work()
    return time.perf_counter() - began, result, time.process_time() - cpu


def read_rows(ledger: Ledger, decode: bool) -> int:
    """Read (and decode) the whole log, 5,000 rows per query; returns the rows."""
    recorder, to_event = ledger.recorder, ledger.mapper.to_domain_event
    start, count = 1, 0
    while rows := recorder.select_notifications(start, 5000):
        if decode:
            for row in rows:
                to_event(row)
        count += len(rows)
        start = rows[-1].id + 1
    return count


def replay_all(ledger: Ledger) -> int:
    return sum(sum(1 for _ in ledger.replay(cid)) for cid in ledger.conversation_ids())


def analyze(ledger: Ledger) -> None:
    """Give PostgreSQL's planner the event table's statistics (see the module doc)."""
    database = Database.parse(ledger.settings.database_url)
    if database.kind != "postgresql":
        return
    schema = database.schema
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema or "public"}".contextledger_events')


#: Per ``--stores`` suffix: (cipher key?, key scope).
MODES = {"": (False, "store"), "key": (True, "subject"), "subject": (False, "subject")}


def settings_for(url: str, mode: str) -> Settings:
    """The settings of a store of ``mode`` (a ``--stores`` suffix: see the module doc)."""
    keyed, scope = MODES[mode]
    key = base64.b64encode(os.urandom(32)).decode() if keyed else None
    return Settings(database_url=url, cipher_key=key, key_scope=scope)  # type: ignore[arg-type]


def measure(
    url: str, total: int, events: list[Any], catchup: float, mode: str = "", targets_only: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"load": os.getloadavg()[0]}
    settings = settings_for(url, mode)
    with Ledger.open(settings=settings, summarizer=ConstantSummarizer(), run_policy=False) as ledger:
        out["generate"] = timed(lambda: generate(ledger, events, total))
        analyze(ledger)
        head = ledger.recorder.max_notification_id() or 0
        out["events"] = head
        if not targets_only:
            out["raw"] = timed(lambda: read_rows(ledger, decode=False))
        out["decode"] = timed(lambda: read_rows(ledger, decode=True))
        if not targets_only:
            out["replay"] = timed(lambda: replay_all(ledger))
        models = SQLReadModels.for_ledger(ledger)
        try:
            runner = models.runner(ledger, close_with_runner=False)
            for name in () if targets_only else READ_MODEL_NAMES:
                out[name] = timed(lambda name=name: runner.rebuild(name))
                print(f"  {name}: {head / out[name][0]:,.0f} events/s", file=sys.stderr)
            out["all"] = timed(lambda: runner.rebuild_many(READ_MODEL_NAMES))
            more = int(head * catchup)
            generate(ledger, events, more)
            analyze(ledger)
            worker = models.runner(ledger, close_with_runner=False)  # a worker started again
            out["catchup"] = timed(worker.catch_up)
            out["catchup_events"] = (ledger.recorder.max_notification_id() or 0) - head
            print(
                f"  all four: {rate(out['all'], head):,.0f} events/s; catch-up: "
                f"{rate(out['catchup'], out['catchup_events']):,.0f} events/s",
                file=sys.stderr,
            )
        finally:
            models.close()
    return out


def machine() -> list[str]:
    return [
        f"- machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} cores (shared: load average "
        f"{os.getloadavg()[0]:.1f} at the end of the run)",
        f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"PostgreSQL {postgres_version(POSTGRES)}",
    ]


def rate(result: tuple[float, Any], events: int) -> float:
    return events / result[0] if result[0] > 0 else float("inf")


def report(results: dict[tuple[str, int], dict[str, Any]], command: str, messages: int) -> list[str]:
    lines = [
        f"Written by `benchmarks/rebuild.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(),
        "",
        f"Stores built by the generator: copies of one {messages}-message conversation with its summaries, "
        "written through the ledger's own mapper and recorder, 5,000 events per transaction (not one save "
        "per append). Rates are events of the log per second (a read model skips what it does not follow "
        "but still reads it); *share* is the rate over the decode rate measured in the same run. One "
        "sample each, on a shared machine.",
        "",
        "| store | events | build | raw read | decode (log) | `replay` | transcript | summaries "
        "| token_totals | conversations | all four, one pass | catch-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (store, _size), r in sorted(results.items()):
        n = r["events"]
        decode = rate(r["decode"], n)

        def cell(key: str, r: dict[str, Any] = r, n: int = n, decode: float = decode) -> str:
            if key not in r:  # --targets-only
                return "-"
            value = rate(r[key], n)
            return f"{value:,.0f}/s ({value / decode:.2f})"

        catchup = rate(r["catchup"], r["catchup_events"])
        lines.append(
            f"| {store} | {n:,} | {r['generate'][0]:.1f} s | {cell('raw')} | {decode:,.0f}/s "
            f"| {cell('replay')} | {cell('transcript')} | {cell('summaries')} "
            f"| {cell('token_totals')} | {cell('conversations')} | {cell('all')} "
            f"| {r['catchup_events']:,} in {r['catchup'][0]:.1f} s: "
            f"{catchup:,.0f}/s ({catchup / decode:.2f}) |"
        )
    lines += [
        "",
        "In parentheses: the share of the decode rate. *build*: the generator's time for the "
        "store. *catch-up*: all four read models, by a worker started after that many events were "
        "appended while it was down.",
        "",
        "The same shares by this process's CPU time instead of wall time (steadier on a shared "
        "machine; the PostgreSQL server's own work is not in it), and the load average when the "
        "store's measurements began:",
        "",
        "| store | events | load | transcript | summaries | token_totals | conversations "
        "| all four, one pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (store, _size), r in sorted(results.items()):
        decode_cpu = r["decode"][2]
        shares = " | ".join(
            f"{decode_cpu / r[key][2]:.2f}" if key in r and r[key][2] > 0 else "-"
            for key in ("transcript", "summaries", "token_totals", "conversations", "all")
        )
        lines.append(f"| {store} | {r['events']:,} | {r['load']:.1f} | {shares} |")
    return [*lines, "", *targets(results)]


#: The targets: events of the log per second, all four read models in one pass and a
#: worker's catch-up; an encrypted store's rebuild rate over the plaintext one's.
TARGET_RATE = 10_000
TARGET_SHARE = 0.5


def targets(results: dict[tuple[str, int], dict[str, Any]]) -> list[str]:
    """The table of the targets: each store's all-four and catch-up rates (wall clock,
    and by this process's CPU time), and each encrypted store's all-four rate over the
    plaintext store of the same kind and size measured in the same run."""

    def met(value: float, target: float) -> str:
        return "met" if value >= target else "not met"

    lines = [
        f"Against the targets: all four read models in one pass and a worker's catch-up at "
        f"{TARGET_RATE:,} events/s or more; an encrypted store (`+key`: per-subject keys under a "
        f"master key, read-model values sealed per subject; `+subject`: per-subject keys without "
        f"one) rebuilt at {TARGET_SHARE}x the rate of the plaintext store (no encryption at all: "
        '`key_scope="store"` without a cipher key) of the same kind and size or more. Wall clock, '
        "and in brackets the rate by this process's CPU time (the PostgreSQL server's work not in it).",
        "",
        "| store | events | all four, one pass | catch-up | all four against plaintext |",
        "|---|---|---|---|---|",
    ]
    for (store, size), r in sorted(results.items()):
        n, caught = r["events"], r["catchup_events"]
        every, every_cpu = rate(r["all"], n), n / r["all"][2] if r["all"][2] > 0 else float("inf")
        catch = rate(r["catchup"], caught)
        catch_cpu = caught / r["catchup"][2] if r["catchup"][2] > 0 else float("inf")
        kind, _, mode = store.partition("+")
        plain = results.get((kind, size))
        versus = "-"
        if mode and plain is not None:
            base = rate(plain["all"], plain["events"])
            base_cpu = plain["events"] / plain["all"][2] if plain["all"][2] > 0 else float("inf")
            ratio, ratio_cpu = every / base, every_cpu / base_cpu
            versus = f"{ratio:.2f}x ({ratio_cpu:.2f}x): {met(ratio, TARGET_SHARE)}"
        lines.append(
            f"| {store} | {n:,} | {every:,.0f}/s ({every_cpu:,.0f}/s): {met(every, TARGET_RATE)} "
            f"| {caught:,} at {catch:,.0f}/s ({catch_cpu:,.0f}/s): {met(catch, TARGET_RATE)} | {versus} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="20000,200000", help="store sizes, comma-separated")
    parser.add_argument(
        "--stores",
        default="sqlite,postgres",
        help="sqlite, postgres (no encryption), either with +key (per-subject keys under a "
        "master key) or +subject (per-subject keys without one)",
    )
    parser.add_argument("--messages", type=int, default=500, help="messages per conversation")
    parser.add_argument(
        "--catchup",
        type=float,
        default=0.1,
        help="events appended while the worker is down, as a share of the store's",
    )
    parser.add_argument(
        "--section",
        default="rebuild",
        help="the section of docs/benchmarks.md to write (another keeps a run apart)",
    )
    parser.add_argument(
        "--targets-only",
        action="store_true",
        help="measure what the targets name (decode, all four in one pass, catch-up), "
        "not each read model alone",
    )
    parser.add_argument("--no-write", action="store_true", help="print the section, leave the docs alone")
    args = parser.parse_args()
    for store in args.stores.split(","):
        kind, _, mode = store.partition("+")
        if kind not in ("sqlite", "postgres") or mode not in MODES:
            parser.error(f"unknown store {store!r}: sqlite or postgres, optionally +key or +subject")
    events = template(args.messages)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    import psycopg

    with tempfile.TemporaryDirectory() as work:
        for size in (int(s) for s in args.events.split(",")):
            for store in args.stores.split(","):
                print(f"{store}, {size:,} events", file=sys.stderr)
                kind, _, mode = store.partition("+")
                if kind == "sqlite":
                    name = f"{work}/ledger-{size}-{mode or 'plain'}.db"
                    results[(store, size)] = measure(
                        f"sqlite:///{name}", size, events, args.catchup, mode, args.targets_only
                    )
                    continue
                schema = f"bench_rebuild_{uuid.uuid4().hex[:8]}"
                with psycopg.connect(POSTGRES, autocommit=True) as admin:
                    admin.execute(f'CREATE SCHEMA "{schema}"')
                try:
                    url = f"{POSTGRES}?schema={schema}"
                    results[(store, size)] = measure(url, size, events, args.catchup, mode, args.targets_only)
                finally:
                    with psycopg.connect(POSTGRES, autocommit=True) as admin:
                        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    command = ".venv/bin/python benchmarks/rebuild.py "
    command += " ".join(sys.argv[1:])
    lines = report(results, command.strip(), args.messages)
    print("\n".join(lines))
    if not args.no_write:
        title = "## Read models: rebuild and catch-up (benchmarks/rebuild.py)"
        if args.section != "rebuild":
            title = f"### Read models at {args.events} events (benchmarks/rebuild.py)"
        write_section(args.section, [title, "", *lines])


if __name__ == "__main__":
    main()
