"""Waiting, in a test, for a PostgreSQL statement to block on a lock another
connection holds (an erasure held open, say)."""

from __future__ import annotations

import time
from typing import Any


def lock_waiters(watcher: Any, schema: str, done: list[Any], *, tries: int = 600) -> int:
    """How many statements naming ``schema`` wait for a lock, polled (every 50 ms, up
    to ``tries`` times) until one does or ``done`` (the writer's outcome) fills."""
    waiting = 0
    for _ in range(tries):
        waiting = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            (f"%{schema}%",),
        ).fetchone()[0]
        if waiting or done:
            break
        time.sleep(0.05)
    return int(waiting)
