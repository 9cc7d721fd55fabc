"""Benchmarks of contextledger; writes docs/benchmarks.md.

    .venv/bin/python benchmarks/run.py [--quick] [--only SECTION]

Sections: ``log`` (append, context() and cold-load latency against raw eventsourcing
saves on the same store), ``reduction`` (threshold events against the minimum, stable
prefixes, context() latency as history grows) and ``summarization`` (summarizer calls
and input tokens against the minimum and against re-summarizing everything;
summaries per second by concurrency). Every figure is a median of repeated samples,
and each comparison is a ratio measured in the same run, since shared machines are
noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from machine_info import cpu_model, package_versions, postgres_version
from sections import write_section

from contextledger.application import (
    Ledger,
    ReductionPolicy,
    Settings,
    SummarizationRunner,
    SummaryRequest,
    SummaryResult,
)
from contextledger.infrastructure.counting.tokens import TiktokenCounter
from contextledger.infrastructure.summarizers.offline_summarizer import OfflineSummarizer

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpora" / "plain" / "sgd_plain.jsonl"
POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
COUNTER = TiktokenCounter("gpt-4o-mini")


# ----------------------------------------------------------------------- helpers


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p95_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def corpus_texts() -> list[str]:
    texts: list[str] = []
    if CORPUS.exists():
        for line in CORPUS.read_text(encoding="utf-8").splitlines()[:300]:
            texts += [m["content"] for m in json.loads(line)["messages"] if m.get("content")]
    return texts or [f"Sample message number {i} about booking a table for four." for i in range(100)]


TEXTS = corpus_texts()


def plain_messages(start: int, n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if (start + i) % 2 == 0 else "assistant", "content": TEXTS[(start + i) % len(TEXTS)]}
        for i in range(n)
    ]


class SyncSummaries:
    """Records pending summaries right away (offline summarizer), outside the timings."""

    def __init__(self) -> None:
        self.summarizer = OfflineSummarizer(token_counter=COUNTER)

    def settle(self, ledger: Ledger, cid: uuid.UUID) -> None:
        while (request := ledger.pending_summary(cid)) is not None:
            ledger.record_summary(request, self.summarizer.summarize(request))


@contextmanager
def postgres_schema() -> Iterator[str | None]:
    try:
        import psycopg

        conn = psycopg.connect(POSTGRES, autocommit=True, connect_timeout=3)
    except Exception as exc:  # report, do not crash: the report says PostgreSQL was unreachable
        print(f"PostgreSQL unreachable: {exc}", file=sys.stderr)
        yield None
        return
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{POSTGRES}?schema={schema}"
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


class Chat(Aggregate):
    """The raw baseline: an eventsourcing aggregate, one dataclass event per message."""

    @event("Started")
    def __init__(self) -> None:
        self.count = 0

    @event("Appended")
    def append(self, message: dict[str, Any]) -> None:
        self.count += 1


def raw_app(url: str, tmp: Path) -> Application[Any]:
    if url.startswith("sqlite"):
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp / "raw.db")}
    else:
        base, schema = url.split("?schema=")
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": base.rsplit("/", 1)[1],
            "POSTGRES_HOST": "127.0.0.1",
            "POSTGRES_PORT": "5432",
            "POSTGRES_USER": "postgres",
            "POSTGRES_PASSWORD": "",
            "POSTGRES_SCHEMA": schema,
        }
    return Application(env=env)


# ---------------------------------------------------------------------- sections


@dataclass
class Report:
    lines: list[str]

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)
        for line in lines:
            print(line, flush=True)


def section_log(report: Report, quick: bool) -> None:
    sizes = [1000, 5000] if quick else [1000, 10_000, 100_000]
    samples = 60 if quick else 200
    report.add(
        "## The log: append and context() latency",
        "",
        f"One conversation per size (policy trigger 100 / keep 10, summaries recorded as they "
        f"fall due, outside the timings); {samples} single-message appends and {samples} "
        "`context()` calls at each size; *cold load* is `context(cid, version=current)`, which "
        "always rebuilds the conversation from its latest snapshot and the events after it. "
        "*raw save* is a plain eventsourcing aggregate saving one dataclass event per message "
        "of the same size on the same store, in the same run.",
        "",
        "| store | messages | append median ms | append p95 ms | raw save median ms | append / raw "
        "| context() median ms | context() p95 ms | cold load median ms |",
        "|---|---|---|---|---|---|---|---|---|",
    )
    with tempfile.TemporaryDirectory() as tmpdir, postgres_schema() as pg_url:
        tmp = Path(tmpdir)
        stores = [("SQLite file", f"sqlite:///{tmp / 'bench.db'}")]
        if pg_url is not None:
            stores.append(("PostgreSQL", pg_url))
        else:
            report.add("| PostgreSQL | unreachable in this run | | | | | | | |")
        for store, url in stores:
            raw = raw_app(url, tmp)
            chat = Chat()
            raw.save(chat)
            sync = SyncSummaries()
            with Ledger.open(url, run_policy=False) as ledger:
                for size in sizes:
                    cid = ledger.start(
                        "You are a helpful assistant.",
                        policy=ReductionPolicy(trigger_messages=100, keep_messages=10),
                    )
                    for start in range(0, size, 100):
                        ledger.extend(cid, plain_messages(start, min(100, size - start)))
                        sync.settle(ledger, cid)
                    appends: list[float] = []
                    for i in range(samples):
                        message = plain_messages(size + i, 1)[0]
                        started = time.perf_counter()
                        ledger.append(cid, message)
                        appends.append(time.perf_counter() - started)
                        sync.settle(ledger, cid)
                    raws: list[float] = []
                    for i in range(samples):
                        message = plain_messages(size + i, 1)[0]
                        started = time.perf_counter()
                        chat.append(message)
                        raw.save(chat)
                        raws.append(time.perf_counter() - started)
                    contexts = timed(lambda c=cid: ledger.context(c), samples)
                    current = ledger.working_memory(cid).version
                    cold = timed(lambda c=cid, v=current: ledger.context(c, version=v), max(20, samples // 5))
                    report.add(
                        f"| {store} | {size:,} | {median_ms(appends):.2f} | {p95_ms(appends):.2f} | "
                        f"{median_ms(raws):.2f} | {median_ms(appends) / median_ms(raws):.2f} | "
                        f"{median_ms(contexts):.3f} | {p95_ms(contexts):.3f} | {median_ms(cold):.2f} |"
                    )
            raw.close()
    report.add("")


def workload(n: int, seed: int = 2024) -> Iterator[dict[str, Any]]:
    """Turns of 10-400 tokens, about 10% tool turns with 200-2,000-token results."""
    rng = random.Random(seed)
    words = " ".join(TEXTS).split()
    turn = 0
    produced = 0

    def text(tokens: int) -> str:
        start = rng.randrange(len(words))
        return " ".join(words[(start + i) % len(words)] for i in range(max(1, int(tokens * 0.75))))

    while produced < n:
        turn += 1
        if rng.random() < 0.10 and produced + 2 <= n:
            call = f"call_{turn}"
            yield {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "x"}'},
                    }
                ],
            }
            yield {"role": "tool", "tool_call_id": call, "content": text(rng.randint(200, 2000))}
            produced += 2
        else:
            yield {"role": "user" if turn % 2 else "assistant", "content": text(rng.randint(10, 400))}
            produced += 1


def section_reduction(report: Report, quick: bool) -> None:
    n = 2000
    policy = ReductionPolicy(trigger_messages=100, keep_messages=10)
    sync = SyncSummaries()
    extends = stable = calls = 0
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("You are a research assistant.", policy=policy)
        previous: list[dict[str, Any]] | None = None
        for message in workload(n):
            ledger.append(cid, message)
            sync.settle(ledger, cid)
            context = ledger.context(cid)
            if previous is not None:
                calls += 1
                if context[: len(previous)] == previous:
                    extends += 1
            previous = context
        thresholds = sum(1 for e in ledger.replay(cid) if e.kind == "ThresholdReached")
        stable = extends
    minimum = (n - 10) // (100 - 10 + 1)
    report.add(
        "## Reduction: threshold events and stable prefixes",
        "",
        f"A seeded workload of {n:,} messages (turns of 10-400 tokens, about 10% tool turns "
        "with 200-2,000-token results), policy trigger 100 / keep 10, every summary recorded "
        "as soon as it falls due. The policy fires when more than 100 messages are "
        "unsummarized and keeps at most 10 (never splitting a tool-call group), so a crossing "
        "summarizes about 91 messages: one crossing per 91 messages after the first 100 is the "
        "fewest this policy allows, and the reference formula rounds the other way.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| threshold events | {thresholds} |",
        f"| reference floor((N - keep) / (trigger - keep + 1)) | {minimum} |",
        f"| turns whose context extends the previous one | {stable:,} of {calls:,} "
        f"({100 * stable / calls:.1f}%) |",
        "",
    )
    sizes = [2000, 20_000] if quick else [2000, 20_000, 100_000]
    report.add(
        "`context()` latency as the history grows (same workload, SQLite file):",
        "",
        "| messages | context() median ms | context() p95 ms | ratio to 2k |",
        "|---|---|---|---|",
    )
    with (
        tempfile.TemporaryDirectory() as tmpdir,
        Ledger.open(f"sqlite:///{Path(tmpdir) / 'r.db'}", run_policy=False) as ledger,
    ):
        cid = ledger.start("You are a research assistant.", policy=policy)
        stream = workload(sizes[-1] + 10)
        count = 0
        base = None
        for size in sizes:
            batch: list[dict[str, Any]] = []
            while count < size:
                message = next(stream)
                batch.append(message)
                count += 1
                if (len(batch) >= 100 and message["role"] != "assistant") or count == size:
                    if batch[-1].get("tool_calls"):
                        batch.append(next(stream))
                        count += 1
                    ledger.extend(cid, batch)
                    sync.settle(ledger, cid)
                    batch = []
            samples = timed(lambda: ledger.context(cid), 200)
            base = base or median_ms(samples)
            report.add(
                f"| {count:,} | {median_ms(samples):.3f} | {p95_ms(samples):.3f} | "
                f"{median_ms(samples) / base:.2f} |"
            )
    report.add("")


class SleepySummarizer:
    model = "sleepy"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        time.sleep(self.seconds)
        return SummaryResult(
            text=f"Summary of {request.from_position}-{request.through_position}.",
            model=self.model,
            prompt_version="sleepy-1",
        )


class MeasuringSummarizer:
    model = "measuring"

    def __init__(self) -> None:
        self.inner = OfflineSummarizer(token_counter=COUNTER)
        self.calls = 0
        self.input_tokens = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        self.input_tokens += COUNTER.count_text(request.previous_summary or "")
        self.input_tokens += sum(COUNTER.count_message(m) for m in request.messages)
        return self.inner.summarize(request)


def section_summarization(report: Report, quick: bool) -> None:
    n = 2000
    measuring = MeasuringSummarizer()
    naive_tokens = 0
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(
            "You are a research assistant.", policy=ReductionPolicy(trigger_messages=100, keep_messages=10)
        )
        history_tokens = 0
        for message in workload(n):
            ledger.append(cid, message)
            history_tokens = ledger.totals(cid).appended_tokens
            while (request := ledger.pending_summary(cid)) is not None:
                # Re-summarizing everything would send the whole history at this crossing.
                naive_tokens += history_tokens
                ledger.record_summary(request, measuring.summarize(request))
    minimum = (n - 10) // (100 - 10 + 1)
    report.add(
        "## Summarization: calls and input tokens",
        "",
        f"The same {n:,}-message workload; input tokens are the previous summary plus the newly "
        "covered messages sent at each call, against re-summarizing the whole history at each "
        "crossing.",
        "",
        "| strategy | summarizer calls | input tokens |",
        "|---|---|---|",
        f"| contextledger (previous summary + new messages) | {measuring.calls} "
        f"| {measuring.input_tokens:,} |",
        f"| reference floor((N - keep) / (trigger - keep + 1)) | {minimum} | |",
        f"| re-summarize everything at each crossing | {measuring.calls} | {naive_tokens:,} |",
        f"| ratio contextledger / re-summarize | | {measuring.input_tokens / naive_tokens:.3f} |",
        "",
    )
    conversations = 48 if quick else 96
    report.add(
        "Summaries per second with a 200 ms summarizer, by concurrency: "
        f"{conversations} conversations, each with one pending range, drained by the background "
        "policy; timed from its start until `wait_idle()` returns (SQLite file).",
        "",
        "| concurrent summarizations | summaries | seconds | summaries/s | ratio to 1 |",
        "|---|---|---|---|---|",
    )
    base = None
    for concurrency in (1, 4, 16):
        with tempfile.TemporaryDirectory() as tmpdir:
            settings = Settings(
                database_url=f"sqlite:///{Path(tmpdir) / 's.db'}",
                max_concurrent_summaries=concurrency,
                poll_interval=0.01,
                run_policy=False,
            )
            with Ledger.open(settings=settings) as ledger:
                ids = [
                    ledger.start("s", policy=ReductionPolicy(trigger_messages=20, keep_messages=2))
                    for _ in range(conversations)
                ]
                for cid in ids:
                    ledger.extend(cid, plain_messages(0, 21))
                runner = SummarizationRunner(ledger, SleepySummarizer(0.2), max_concurrent=concurrency)
                started = time.perf_counter()
                ledger.attach(runner)
                assert ledger.wait_idle(600)
                elapsed = time.perf_counter() - started
                done = sum(ledger.totals(cid).summaries for cid in ids)
            rate = done / elapsed
            base = base or rate
            report.add(f"| {concurrency} | {done} | {elapsed:.2f} | {rate:.1f} | {rate / base:.2f} |")
    report.add("")


# ------------------------------------------------------------------------- main


def machine() -> list[str]:
    mem = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kb = int(meminfo.read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    packages = package_versions(("eventsourcing", "pydantic", "SQLAlchemy", "psycopg", "openai", "tiktoken"))
    return [
        f"- machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} cores, {mem} RAM",
        f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"PostgreSQL {postgres_version(POSTGRES)}",
        f"- packages: {packages}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a fast check")
    parser.add_argument("--only", choices=["log", "reduction", "summarization"])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args()
    command = (
        ".venv/bin/python benchmarks/run.py"
        + (" --quick" if args.quick else "")
        + (f" --only {args.only}" if args.only else "")
    )
    report = Report([])
    report.add(
        f"Written by `benchmarks/run.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(),
        "",
        "Medians of repeated samples; ratios compare against a baseline measured in the same "
        "run, because these machines are shared and noisy.",
        "",
    )
    started = time.perf_counter()
    sections = {"log": section_log, "reduction": section_reduction, "summarization": section_summarization}
    for name, section in sections.items():
        if args.only in (None, name):
            section(report, args.quick)
    report.add(f"Total run time: {time.perf_counter() - started:.0f} s.")
    write_section("run", report.lines, args.output)  # the other scripts' sections stay
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
