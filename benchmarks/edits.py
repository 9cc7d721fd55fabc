"""Benchmark of edits: edit-and-regenerate on a 2,000-message conversation with summaries.

    .venv/bin/python benchmarks/edits.py [--runs 5]

A base conversation of 2,000 messages is built once per store and policy, summarized as
it grows (a constant-time summarizer that counts its calls). Each run forks it (forks share its summaries) and
times, on the fork, the edit command(s) plus the ``context()`` that follows, then
counts the summarizer calls the edit causes until nothing is pending. The first run
of a scenario reads the source's log once (an edit that reaches summarized history
folds the log); later runs fold only the events since, as repeated edits of a live
conversation do. Writes its section of docs/benchmarks.md (between
``<!-- edits:begin -->`` and ``<!-- edits:end -->``; the rest is left alone).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sections import write_section

from contextledger.application import (
    Ledger,
    ReductionPolicy,
    SummaryRequest,
    SummaryResult,
)

MESSAGES = 2000
POLICIES = {
    "single": ReductionPolicy(trigger_messages=100, keep_messages=10),
    "layered": ReductionPolicy(trigger_messages=100, keep_messages=10, summary_mode="layered",
                               layered_max_tokens=100_000),
}


class CountingSummarizer:
    """A constant-time summarizer counting calls and input messages (the benchmark
    measures what an edit costs the ledger, not a summarizer's own speed)."""

    model = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self.messages = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        self.messages += len(request.messages)
        text = f"Turns {request.from_position}-{request.through_position}: hotels were found."
        return SummaryResult(text=text, model=self.model, prompt_version="bench")


def drain(ledger: Ledger, cid: UUID, summarizer: CountingSummarizer) -> None:
    while (request := ledger.pending_summary(cid)) is not None:
        ledger.record_summary(request, summarizer.summarize(request))


def build(ledger: Ledger, policy: ReductionPolicy, summarizer: CountingSummarizer) -> UUID:
    cid = ledger.start("You are a travel agent.", policy=policy)
    for i in range(0, MESSAGES, 2):
        ledger.extend(cid, [
            {"role": "user", "content": f"Turn {i}: can you find a hotel near the station in city {i % 37}?"},
            {"role": "assistant", "content": f"Turn {i}: three hotels near station {i % 37} have rooms."},
        ])
        drain(ledger, cid, summarizer)
    return cid


def regenerate_last(ledger: Ledger, cid: UUID) -> None:
    """Edit the last user message and regenerate: rewind to it, append a new answer."""
    last_user = MESSAGES - 2
    ledger.edit(cid, last_user, {"role": "user", "content": "Actually, near the airport please."})
    ledger.rewind(cid, last_user)
    ledger.append(cid, {"role": "assistant", "content": "Two hotels near the airport have rooms."})


def edit_at(position: int) -> Callable[[Ledger, UUID], None]:
    def run(ledger: Ledger, cid: UUID) -> None:
        ledger.edit(cid, position, {"role": "user", "content": f"Edited turn {position}."})
    return run


def retract_at(position: int) -> Callable[[Ledger, UUID], None]:
    def run(ledger: Ledger, cid: UUID) -> None:
        ledger.retract(cid, position, reason="benchmark")
    return run


SCENARIOS: list[tuple[str, Callable[[Ledger, UUID], None]]] = [
    ("edit + rewind + append the last turn (unsummarized)", regenerate_last),
    ("edit message 1000 (summarized)", edit_at(1000)),
    ("retract message 1000 (summarized)", retract_at(1000)),
    ("edit message 10 (oldest summary)", edit_at(10)),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for store in ("memory", "sqlite"):
            for mode, policy in POLICIES.items():
                url = "memory://" if store == "memory" else f"sqlite:///{Path(tmp) / f'{mode}.db'}"
                summarizer = CountingSummarizer()
                with Ledger.open(url, run_policy=False, summarizer=summarizer) as ledger:
                    base = build(ledger, policy, summarizer)
                    for name, scenario in SCENARIOS:
                        times: list[float] = []
                        calls: list[int] = []
                        inputs: list[int] = []
                        for _ in range(args.runs):
                            cid = ledger.fork(base)
                            ledger.context(cid)  # load and cache the fork, as a live conversation is
                            summarizer.calls = summarizer.messages = 0
                            started = time.perf_counter()
                            scenario(ledger, cid)
                            ledger.context(cid)
                            times.append(time.perf_counter() - started)
                            drain(ledger, cid, summarizer)
                            calls.append(summarizer.calls)
                            inputs.append(summarizer.messages)
                        rows.append(
                            f"| {store} | {mode} | {name} | {times[0] * 1000:.0f} | "
                            f"{statistics.median(times[1:]) * 1000:.0f} | "
                            f"{statistics.median(calls):.0f} | {statistics.median(inputs):.0f} |"
                        )
                        print(rows[-1], file=sys.stderr)
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## Edits: edit-and-regenerate on a summarized conversation", "",
        f"Written by `benchmarks/edits.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:", "",
        f"    .venv/bin/python benchmarks/edits.py "
        f"--runs {args.runs}", "",
        f"- machine: {platform.platform()}, {os.cpu_count()} cores, shared: load average "
        f"{load_avg:.1f} at the end of the run", "",
        f"A {MESSAGES}-message conversation (trigger 100, keep 10), summarized as it grew, is "
        "forked for each run (forks share its summaries); the time is the edit command(s) plus "
        "the `context()` after them, on the fork. The first run folds the source's log once; "
        f"later runs are medians of {args.runs - 1}. *Summarizer calls caused* and *messages "
        "re-summarized* count what the edit's invalidations cost until nothing is pending.", "",
        "| store | mode | edit | first run (ms) | later runs (ms) | summarizer calls caused "
        "| messages re-summarized |",
        "|---|---|---|---:|---:|---:|---:|",
        *rows,
    ]
    write_section("edits", lines)
    print("\n".join(lines))

if __name__ == "__main__":
    main()
