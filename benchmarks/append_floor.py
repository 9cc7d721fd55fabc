"""What a single SQLite append cannot do without: a floor for the write path's ratio.

    .venv/bin/python benchmarks/append_floor.py [--runs 7] [--appends 300]

Three writers take turns on the same machine, each timed one append at a time, in
interleaved runs (the median of the runs' medians), each after writing until its file's
write-ahead log stopped growing (``sqlite_wal.py``):

- *plain*: the message's JSON inserted into a ``(conversation_id, position, body)``
  table and committed, in WAL with ``synchronous=FULL`` (the baseline of
  ``benchmarks/write_path.py``);
- *floor*: the same insert and commit, after only the work each of the ledger's
  guarantees needs, done with the same libraries the ledger uses and nothing around
  them: the message validated (the ``Message`` model), its tokens counted exactly (the
  ledger's tiktoken counter), a digest link committed to it under a fresh salt
  (SHA-256 twice), the record's JSON made and encrypted under a data key (AES-GCM),
  and the insert guarded by the subject's tombstone as the write fence is (one more
  indexed lookup in the same statement);
- *floor, new subject*: the *floor*'s work for a subject's first record, which also
  makes the subject's data key (32 random bytes, wrapped under the master key with
  AES-GCM) and inserts its row into a key table of the ledger's shape in the record's
  transaction (BEGIN, the key row, the record, COMMIT), as the ledger's SQLite store
  does: what a first write with per-subject keys cannot do without, against *floor*;
- *ledger*: ``Ledger.append`` on a SQLite file with its policy running.

The floor is not a design anyone should ship (no aggregate, no fold, no working
memory, no idempotency, no error mapping): it says how far under the ledger a write
path keeping the same guarantees could go in CPython, and what ratio to the plain
insert that floor itself has on this machine. Writes section ``append-floor`` of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sections import write_section
from sqlite_wal import recycle_wal_now
from write_path import POLICY, message, open_ledger

from contextledger.domain.values.digests import commit, message_content, structure
from contextledger.domain.values.messages import Message
from contextledger.infrastructure.counting.tokens import TiktokenCounter


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def plain_writer(path: Path) -> Callable[[int], None]:
    conn = _connect(path)
    conn.execute(
        "CREATE TABLE plain (conversation_id TEXT, position INTEGER, body TEXT, "
        "PRIMARY KEY (conversation_id, position))"
    )
    cid = str(uuid.uuid4())

    def insert(i: int) -> None:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO plain VALUES (?, ?, ?)", (cid, i, json.dumps(message(i))))
        conn.execute("COMMIT")

    return insert


def _records(path: Path) -> sqlite3.Connection:
    """A connection to a new file holding the floor's table of records."""
    conn = _connect(path)
    conn.execute(
        "CREATE TABLE records (conversation_id TEXT, position INTEGER, body BLOB, "
        "PRIMARY KEY (conversation_id, position))"
    )
    return conn


def _sealed(
    counter: TiktokenCounter, i: int, previous: str, position: int, cipher: AESGCM, aad: bytes
) -> tuple[bytes, str, datetime]:
    """The floor's work on message ``i``: validated, its tokens counted, its digest link
    committed after ``previous``, its record's JSON encrypted; the sealed record, its
    digest and its time."""
    msg = Message.model_validate(message(i))
    tokens = counter.count_message(msg)
    at = datetime.now(UTC)
    link = commit(previous, structure("message", position, at, position), message_content(msg))
    dumped = msg.model_dump(exclude_none=True)
    body = {"message": dumped, "tokens": tokens, "timestamp": at.isoformat(), **link}
    nonce = os.urandom(12)
    return nonce + cipher.encrypt(nonce, json.dumps(body).encode(), aad), link["digest"], at


def floor_writer(path: Path) -> Callable[[int], None]:
    conn = _records(path)
    conn.execute("CREATE TABLE tombstones (subject TEXT PRIMARY KEY)")
    cid, subject = str(uuid.uuid4()), "user-1"
    counter = TiktokenCounter("gpt-4o-mini")
    aead = AESGCM(AESGCM.generate_key(bit_length=256))
    digest = [""]

    def insert(i: int) -> None:
        sealed, digest[0], _ = _sealed(counter, i, digest[0], i, aead, cid.encode())
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO records SELECT ?, ?, ? "
            "WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE subject = ?)",
            (cid, i, sealed, subject),
        )
        conn.execute("COMMIT")

    return insert


