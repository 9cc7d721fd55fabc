"""Erasure with no configuration: on a store opened without a master key, every
conversation's records are under its data subject's key, kept unwrapped in the key
table, so that ``subject=`` and ``erase`` work on the default store -- on a real SQLite
file and on PostgreSQL. Stores written before per-subject keys (the golden log, and a
store of records in clear) load and verify unchanged, and new conversations in them get
keys of their own."""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.infrastructure.keys.subject_keys import UNWRAPPED
from contextledger.infrastructure.keys.subject_mapper import MARK

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)
SECRET = "the vault code is 7741-zebra-lantern"


def open_plain(url: str, **options: Any) -> cl.Ledger:
    return cl.Ledger.open(settings=cl.Settings(database_url=url, run_policy=False, **options))


def sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def raw_states(url: str, table: str = "stored_events") -> list[tuple[str, bytes]]:
    """Every stored record's conversation id and state bytes."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(url))) as db:
            return [(str(r[0]), bytes(r[1])) for r in db.execute(f"SELECT originator_id, state FROM {table}")]
    base, schema = url.split("?schema=")
    name = table.replace("stored_", "contextledger_")
    with psycopg.connect(base) as conn:
        rows = conn.execute(f'SELECT originator_id, state FROM "{schema}".{name}').fetchall()
    return [(str(r[0]), bytes(r[1])) for r in rows]


def key_rows(url: str) -> list[tuple[str, bytes | None, str]]:
    """The key table's rows: subject, key as stored, master id."""
    query = "SELECT subject, wrapped_key, master_id FROM {t}"
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(url))) as db:
            rows = db.execute(query.format(t="stored_subject_keys")).fetchall()
    else:
        base, schema = url.split("?schema=")
        with psycopg.connect(base) as conn:
            rows = conn.execute(query.format(t=f'"{schema}".contextledger_subject_keys')).fetchall()
    return [(r[0], None if r[1] is None else bytes(r[1]), r[2]) for r in rows]


def test_subject_and_erase_work_without_a_master_key(shared_url: str) -> None:
    with open_plain(shared_url) as ledger:
        kept = ledger.start("You help.", policy=POLICY, subject="user-7")
        ledger.append(kept, {"role": "user", "content": "keep me"})
        gone = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(gone, {"role": "user", "content": SECRET})
        fork = ledger.fork(gone)
        ledger.append(fork, {"role": "user", "content": "the fork's own words"})
        assert ledger.subject_of(gone) == ledger.subject_of(fork) == "user-42"
        assert ledger.transcript(gone)[-1].message["content"] == SECRET
    stored = raw_states(shared_url)
    assert stored and all(state.startswith(MARK) for _, state in stored)
    assert not any(SECRET.encode() in state or b"keep me" in state for _, state in stored)
    rows = {subject: (wrapped, master) for subject, wrapped, master in key_rows(shared_url)}
    assert rows["user-42"][1] == rows["user-7"][1] == rows[""][1] == UNWRAPPED
    assert rows["user-42"][0] is not None and len(rows["user-42"][0]) == 32

    with open_plain(shared_url) as ledger:
        report = ledger.erase("user-42", reason="asked to be forgotten")
        assert set(report.conversations) == {gone, fork} and not report.already_erased
        for cid in (gone, fork):
            with pytest.raises(cl.ConversationErasedError):
                ledger.transcript(cid)
        with pytest.raises(cl.ConversationErasedError):
            ledger.start("You help.", subject="user-42")
        assert ledger.transcript(kept)[-1].message["content"] == "keep me"
        verified = ledger.verify()
        assert verified.ok and set(verified.erased) == {gone, fork}
    rows_after = {subject: (wrapped, master) for subject, wrapped, master in key_rows(shared_url)}
    assert rows_after["user-42"][0] is None  # the key itself is gone
    assert rows_after["user-7"] == rows["user-7"]


