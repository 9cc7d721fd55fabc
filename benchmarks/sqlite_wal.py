"""Timing SQLite writers with their write-ahead logs in the state a running service has.

A new SQLite file's log grows with every commit until its first checkpoint (1,000
pages by default) and is then written over from its start. A commit's flush that
grows the file also writes the file's new size, which on this machine's disk costs
about twice as much as one that writes over pages already there (measured with
``os.write`` + ``os.fdatasync`` of 4 KiB: 180-200 µs growing, 80-95 µs overwriting).
So a writer timed while its log grows looks slower than the same writer later, and
two writers compared in different states of their logs are not compared fairly: the
benchmarks write to every SQLite file until its log stops growing before they time
anything (``recycle_wal``), as a service that has run a while finds it.
"""

from __future__ import annotations

import asyncio
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