def first_floor_writer(path: Path) -> Callable[[int], None]:
    conn = _records(path)
    conn.execute(
        "CREATE TABLE keys (key_id BLOB PRIMARY KEY, subject TEXT NOT NULL UNIQUE, wrapped_key BLOB, "
        "master_id TEXT NOT NULL, created_at TEXT NOT NULL) WITHOUT ROWID"
    )
    counter = TiktokenCounter("gpt-4o-mini")
    master = AESGCM(AESGCM.generate_key(bit_length=256))

    def insert(i: int) -> None:
        cid = str(uuid.uuid4())  # each write a new subject's first record
        raw, key_id, wrap_nonce = os.urandom(32), os.urandom(16), os.urandom(12)
        wrapped = wrap_nonce + master.encrypt(wrap_nonce, raw, key_id + cid.encode())
        sealed, _, at = _sealed(counter, i, "", 0, AESGCM(raw), cid.encode())
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO keys VALUES (?, ?, ?, 'master', ?) ON CONFLICT (subject) DO NOTHING",
            (key_id, cid, wrapped, at.isoformat()),
        )
        conn.execute("INSERT INTO records VALUES (?, 0, ?)", (cid, key_id + sealed))
        conn.execute("COMMIT")

    return insert


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--appends", type=int, default=300)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="append-floor-"))
    load_before = os.getloadavg()[0]
    ledger = open_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    cid = ledger.start("s", policy=POLICY)
    writers: dict[str, Callable[[int], None]] = {
        "plain": plain_writer(tmp / "plain.db"),
        "floor": floor_writer(tmp / "floor.db"),
        "floor, new subject": first_floor_writer(tmp / "first.db"),
        "ledger": lambda i: ledger.append(cid, message(i)) and None,
    }
    medians: dict[str, list[float]] = {name: [] for name in writers}
    n = 0
    logs = {
        "plain": tmp / "plain.db-wal",
        "floor": tmp / "floor.db-wal",
        "floor, new subject": tmp / "first.db-wal",
        "ledger": tmp / "ledger.db-wal",
    }
    warmed = {}
    for name, write in writers.items():  # warm-up: compiled statements, caches, each log reused
        warmed[name] = recycle_wal_now(lambda k, w=write, base=n: w(base + 1 + k), logs[name])
        n += warmed[name] + 1
    ledger.wait_idle(timeout=600)
    for _ in range(args.runs):
        for name, write in writers.items():
            samples = []
            for _ in range(args.appends):
                n += 1
                t = time.perf_counter()
                write(n)
                samples.append(time.perf_counter() - t)
            medians[name].append(statistics.median(samples))
    ledger.close()
    us = {name: statistics.median(values) * 1e6 for name, values in medians.items()}
    command = f".venv/bin/python benchmarks/append_floor.py --runs {args.runs} --appends {args.appends}"
    lines = [
        "## A floor under the SQLite single append",
        "",
        f"Written by `benchmarks/append_floor.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        f"- machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; load average {load_before:.1f} before the run, "
        f"{os.getloadavg()[0]:.1f} after",
        "",
        "Per append, the median of the runs' medians (each run "
        f"{args.appends} appends per writer, writers interleaved run by run). *Floor*: only "
        "the work the ledger's guarantees need (validation, an exact token count, a salted "
        "digest link, the record's JSON encrypted, the tombstone-guarded insert), with the "
        "same libraries and nothing around it (the script's docstring says what each writer does). "
        "Before the timed runs each writer wrote until its file's write-ahead log stopped growing "
        f"({', '.join(f'{name} {count:,}' for name, count in warmed.items())} writes; "
        "`benchmarks/sqlite_wal.py`), so every commit timed writes over its log, as in a service "
        "that has run a while.",
        "",
        "| writer | µs per append | / plain |",
        "|---|---:|---:|",
        *(f"| {name} | {value:.0f} | {value / us['plain']:.2f}x |" for name, value in us.items()),
        "",
        f"A new subject's first record at the floor costs {us['floor, new subject'] / us['floor']:.2f}x a "
        "later one (*floor, new subject* / *floor*): the key made and wrapped, and its row inserted in "
        "the record's transaction; a ledger's first write adds to that what a start does beside an "
        "append with no encryption at all (its `Started` event: `benchmarks/encryption.py --first`).",
        "",
    ]
    print("\n".join(lines))
    write_section("append-floor", lines)


if __name__ == "__main__":
    main()
