"""What the committed digest chain adds to an append: a salt, a commitment, a link.

    .venv/bin/python benchmarks/chain_commit.py [--rounds 30] [--calls 20000] [--no-write]

A link of the chain used to be SHA-256 over the previous link and the message's
canonical JSON (``chain_digest``). A link written now is a fresh 16-byte salt, SHA-256
over the salt and the same content (the commitment), and SHA-256 over the previous
link, the record's structure and the commitment (``commit``), the structure spelled
from the version, time and position. Both are timed on a ~90-character chat message,
``--calls`` calls per round, interleaved over ``--rounds`` rounds (thread CPU time,
so the machine's load weighs less); the table shows the median µs per call and the
median of the per-round ratios. Writes its section of docs/benchmarks.md
(``chain_commit``) unless ``--no-write``, and prints it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from contextledger.domain.values.digests import chain_digest, commit, message_content, structure
from contextledger.domain.values.messages import Message

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_model, load_text
from sections import write_section

MESSAGE = Message(
    role="user", content="Message 7: the flight to Lisbon leaves at 15:15 from gate 7, boarding at 14:40."
)
PREVIOUS = "0" * 64
AT = datetime(2026, 5, 2, 10, 0, tzinfo=UTC)


def old(calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        chain_digest(PREVIOUS, MESSAGE)
    return (time.thread_time() - start) / calls * 1e6


def new(calls: int) -> float:
    start = time.thread_time()
    for n in range(calls):
        commit(PREVIOUS, structure("message", n + 2, AT, n), message_content(MESSAGE))
    return (time.thread_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_start = os.getloadavg()
    began = time.monotonic()
    olds: list[float] = []
    news: list[float] = []
    for r in range(args.rounds):
        pair = (old, new) if r % 2 == 0 else (new, old)
        for run in pair:
            (olds if run is old else news).append(run(args.calls))
    ratios = [n / o for n, o in zip(news, olds, strict=True)]
    load_end = os.getloadavg()
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## The committed digest chain: what a link costs (benchmarks/chain_commit.py)",
        "",
        f"Written by `benchmarks/chain_commit.py` on {stamp}. Command:",
        "",
        f"    .venv/bin/python benchmarks/chain_commit.py --rounds {args.rounds} --calls {args.calls}",
        "",
        f"- machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} cores; load average at the "
        f"start: {load_text(load_start)}, at the end: {load_text(load_end)} (the machine is shared)",
        f"- Python {platform.python_version()}",
        "",
        "One message link, as an append computes it, on a ~90-character chat message: *before*, SHA-256 "
        "over the previous link and the message's canonical JSON; *now*, a fresh salt (`os.urandom(16)`), "
        "the commitment (SHA-256 over salt and content) and the link (SHA-256 over the previous link, the "
        "structure and the commitment). Thread CPU time, rounds interleaved; medians.",
        "",
        "| link | µs per append | ratio to before |",
        "|---|---:|---:|",
        f"| before (`chain_digest`) | {statistics.median(olds):.2f} | 1.00 |",
        f"| now (`commit`) | {statistics.median(news):.2f} | {statistics.median(ratios):.2f} |",
        "",
        f"Added per append: {statistics.median(news) - statistics.median(olds):.2f} µs of CPU, against an "
        "append's hundreds of µs on a store (the write_path section).",
        "",
        f"Run time: {time.monotonic() - began:.0f} s.",
    ]
    if not args.no_write:
        write_section("chain_commit", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
