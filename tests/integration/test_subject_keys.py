"""Per-subject data keys on a real SQLite file and on PostgreSQL: each subject's records
under its own key, erasure by destroying one key, a race to make a key, master-key
rotation, and stores written under the master key alone."""

from __future__ import annotations

import base64
import multiprocessing
import os
import sqlite3
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.cipher import AESCipher
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import Environment

import contextledger as cl
from contextledger.infrastructure.keys.subject_keys import SubjectKeys
from contextledger.infrastructure.keys.subject_mapper import MARK, subject_keys_of

SECRET_A = "alpha-secret-71c2 my account number is 1234"
SECRET_B = "bravo-secret-93fe my address is 5 Elm Street"


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def settings(url: str, cipher_key: str, **options: Any) -> cl.Settings:
    return cl.Settings(
        database_url=url, run_policy=False, cipher_key=cipher_key, snapshot_interval=2, **options
    )


def keys_of(ledger: cl.Ledger) -> SubjectKeys:
    keys = subject_keys_of(ledger)
    assert keys is not None
    return keys


def raw_rows(url: str) -> list[tuple[UUID, int, str, bytes]]:
    """Every stored event and snapshot, as the store holds it."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_events UNION ALL "
                "SELECT originator_id, originator_version, topic, state FROM stored_snapshots"
            ).fetchall()
        return [(UUID(r[0]), r[1], r[2], bytes(r[3])) for r in rows]
    base, schema = url.split("?schema=")
    with psycopg.connect(base) as conn:
        rows = conn.execute(
            f'SELECT originator_id, originator_version, topic, state FROM "{schema}".contextledger_events '
            f'UNION ALL SELECT originator_id, originator_version, topic, state FROM "{schema}".contextledger_snapshots'
        ).fetchall()
    return [(r[0], r[1], r[2], bytes(r[3])) for r in rows]


def raw_store_bytes(url: str) -> bytes:
    """SQLite: the database file and its WAL after a checkpoint; PostgreSQL: every
    column of the event, snapshot and key tables."""
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))
    base, schema = url.split("?schema=")
    out = b""
    with psycopg.connect(base) as conn:
        for table in ("contextledger_events", "contextledger_snapshots", "contextledger_subject_keys"):
            for row in conn.execute(f'SELECT * FROM "{schema}".{table}').fetchall():
                out += b"".join(
                    bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode() for v in row
                )
    return out


def write_two_subjects(ledger: cl.Ledger) -> tuple[UUID, UUID, UUID]:
    """A conversation of its own subject, and two of subject ``user-42``."""
    a, c, d = uuid4(), uuid4(), uuid4()
    keys = keys_of(ledger)
    keys.assign(c, "user-42")
    keys.assign(d, "user-42")
    for cid, secret in ((a, SECRET_A), (c, SECRET_B), (d, SECRET_B)):
        ledger.start(f"You keep {secret}.", conversation_id=cid)
        for i in range(4):
            ledger.append(cid, {"role": "user", "content": f"{secret} #{i}"})
    return a, c, d


def key_ids(url: str) -> dict[UUID, set[bytes]]:
    found: dict[UUID, set[bytes]] = {}
    for oid, _, _, state in raw_rows(url):
        assert state[:4] == MARK
        found.setdefault(oid, set()).add(state[4:20])
    return found


def test_each_subject_round_trips_under_a_key_of_its_own(shared_url: str) -> None:
    master = key()
    with cl.Ledger.open(settings=settings(shared_url, master)) as ledger:
        a, c, d = write_two_subjects(ledger)
        keys = keys_of(ledger)
        assert keys.subject_of(a) == str(a) and keys.subject_of(c) == "user-42"
    with cl.Ledger.open(settings=settings(shared_url, master)) as ledger:
        assert [e.message["content"] for e in ledger.transcript(c)] == [f"{SECRET_B} #{i}" for i in range(4)]
        assert ledger.transcript(a)[3].message["content"] == f"{SECRET_A} #3"
        assert ledger.verify().ok
    ids = key_ids(shared_url)
    assert all(len(v) == 1 for v in ids.values())  # events and snapshots: one key each
    assert ids[c] == ids[d] != ids[a]
    kinds = {topic for _, _, topic, _ in raw_rows(shared_url)}
    assert any("Snapshot" in t for t in kinds)  # snapshots went through the same mapper
    stored = raw_store_bytes(shared_url)
    assert b"alpha-secret-71c2" not in stored and b"bravo-secret-93fe" not in stored


def test_an_erased_subject_reads_as_placeholders_while_others_read_normally(shared_url: str) -> None:
    master = key()
    with cl.Ledger.open(settings=settings(shared_url, master)) as ledger:
        a, c, d = write_two_subjects(ledger)
        before = raw_store_bytes(shared_url)
        tomb = keys_of(ledger).tombstone("user-42", reason="asked to be forgotten")
        assert keys_of(ledger).is_erased("user-42") and not keys_of(ledger).is_erased(str(a))
        with pytest.raises(cl.ConversationErasedError) as caught:
            ledger.append(c, {"role": "user", "content": "more"})
        assert caught.value.subject == "user-42" and caught.value.reason == "asked to be forgotten"
    # A new process (nothing cached): every record of the subject, events and snapshots.
    with cl.Ledger.open(settings=settings(shared_url, master)) as ledger:
        assert ledger.transcript(a)[0].message["content"] == f"{SECRET_A} #0"
        mapper = ledger.mapper
        for oid, version, topic, state in raw_rows(shared_url):
            event = mapper.to_domain_event(StoredEvent(oid, version, topic, state))
            if oid == a:
                assert not isinstance(event, cl.ErasedEvent)
            else:
                assert isinstance(event, cl.ErasedEvent)
                assert (event.originator_id, event.originator_version, event.topic) == (oid, version, topic)
                assert event.erased_at == tomb.erased_at and event.reason == "asked to be forgotten"
        # The notification log, read in one batch as a follower reads it, never raises.
        notifications = ledger.recorder.select_notifications(start=1, limit=1000)
        decoded = [mapper.to_domain_event(n) for n in notifications]
        assert sum(isinstance(e, cl.ErasedEvent) for e in decoded) == 10
        with pytest.raises(cl.ConversationErasedError):
            ledger.repository.get(d)  # folding an erased record (the snapshot first)
        with pytest.raises(cl.ConversationErasedError):
            keys_of(ledger).key_for("user-42")  # no new key is ever made for it
    after = raw_store_bytes(shared_url)
    assert b"alpha-secret-71c2" not in after and b"bravo-secret-93fe" not in after
    assert b"alpha-secret-71c2" not in before  # the scan can fail: see test_data_protection


def test_the_destroyed_key_leaves_the_sqlite_file_and_its_wal(sqlite_url: str) -> None:
    with cl.Ledger.open(settings=settings(sqlite_url, key())) as ledger:
        cid = ledger.start("s")
        keys = keys_of(ledger)
        row = keys.table.by_subject(str(cid))
        assert row is not None and row.wrapped_key is not None
        assert row.wrapped_key in raw_store_bytes(sqlite_url)  # so the check below can fail
        keys.tombstone(str(cid), reason="retention")
    assert row.wrapped_key not in raw_store_bytes(sqlite_url)


def test_a_key_missing_without_a_tombstone_is_an_error_never_an_erasure(sqlite_url: str) -> None:
    master = key()
    with cl.Ledger.open(settings=settings(sqlite_url, master)) as ledger:
        cid = ledger.start("s")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("DELETE FROM stored_subject_keys")
    with cl.Ledger.open(settings=settings(sqlite_url, master)) as ledger:
        stored = ledger.recorder.select_events(cid)[0]
        with pytest.raises(cl.KeyMissingError) as caught:
            ledger.mapper.to_domain_event(stored)
        assert caught.value.key_id == stored.state[4:20].hex() and caught.value.version == 1
        assert isinstance(caught.value, cl.StoreError)


def _make_key(url: str, master: str, barrier: Any, queue: Any) -> None:
    with cl.Ledger.open(settings=settings(url, master)) as ledger:
        keys = keys_of(ledger)
        barrier.wait(30)
        data_key = keys.key_for("raced-subject")
        queue.put((data_key.key_id, data_key.cipher.encrypt(f"from {os.getpid()}".encode())))


def test_two_processes_making_one_subjects_key_at_once_end_up_with_one_key(shared_url: str) -> None:
    master = key()
    cl.Ledger.open(settings=settings(shared_url, master)).close()  # the tables exist
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_make_key, args=(shared_url, master, barrier, queue)) for _ in range(3)]
    for w in workers:
        w.start()
    results = [queue.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0
    assert len({key_id for key_id, _ in results}) == 1
    with cl.Ledger.open(settings=settings(shared_url, master)) as ledger:
        mine = keys_of(ledger).key_for("raced-subject")
        assert {mine.cipher.decrypt(sealed)[:5] for _, sealed in results} == {b"from "}
        assert mine.key_id == results[0][0]


def test_rotating_the_master_key_rewraps_data_keys_and_leaves_records_alone(shared_url: str) -> None:
    old, new = key(), key()
    with cl.Ledger.open(settings=settings(shared_url, old)) as ledger:
        a, c, _ = write_two_subjects(ledger)
    before = raw_rows(shared_url)
    with cl.Ledger.open(settings=settings(shared_url, old)) as ledger:
        assert keys_of(ledger).rewrap(old, new) == 2
        assert keys_of(ledger).rewrap(old, new) == 0  # run again: nothing left to do
    assert raw_rows(shared_url) == before
    with cl.Ledger.open(settings=settings(shared_url, new)) as ledger:
        assert ledger.transcript(c)[0].message["content"] == f"{SECRET_B} #0"
        ledger.append(a, {"role": "user", "content": "after the rotation"})
    with (
        cl.Ledger.open(settings=settings(shared_url, old)) as ledger,
        pytest.raises(cl.StoreError, match="cannot decode"),
    ):
        ledger.transcript(a)


def test_a_store_written_with_eventsourcings_aes_cipher_under_one_key_loads(sqlite_url: str) -> None:
    master = key()
    with cl.Ledger.open(settings=settings(sqlite_url, master, key_scope="store")) as ledger:
        cid = ledger.start("You keep secrets.")
        for i in range(3):
            ledger.append(cid, {"role": "user", "content": f"{SECRET_A} #{i}"})
    # Every record as eventsourcing's own (pycryptodome) AESCipher writes it.
    theirs = AESCipher(Environment(env={"CIPHER_KEY": master}))
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        for table in ("stored_events", "stored_snapshots"):
            rows = conn.execute(f"SELECT originator_id, originator_version, state FROM {table}").fetchall()
            for oid, version, state in rows:
                assert state[:4] != MARK
                conn.execute(
                    f"UPDATE {table} SET state = ? WHERE originator_id = ? AND originator_version = ?",
                    (theirs.encrypt(theirs.decrypt(state)), oid, version),
                )
        conn.execute("DROP TABLE stored_subject_keys")  # as a store made before key tables
        conn.execute("DROP TABLE stored_conversation_subjects")
    with cl.Ledger.open(settings=settings(sqlite_url, master)) as ledger:  # key_scope="subject"
        assert [e.message["content"] for e in ledger.transcript(cid)] == [
            f"{SECRET_A} #{i}" for i in range(3)
        ]
        ledger.append(cid, {"role": "user", "content": "new"})
        assert ledger.transcript(cid)[-1].message["content"] == "new"
        assert ledger.verify(cid).ok
    states = [state for _, _, _, state in raw_rows(sqlite_url)]
    assert any(s[:4] == MARK for s in states) and any(s[:4] != MARK for s in states)
    # And what this version writes under the master key, eventsourcing's cipher reads.
    with cl.Ledger.open(settings=settings(sqlite_url, master, key_scope="store")) as ledger:
        ledger.append(cid, {"role": "user", "content": "store scope again"})
        last = ledger.recorder.select_events(cid, desc=True, limit=1)[0]
    assert last.state[:4] != MARK and b"store scope again" in theirs.decrypt(last.state)
