"""A subject's first data key written in the transaction of its first records, on a
SQLite file (``infrastructure/keys/new_keys.py``).

Two ledgers on one file are two processes. What each test pins: the key and the
records commit together or not at all; a new key that loses its place (another
process made the subject's key, erased the subject, named the conversation's subject,
or rotated the master key) stores nothing of itself, and the save lands under the
table's key or is refused with the error the table's state calls for.
"""

from __future__ import annotations

import base64
import os
import uuid
from typing import Any

import pytest

import contextledger as cl
from contextledger.application import Ledger, Settings
from contextledger.infrastructure.keys.new_keys import deferring
from contextledger.infrastructure.keys.subject_keys import SubjectKeys
from contextledger.infrastructure.keys.subject_mapper import key_ids_of, subject_keys_of


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def _open(url: str, key: str | None, **options: Any) -> Ledger:
    return Ledger(Settings(database_url=url, cipher_key=key, run_policy=False, **options))


def _keys(ledger: Ledger) -> SubjectKeys:
    keys = subject_keys_of(ledger)
    assert keys is not None
    return keys


def _first_key_id(ledger: Ledger, cid: uuid.UUID) -> bytes:
    stored = ledger.recorder.select_events(cid, lte=1)
    ids = key_ids_of(bytes(stored[0].state))
    assert ids is not None and len(ids) == 1
    return ids[0]


@pytest.mark.parametrize("master", [True, False], ids=["wrapped", "unwrapped"])
def test_a_start_refused_as_a_duplicate_leaves_no_key_behind(sqlite_url: str, master: bool) -> None:
    key = _key() if master else None
    cid = uuid.uuid4()
    with _open(sqlite_url, key, key_scope="store") as plain:  # its Started names no data key
        plain.start("s", conversation_id=cid)
    with _open(sqlite_url, key) as ledger:
        with pytest.raises(cl.DuplicateConversationError):
            ledger.start("s", conversation_id=cid)
        assert _keys(ledger).table.by_subject(str(cid)) is None
        other = ledger.start("s")
        ledger.append(other, {"role": "user", "content": "hello"})
        row = _keys(ledger).table.by_subject(str(other))
        assert row is not None and row.key_id == _first_key_id(ledger, other)


def test_a_new_key_another_process_made_first_gives_way_to_the_stored_one(sqlite_url: str) -> None:
    key = _key()
    with _open(sqlite_url, key) as slow, _open(sqlite_url, key) as fast:
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


def test_a_conversation_whose_own_subject_was_erased_before_it_started_is_refused(sqlite_url: str) -> None:
    key = _key()
    cid = uuid.uuid4()
    with _open(sqlite_url, key) as ledger, _open(sqlite_url, key) as eraser:
        ledger.start("s")
        eraser.erase(subject=str(cid), reason="asked first", force=True)
        with pytest.raises(cl.ConversationErasedError) as refused:
            ledger.start("s", conversation_id=cid)
        assert refused.value.subject == str(cid)
        assert ledger.recorder.select_events(cid) == []


def test_a_subject_another_process_named_is_the_one_the_first_record_is_under(sqlite_url: str) -> None:
    key = _key()
    cid = uuid.uuid4()
    with _open(sqlite_url, key) as ledger, _open(sqlite_url, key) as other:
        ledger.start("s")
        _keys(other).assign(cid, "carol")  # named there; this process does not know it
        ledger.start("s", conversation_id=cid)
        assert _keys(ledger).table.by_subject(str(cid)) is None
        carol = _keys(other).table.by_subject("carol")
        assert carol is not None and _first_key_id(ledger, cid) == carol.key_id
        other.erase(subject="carol", reason="asked")
        with _open(sqlite_url, key) as fresh, pytest.raises(cl.ConversationErasedError):
            fresh.context(cid)


def test_no_new_key_is_made_under_a_master_key_rotated_away(sqlite_url: str) -> None:
    old, new = _key(), _key()
    with _open(sqlite_url, old) as ledger:
        ledger.start("s")  # its master key checked
        with _open(sqlite_url, old) as rotator:
            assert _keys(rotator).rewrap(old, new) >= 1
        before = _keys(ledger).table.wrapped()
        with pytest.raises(cl.ConfigurationError):
            ledger.start("s")
        assert _keys(ledger).table.wrapped() == before
    with _open(sqlite_url, new) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "under the new key"})
        assert ledger.context(cid)[-1]["content"] == "under the new key"