def test_an_erased_subjects_unwrapped_key_is_left_nowhere_in_the_sqlite_files(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with open_plain(url) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": SECRET})
    data_key = next(wrapped for subject, wrapped, _ in key_rows(url) if subject == "user-42")
    assert data_key is not None
    files = lambda: b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())  # noqa: E731
    assert data_key in files()  # the scan can find it: the key is stored unwrapped
    with open_plain(url) as ledger:
        ledger.erase("user-42", reason="test")
    assert data_key not in files()
    assert SECRET.encode() not in files()


def test_a_store_without_a_master_key_opened_with_one_is_refused(shared_url: str) -> None:
    with open_plain(shared_url) as ledger:
        ledger.start("You help.", subject="user-1")
    key = base64.b64encode(os.urandom(32)).decode()
    with pytest.raises(cl.ConfigurationError, match="without a master key") as caught:
        open_plain(shared_url, cipher_key=key)
    assert caught.value.setting == "cipher_key"
    with open_plain(shared_url, read_only=True) as ledger:  # and it opens as it was
        assert len(ledger.conversation_ids()) == 1


def test_the_golden_log_verifies_unchanged_and_new_conversations_get_keys(tmp_path: Path) -> None:
    copy = tmp_path / "golden-v1.db"
    shutil.copyfile(FIXTURES / "golden-v1.db", copy)
    url = f"sqlite:///{copy}"
    before = raw_states(url)
    with open_plain(url) as ledger:
        old = ledger.conversation_ids()
        first = ledger.verify()
        assert first.ok and first.conversations == 2 and first.events == 143 and first.erased == ()
        transcripts = {cid: ledger.transcript(cid) for cid in old}
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": SECRET})
        own = ledger.start("You help.", policy=POLICY)
        ledger.append(own, {"role": "user", "content": "its own subject"})
    after = raw_states(url)
    assert after[: len(before)] == before  # nothing written before is rewritten
    new = [(oid, state) for oid, state in after[len(before) :]]
    assert {UUID(oid) for oid, _ in new} == {cid, own}
    assert all(state.startswith(MARK) for _, state in new)
    with open_plain(url) as ledger:
        ledger.erase("user-42", reason="test")
        report = ledger.verify()
        assert report.ok and report.erased == (cid,) and report.conversations == 4
        assert {c: ledger.transcript(c) for c in old} == transcripts
        assert ledger.transcript(own)[-1].message["content"] == "its own subject"


def test_a_store_of_records_in_clear_loads_unchanged_and_gains_keys(shared_url: str) -> None:
    # key_scope="store" without a master key writes records in clear and no key table:
    # the layout every store had before per-subject keys.
    with open_plain(shared_url, key_scope="store") as ledger:
        old = ledger.start("You help.", policy=POLICY)
        ledger.append(old, {"role": "user", "content": "written in clear"})
    assert any(b"written in clear" in state for _, state in raw_states(shared_url))
    with open_plain(shared_url) as ledger:
        assert ledger.transcript(old)[-1].message["content"] == "written in clear"
        ledger.append(old, {"role": "user", "content": "later words"})
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": SECRET})
        ledger.erase("user-42", reason="test")
        report = ledger.verify()
        assert report.ok and report.erased == (cid,)
        assert [e.message["content"] for e in ledger.transcript(old)][-2:] == [
            "written in clear",
            "later words",
        ]
    assert not any(SECRET.encode() in state for _, state in raw_states(shared_url))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=12, max_size=200).filter(lambda t: t.strip() and "\x00" not in t))
def test_any_text_appended_without_a_master_key_is_stored_under_its_subjects_key_and_erased_with_it(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('prop') / 'app.db'}"
    with open_plain(url) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="someone")
        ledger.append(cid, {"role": "user", "content": text})
        assert ledger.transcript(cid)[-1].message["content"] == text
    assert all(state.startswith(MARK) for _, state in raw_states(url))
    with open_plain(url) as ledger:
        ledger.erase("someone", reason="property")
        with pytest.raises(cl.ConversationErasedError):
            ledger.transcript(cid)
        assert ledger.verify().erased == (cid,)
