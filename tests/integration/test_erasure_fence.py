"""Writes fenced by the key table (``infrastructure/keys/key_fence.py``), on a SQLite file
and on PostgreSQL.

A second ledger on the same store is another process: its caches hold the subject's
key and conversation when the first one erases the subject. Every kind of write it
then makes to that subject is refused with ``ConversationErasedError`` and stores
nothing; it then reads the subject as erased, and writes to other subjects go on.
On PostgreSQL a write that meets an erasure in progress (the key row held ``FOR
UPDATE``, not committed) waits for it, and is refused once it commits.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.application.following.notifications import read_notifications
from contextledger.infrastructure.readmodels import SQLReadModels
from contextledger.testing import ScriptedSummarizer
from tests.support.pg_waits import lock_waiters

POLICY = ReductionPolicy(trigger_messages=4, keep_messages=1, max_summary_tokens=100)


def _settings(url: str, key: str) -> Settings:
    return Settings(database_url=url, cipher_key=key, run_policy=False)


def _log(ledger: Ledger) -> list[tuple[int, str]]:
    return [
        (n.id, n.topic) for page in read_notifications(ledger.notification_log, committed=True) for n in page
    ]


WRITES: dict[str, Callable[[Ledger, UUID, Any], object]] = {
    "append": lambda ledger, cid, _: ledger.append(cid, {"role": "user", "content": "after"}),
    "extend": lambda ledger, cid, _: ledger.extend(cid, [{"role": "user", "content": "a"}] * 2),
    "edit": lambda ledger, cid, _: ledger.edit(cid, 0, {"role": "user", "content": "edited"}),
    "retract": lambda ledger, cid, _: ledger.retract(cid, 1, reason="withdrawn"),
    "fork": lambda ledger, cid, _: ledger.fork(cid, subject="bob"),
    "record_summary": lambda ledger, _, pending: ledger.record_summary(*pending),
    "start": lambda ledger, _, __: ledger.start("s", subject="alice"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_no_write_of_another_process_to_an_erased_subject_is_acknowledged(
    shared_url: str, write: str
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    summarizer = ScriptedSummarizer()
    with (
        Ledger.open(settings=_settings(shared_url, key), summarizer=summarizer) as other,
        Ledger.open(settings=_settings(shared_url, key)) as eraser,
    ):
        cid = other.start("s", subject="alice", policy=POLICY)
        bob = other.start("s", subject="bob")
        for n in range(5):
            other.append(cid, {"role": "user", "content": f"note {n}"})
        request = other.pending_summary(cid)
        assert request is not None
        pending = (request, summarizer.summarize(request))
        assert other.context(cid)  # its caches hold the conversation and the key
        eraser.erase("alice", "asked")
        before = _log(eraser)

        with pytest.raises(cl.ConversationErasedError) as refused:
            WRITES[write](other, cid, pending)
        assert refused.value.subject == "alice" and refused.value.reason == "asked"
        assert _log(eraser) == before  # nothing of it was stored
        with pytest.raises(cl.ConversationErasedError):  # and it reads the subject as erased
            other.context(cid)
        other.append(bob, {"role": "user", "content": "bob goes on"})
        assert other.context(bob)[-1]["content"] == "bob goes on"
        assert eraser.verify().ok


@pytest.mark.postgres
def test_a_write_meeting_an_erasure_in_progress_waits_for_it_and_is_refused(postgres_url: str) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    base, schema = postgres_url.split("?schema=")
    with Ledger.open(settings=_settings(postgres_url, key)) as ledger:
        cid = ledger.start("s", subject="alice")
        ledger.append(cid, {"role": "user", "content": "before"})
        outcome: list[BaseException | object] = []

        def append() -> None:
            try:
                outcome.append(ledger.append(cid, {"role": "user", "content": "during"}))
            except BaseException as exc:
                outcome.append(exc)

        with psycopg.connect(base) as eraser, psycopg.connect(base, autocommit=True) as watcher:
            # An erasure as the key table runs it, held open: the row taken FOR UPDATE
            # and its wrapped key destroyed, not committed yet.
            table = f'"{schema}"."contextledger_subject_keys"'
            eraser.execute(f"SELECT key_id FROM {table} WHERE subject = 'alice' FOR UPDATE").fetchall()
            eraser.execute(
                f"UPDATE {table} SET wrapped_key = NULL, master_id = '', erased_at = now(), "
                "erase_reason = 'held' WHERE subject = 'alice'"
            )
            writer = threading.Thread(target=append)
            writer.start()
            # The write waits for the erasure's row lock (it does not go past it).
            waiting = lock_waiters(watcher, schema, outcome)
            assert waiting == 1 and outcome == [], outcome
            eraser.commit()
        writer.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], cl.ConversationErasedError), outcome
        assert outcome[0].reason == "held"


def test_another_process_reads_an_erased_subject_no_longer_than_its_key_cache(shared_url: str) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    with (
        Ledger.open(settings=_settings(shared_url, key)) as other,
        Ledger.open(settings=_settings(shared_url, key)) as eraser,
    ):
        # Keys cached for no time: what the default 60 s come to once they have passed.
        other.mapper.keys.cache_seconds = 0.0  # type: ignore[attr-defined]
        cid = other.start("s", subject="alice")
        bob = other.start("s", subject="bob")
        other.append(cid, {"role": "user", "content": "alice's note"})
        other.append(bob, {"role": "user", "content": "bob's note"})
        assert other.context(cid)  # cached: the conversation (its key for no time)
        eraser.erase("alice", "asked")
        with pytest.raises(cl.ConversationErasedError):
            other.context(cid)
        with pytest.raises(cl.ConversationErasedError):
            other.transcript(cid)
        assert other.context(bob)[-1]["content"] == "bob's note"


def test_a_process_that_follows_the_log_stops_reading_an_erased_subject_at_its_erasure(
    shared_url: str,
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    with (
        Ledger.open(settings=_settings(shared_url, key)) as other,
        Ledger.open(settings=_settings(shared_url, key)) as eraser,
    ):
        models = SQLReadModels.for_ledger(other)
        other.attach(models.runner(other, close_with_runner=False))
        cid = other.start("s", subject="alice")
        other.append(cid, {"role": "user", "content": "alice's note"})
        assert other.context(cid) and other.wait_idle(60)
        eraser.erase("alice", "asked")
        assert other.wait_idle(60)  # its runner decoded the erasure's record
        assert models.transcript.transcript(cid) == []
        with pytest.raises(cl.ConversationErasedError):  # within the 60 s of its key cache
            other.context(cid)
        models.close()


def test_the_in_memory_store_fences_its_writes_too() -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    with Ledger.open(settings=_settings("memory://", key)) as ledger:
        cid = ledger.start("s", subject="alice")
        bob = ledger.start("s", subject="bob")
        ledger.append(cid, {"role": "user", "content": "before"})
        keys = ledger.mapper.keys  # type: ignore[attr-defined]
        row = keys.table.by_subject("alice")
        # The key table alone tombstoned, as another writer would: the cache holds the key.
        keys.table.tombstone(replace(row, erased_at=datetime.now(UTC), erase_reason="elsewhere"))
        before = _log(ledger)
        with pytest.raises(cl.ConversationErasedError) as refused:
            ledger.append(cid, {"role": "user", "content": "after"})
        assert refused.value.reason == "elsewhere" and _log(ledger) == before
        ledger.append(bob, {"role": "user", "content": "bob goes on"})


@pytest.mark.postgres
def test_a_group_commit_holding_a_refused_save_stores_the_others(postgres_url: str) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    with (
        Ledger.open(settings=_settings(postgres_url, key)) as other,
        Ledger.open(settings=_settings(postgres_url, key)) as eraser,
    ):
        alice = [other.start("s", subject="alice") for _ in range(4)]
        bobs = [other.start("s", subject=f"bob-{n}") for n in range(12)]
        for cid in [*alice, *bobs]:
            other.append(cid, {"role": "user", "content": "before"})
        eraser.erase("alice", "asked")
        outcomes: dict[UUID, list[object]] = {cid: [] for cid in [*alice, *bobs]}
        barrier = threading.Barrier(len(outcomes))

        def write(cid: UUID) -> None:
            barrier.wait(30)
            for n in range(5):
                try:
                    outcomes[cid].append(other.append(cid, {"role": "user", "content": f"after {n}"}))
                except cl.ConversationErasedError as exc:
                    outcomes[cid].append(exc)

        threads = [threading.Thread(target=write, args=(cid,)) for cid in outcomes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(isinstance(o, cl.ConversationErasedError) for cid in alice for o in outcomes[cid])
        for cid in bobs:
            assert outcomes[cid] == [1, 2, 3, 4, 5]
            assert [e.message["content"] for e in eraser.transcript(cid)][1:] == [
                f"after {n}" for n in range(5)
            ]
        assert eraser.verify().ok


@pytest.mark.postgres
def test_a_master_key_rotation_in_progress_holds_no_write_up(postgres_url: str) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    base, schema = postgres_url.split("?schema=")
    with Ledger.open(settings=_settings(postgres_url, key)) as ledger:
        cid = ledger.start("s", subject="alice")
        ledger.append(cid, {"role": "user", "content": "before"})
        with psycopg.connect(base) as rotation:
            # A re-wrap of the subject's key row as a rotation writes it, not committed.
            table = f'"{schema}"."contextledger_subject_keys"'
            rotation.execute(f"UPDATE {table} SET wrapped_key = wrapped_key WHERE subject = 'alice'")
            assert ledger.append(cid, {"role": "user", "content": "during"}) == 1
            rotation.rollback()
        assert [e.message["content"] for e in ledger.transcript(cid)] == ["before", "during"]
