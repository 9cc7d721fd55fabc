"""A subject's first data key written in the transaction of its first records, on a
SQLite file and on PostgreSQL (``infrastructure/keys/new_keys.py``,
``infrastructure/persistence/pgkeyrows.py``).

Two ledgers on one store are two processes. What each test pins: the key and the
records commit together or not at all; a new key that loses its place (another
process made the subject's key, erased the subject, named the conversation's subject,
or rotated the master key) stores nothing of itself, and the save lands under the
table's key or is refused with the error the table's state calls for.
"""

from __future__ import annotations

import base64
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import contextledger as cl
from contextledger.application import Ledger, Settings
from contextledger.infrastructure.keys.new_keys import deferring
from contextledger.infrastructure.keys.subject_keys import SubjectKeys
from contextledger.infrastructure.keys.subject_mapper import key_ids_of, subject_keys_of
from tests.support.pg_waits import lock_waiters


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def _open(url: str, key: str | None, **options: Any) -> Ledger:
    return Ledger(Settings(database_url=url, cipher_key=key, run_policy=False, **options))


def _keys(ledger: Ledger) -> SubjectKeys:
    keys = subject_keys_of(ledger)
    assert keys is not None
    return keys


@contextmanager
def _no_key_read_by_id(ledger: Ledger) -> Iterator[None]:
    """A read of a key row by its id, on its own, fails the test while this is open."""
    table = _keys(ledger).table
    by_id = table.by_id

    def no_read_by_id(key_id: bytes) -> Any:  # pragma: no cover - the failure
        raise AssertionError("the key row was read on its own")

    table.by_id = no_read_by_id  # type: ignore[method-assign]
    try:
        yield
    finally:
        table.by_id = by_id  # type: ignore[method-assign]


def _first_key_id(ledger: Ledger, cid: uuid.UUID) -> bytes:
    stored = ledger.recorder.select_events(cid, lte=1)
    ids = key_ids_of(bytes(stored[0].state))
    assert ids is not None and len(ids) == 1
    return ids[0]


@pytest.mark.parametrize("master", [True, False], ids=["wrapped", "unwrapped"])
def test_a_start_refused_as_a_duplicate_leaves_no_key_behind(shared_url: str, master: bool) -> None:
    key = _key() if master else None
    cid = uuid.uuid4()
    with _open(shared_url, key, key_scope="store") as plain:  # its Started names no data key
        plain.start("s", conversation_id=cid)
    with _open(shared_url, key) as ledger:
        with pytest.raises(cl.DuplicateConversationError):
            ledger.start("s", conversation_id=cid)
        assert _keys(ledger).table.by_subject(str(cid)) is None
        other = ledger.start("s")
        ledger.append(other, {"role": "user", "content": "hello"})
        row = _keys(ledger).table.by_subject(str(other))
        assert row is not None and row.key_id == _first_key_id(ledger, other)


def test_a_new_key_another_process_made_first_gives_way_to_the_stored_one(shared_url: str) -> None:
    key = _key()
    with _open(shared_url, key) as slow, _open(shared_url, key) as fast:
        slow.start("s")  # its master key checked
        with deferring():  # as if a save of alice's first record were being mapped
            held = _keys(slow).key_for("alice")
        stored = fast.start("s", subject="alice")
        cid = slow.start("s", subject="alice")
        slow.append(cid, {"role": "user", "content": "hi"})
        row = _keys(fast).table.by_subject("alice")
        assert row is not None and row.key_id != held.key_id
        assert _first_key_id(slow, cid) == row.key_id == _first_key_id(fast, stored)
        assert _keys(slow).table.by_id(held.key_id) is None
        assert [m["content"] for m in fast.context(cid) if m["role"] == "user"] == ["hi"]


def test_a_conversation_whose_own_subject_was_erased_before_it_started_is_refused(shared_url: str) -> None:
    key = _key()
    cid = uuid.uuid4()
    with _open(shared_url, key) as ledger, _open(shared_url, key) as eraser:
        ledger.start("s")
        eraser.erase(subject=str(cid), reason="asked first", force=True)
        with pytest.raises(cl.ConversationErasedError) as refused:
            ledger.start("s", conversation_id=cid)
        assert refused.value.subject == str(cid)
        assert ledger.recorder.select_events(cid) == []


