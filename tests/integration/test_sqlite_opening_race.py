"""Processes opening one new SQLite file at once.

A new file is switched to WAL by the first connection that opens it, which needs the
file's exclusive lock. While another process holds a write lock on it (creating its
tables, or switching it too), SQLite answers the switch "database is locked" at once,
without waiting as its busy handler does for other statements: one of two processes
opening a new store together failed at its first connection, with a ``StoreError``
naming the key table (1 round in 15 of four processes opening one file). The switch now
waits for the lock, as long as any statement waits (``statement_timeout``).

The race is pinned here with a connection holding the file's write lock
(``BEGIN IMMEDIATE``) while a ledger opens it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

import contextledger as cl


def _new_file_locked(path: Path) -> sqlite3.Connection:
    """A new file, not yet in WAL, whose write lock another connection holds."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE someone_elses (x)")
    holder.execute("BEGIN IMMEDIATE")
    probe = sqlite3.connect(path, isolation_level=None, timeout=5)
    with pytest.raises(sqlite3.OperationalError, match="locked"):  # what the opening met
        probe.execute("PRAGMA journal_mode=WAL")
    probe.close()
    return holder


def test_a_ledger_opening_a_new_file_another_connection_writes_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    holder = _new_file_locked(path)
    release = threading.Timer(0.3, holder.execute, args=("COMMIT",))
    release.start()
    began = time.monotonic()
    try:
        with cl.Ledger.open(f"sqlite:///{path}", run_policy=False) as ledger:
            waited = time.monotonic() - began
            cid = ledger.get_or_start("k", system_prompt="s")
            ledger.append(cid, {"role": "user", "content": "hello"})
            assert ledger.context(cid)[-1] == {"role": "user", "content": "hello"}
    finally:
        release.join()
        holder.close()
    assert waited >= 0.25  # it waited for the lock instead of failing at once
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()


def test_a_lock_held_past_the_statement_timeout_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    holder = _new_file_locked(path)
    settings = cl.Settings(database_url=f"sqlite:///{path}", run_policy=False, statement_timeout=1)
    began = time.monotonic()
    try:
        with pytest.raises(cl.StoreError, match="locked"):
            cl.Ledger.open(settings=settings)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert 0.9 <= time.monotonic() - began < 10
