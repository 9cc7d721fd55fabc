"""Timing SQLite writers with their write-ahead logs in the state a running service has.

A new SQLite file's log grows with every commit until its first checkpoint (1,000
pages by default) and is then written over from its start. A commit's flush that
grows the file also writes the file's new size, which on these machines' disks costs
half as much again to twice what one that writes over pages already there costs (a
4 KiB ``os.write`` + ``os.fdatasync``: 130-260 µs growing, 84-105 µs writing over).
So a writer timed while its log grows looks slower than the same writer later, and
two writers compared in different states of their logs are not compared fairly: the
benchmarks write to every SQLite file until its log stops growing before they time
anything (``recycle_wal``), as a service that has run a while finds it.

    .venv/bin/python benchmarks/sqlite_wal.py [--writes 500] [--runs 3]

prints the two flushes' costs on this machine's disk (the median per run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["recycle_wal", "recycle_wal_now"]


async def recycle_wal(
    write: Callable[[int], Awaitable[Any]], wal: Path, *, settled: int = 200, most: int = 20000
) -> int:
    """Call ``write(n)`` until the log ``wal`` stopped growing: ``settled`` writes in a
    row left its size alone (at most ``most`` writes). Returns the writes made."""
    size, same, n = -1, 0, 0
    while same < settled and n < most:
        await write(n)
        n += 1
        now = wal.stat().st_size if wal.exists() else 0
        same = same + 1 if now == size and now > 0 else 0
        size = now
    if same < settled:
        raise RuntimeError(f"{wal} still grew after {n} writes")
    return n


def recycle_wal_now(write: Callable[[int], Any], wal: Path, **options: int) -> int:
    """``recycle_wal`` for a writer that is not a coroutine."""

    async def step(n: int) -> None:
        write(n)

    return asyncio.run(recycle_wal(step, wal, **options))


def flush_costs(path: Path, writes: int) -> tuple[float, float]:
    """Median seconds of a 4 KiB write and ``fdatasync`` that grows the file, then of one
    that writes over pages already there."""
    block = b"x" * 4120  # a WAL frame: a 4 KiB page and its 24-byte header
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        growing, over = [], []
        for _ in range(writes):
            started = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            growing.append(time.perf_counter() - started)
        for n in range(writes):
            started = time.perf_counter()
            os.pwrite(fd, block, n * len(block))
            os.fdatasync(fd)
            over.append(time.perf_counter() - started)
        return statistics.median(growing), statistics.median(over)
    finally:
        os.close(fd)
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description="a flush that grows a file against one that overwrites it")
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as tmp:
        for run in range(args.runs):
            growing, over = flush_costs(Path(tmp) / "flush.bin", args.writes)
            print(
                f"run {run + 1}: 4 KiB write + fdatasync growing the file {growing * 1e6:.0f} µs, "
                f"writing over it {over * 1e6:.0f} µs ({growing / over:.2f}x)"
            )


if __name__ == "__main__":
    main()