def test_a_subject_another_process_named_is_the_one_the_first_record_is_under(shared_url: str) -> None:
    key = _key()
    cid = uuid.uuid4()
    with _open(shared_url, key) as ledger, _open(shared_url, key) as other:
        ledger.start("s")
        _keys(other).assign(cid, "carol")  # named there; this process does not know it
        ledger.start("s", conversation_id=cid)
        assert _keys(ledger).table.by_subject(str(cid)) is None
        carol = _keys(other).table.by_subject("carol")
        assert carol is not None and _first_key_id(ledger, cid) == carol.key_id
        other.erase(subject="carol", reason="asked")
        with _open(shared_url, key) as fresh, pytest.raises(cl.ConversationErasedError):
            fresh.context(cid)


def test_no_new_key_is_made_under_a_master_key_rotated_away(shared_url: str) -> None:
    old, new = _key(), _key()
    with _open(shared_url, old) as ledger:
        ledger.start("s")  # its master key checked
        with _open(shared_url, old) as rotator:
            assert _keys(rotator).rewrap(old, new) >= 1
        before = _keys(ledger).table.wrapped()
        with pytest.raises(cl.ConfigurationError):
            ledger.start("s")
        assert _keys(ledger).table.wrapped() == before
    with _open(shared_url, new) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "under the new key"})
        assert ledger.context(cid)[-1]["content"] == "under the new key"


def test_two_processes_starting_one_subject_at_once_converge_on_one_key(shared_url: str) -> None:
    key = _key()
    with _open(shared_url, key) as one, _open(shared_url, key) as two:
        one.start("s"), two.start("s")  # their master keys checked
        for ledger in (one, two):  # each holds a new key of its own for alice, not stored
            with deferring():
                _keys(ledger).key_for("alice")
        started: dict[str, uuid.UUID] = {}
        errors: list[BaseException] = []
        gate = threading.Barrier(2)

        def start(name: str, ledger: Ledger) -> None:
            try:
                gate.wait()
                started[name] = ledger.start("s", subject="alice")
            except BaseException as exc:  # pragma: no cover - told below
                errors.append(exc)

        threads = [threading.Thread(target=start, args=item) for item in (("one", one), ("two", two))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        row = _keys(one).table.by_subject("alice")
        assert row is not None
        assert _first_key_id(one, started["one"]) == _first_key_id(two, started["two"]) == row.key_id
        with _open(shared_url, key) as fresh:
            assert [m["content"] for m in fresh.context(started["one"])] == ["s"]
            assert [m["content"] for m in fresh.context(started["two"])] == ["s"]


def test_first_records_batched_together_commit_with_their_keys_or_map_again(postgres_url: str) -> None:
    """PostgreSQL's group commit: saves queued behind a slow one are written in one
    transaction with their new keys; a batch refused because one new key lost its
    place (its conversation names a subject, named by another process) is written
    save by save, and only that save is mapped again."""
    key = _key()
    named = uuid.uuid4()
    with _open(postgres_url, key) as ledger, _open(postgres_url, key) as other:
        ledger.start("s")
        _keys(other).assign(named, "carol")  # this process does not know it
        commit = ledger.recorder.group_commit  # type: ignore[attr-defined]
        write, release, first = commit._write, threading.Event(), threading.Event()

        def slow_write(events: Any) -> Any:
            if not first.is_set():
                first.set()
                release.wait(10)
            return write(events)

        commit._write = slow_write
        started: list[uuid.UUID] = []
        lock = threading.Lock()

        def start(cid: uuid.UUID) -> None:
            ledger.start("s", conversation_id=cid)
            with lock:
                started.append(cid)

        lead = threading.Thread(target=start, args=(uuid.uuid4(),))
        lead.start()
        assert first.wait(10)
        queued = [threading.Thread(target=start, args=(cid,)) for cid in (uuid.uuid4(), uuid.uuid4(), named)]
        for thread in queued:
            thread.start()
        while len(commit._queue) < len(queued):
            threading.Event().wait(0.01)
        release.set()
        for thread in (lead, *queued):
            thread.join()
        assert len(started) == 4 and commit.largest == 3
        table = _keys(ledger).table
        for cid in started:
            row = table.by_subject("carol" if cid == named else str(cid))
            assert row is not None and row.key_id == _first_key_id(ledger, cid)
        assert table.by_subject(str(named)) is None
        with _open(postgres_url, key) as fresh:
            for cid in started:
                assert [m["content"] for m in fresh.context(cid)] == ["s"]


@pytest.mark.postgres
def test_a_first_record_meeting_an_erasure_of_its_subject_in_progress_waits_and_is_refused(
    postgres_url: str,
) -> None:
    """The one-statement first record (``pgkeyrows``): its key's row waits on the unique
    subject of a tombstone not committed yet, and inserts nothing once it commits."""
    key = _key()
    base, schema = postgres_url.split("?schema=")
    cid = uuid.uuid4()
    with _open(postgres_url, key) as ledger:
        ledger.start("s")  # its master key checked
        outcome: list[BaseException | object] = []

        def start() -> None:
            try:
                outcome.append(ledger.start("s", conversation_id=cid))
            except BaseException as exc:
                outcome.append(exc)

        with psycopg.connect(base) as eraser, psycopg.connect(base, autocommit=True) as watcher:
            table = f'"{schema}"."contextledger_subject_keys"'
            eraser.execute(  # the erasure of a subject without a key yet, not committed
                f"INSERT INTO {table} (key_id, subject, wrapped_key, master_id, created_at, erased_at, "
                "erase_reason) VALUES (%s, %s, NULL, '', now(), now(), 'held')",
                (os.urandom(16), str(cid)),
            )
            writer = threading.Thread(target=start)
            writer.start()
            waiting = lock_waiters(watcher, schema, outcome)
            assert waiting == 1 and outcome == [], outcome
            eraser.commit()
        writer.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], cl.ConversationErasedError), outcome
        assert outcome[0].reason == "held"
        assert ledger.recorder.select_events(cid) == []


def test_a_cold_load_reads_the_subjects_key_row_with_the_events(shared_url: str) -> None:
    """PostgreSQL (``pgkeyrows.KeyedRead``) and SQLite (``sqlite_recorder.KEYED_READ``):
    a process reading a conversation for the first time gets its subject's key row in
    the statement that reads the events, its own or the one it names; an erased
    subject's row is its tombstone."""
    key = _key()
    with _open(shared_url, key) as writer:
        own = writer.start("s")
        named = writer.start("s", subject="erin")
        gone = writer.start("s", subject="frank")
        for cid in (own, named, gone):
            writer.append(cid, {"role": "user", "content": f"hello {cid}"})
        writer.erase("frank", "asked")
    with _open(shared_url, key) as fresh, _no_key_read_by_id(fresh):
        for cid in (own, named):
            assert fresh.context(cid)[-1]["content"] == f"hello {cid}"
        with pytest.raises(cl.ConversationErasedError) as erased:
            fresh.context(gone)
        assert erased.value.subject == "frank"


def test_a_read_of_an_originator_that_is_no_conversation_is_the_plain_read(sqlite_url: str) -> None:
    """SQLite: an originator id that is no UUID names no subject; its read is the
    library's, not refused for want of one."""
    with _open(sqlite_url, _key()) as ledger:
        cid = ledger.start("s")
        assert ledger.recorder.select_events("not-a-conversation") == []
        assert [e.originator_version for e in ledger.recorder.select_events(cid.hex)] == [1]


def test_a_cold_load_from_a_snapshot_reads_the_subjects_key_row_with_it(postgres_url: str) -> None:
    """PostgreSQL (``pgkeyrows.KeyedSnapshotRead``): a cold load reads the latest
    snapshot before the events after it, so the snapshot's read brings the subject's
    key row (before, the key was then read by its id, a round trip of its own); at a
    version, the snapshot at or below it; an erased subject's row is its tombstone."""
    key = _key()
    with _open(postgres_url, key, snapshot_interval=4) as writer:
        own = writer.start("s")
        named = writer.start("s", subject="erin")
        gone = writer.start("s", subject="frank")
        for cid in (own, named, gone):
            for n in range(9):
                writer.append(cid, {"role": "user", "content": f"hello {n} {cid}"})
        assert writer.snapshots is not None
        for cid in (own, named, gone):
            assert writer.snapshots.recorder.select_events(cid, desc=True, limit=1)[0].originator_version == 8
        expected = {cid: (writer.context(cid), writer.conversation(cid, version=6).state) for cid in (own, named)}
        writer.erase("frank", "asked")
    for version in (None, 6):
        with _open(postgres_url, key, snapshot_interval=4) as fresh, _no_key_read_by_id(fresh):
            for cid in (own, named):
                if version is None:
                    assert fresh.context(cid) == expected[cid][0]
                else:  # re-derived from the snapshot at 4 and the events after it
                    assert fresh.conversation(cid, version=version).state == expected[cid][1]
            with pytest.raises(cl.ConversationErasedError) as erased:
                fresh.context(gone)
            assert erased.value.subject == "frank"
