"""Operator mistakes refused before anything changes, on a real SQLite file and on
PostgreSQL: a wrong master key (``erase``, ``keys rotate``), a subject no conversation
names, a process still on the old master key after a rotation, a new master key of the
wrong length; and two erasures of one subject at once. Each compares the store's
events and key table before and after."""

from __future__ import annotations

import base64
import os
import sqlite3
import threading
from typing import Any

import psycopg
import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.keys.subject_keys import CHECK_SUBJECT, SubjectKeys, rewrap_keys
from contextledger.infrastructure.keys.subject_mapper import subject_keys_of


def key(size: int = 32) -> str:
    return base64.b64encode(os.urandom(size)).decode()


def open_ledger(url: str, master: str) -> cl.Ledger:
    return cl.Ledger.open(settings=cl.Settings(database_url=url, run_policy=False, cipher_key=master))


def keys_of(ledger: cl.Ledger) -> SubjectKeys:
    keys = subject_keys_of(ledger)
    assert keys is not None
    return keys


def _query(url: str, sql: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    base, schema = url.split("?schema=")
    with psycopg.connect(base) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def stored(url: str) -> tuple[list[tuple[Any, ...]], ...]:
    """Everything an erasure or a rotation could change: every event, snapshot, data key
    and conversation -> subject row, as the store holds them."""
    prefix = "stored" if url.startswith("sqlite") else "contextledger"
    events = "stored_events" if url.startswith("sqlite") else "contextledger_events"
    snapshots = "stored_snapshots" if url.startswith("sqlite") else "contextledger_snapshots"
    return (
        sorted(map(repr, _query(url, f"SELECT originator_id, originator_version, state FROM {events}"))),  # type: ignore[arg-type]
        sorted(map(repr, _query(url, f"SELECT originator_id, originator_version, state FROM {snapshots}"))),  # type: ignore[arg-type]
        sorted(map(repr, _query(url, f"SELECT * FROM {prefix}_subject_keys"))),  # type: ignore[arg-type]
        sorted(map(repr, _query(url, f"SELECT * FROM {prefix}_conversation_subjects"))),  # type: ignore[arg-type]
    )


def populate(url: str, master: str) -> cl.ConversationId:
    with open_ledger(url, master) as ledger:
        cid = ledger.start("You help.", subject="user-1")
        ledger.append(cid, {"role": "user", "content": "my secret"})
        ledger.start("Another.")  # its own subject
    return cid


def test_erase_with_a_wrong_master_key_is_refused_naming_the_store_and_changes_nothing(
    shared_url: str,
) -> None:
    master = key()
    cid = populate(shared_url, master)
    before = stored(shared_url)
    with open_ledger(shared_url, key()) as wrong:
        for attempt in (
            lambda: wrong.erase(subject="user-1", reason="wrong key"),
            lambda: wrong.erase("user-1", "wrong key"),
            lambda: wrong.erase(subject="never-seen", reason="wrong key", force=True),
        ):
            with pytest.raises(cl.ConfigurationError, match="not the current master key") as caught:
                attempt()
            assert caught.value.setting == "cipher_key"
            assert caught.value.url is not None and caught.value.url in caught.value.message
            assert caught.value.url.split(":")[0] == shared_url.split(":")[0]
        with pytest.raises(cl.ConfigurationError, match="not the current master key"):
            wrong.start("x", subject="user-2")  # no key is made under it either
    assert stored(shared_url) == before
    with open_ledger(shared_url, master) as ledger:
        assert ledger.transcript(cid)[0].message["content"] == "my secret"
        assert ledger.erase(subject="user-1", reason="the right key").conversations == (cid,)


def test_a_key_table_made_before_the_check_row_checks_the_key_against_a_data_key(shared_url: str) -> None:
    master = key()
    populate(shared_url, master)
    prefix = "stored" if shared_url.startswith("sqlite") else "contextledger"
    if shared_url.startswith("sqlite"):
        with sqlite3.connect(shared_url.removeprefix("sqlite:///")) as conn:
            conn.execute(f"DELETE FROM {prefix}_subject_keys WHERE subject = ''")
    else:
        base, schema = shared_url.split("?schema=")
        with psycopg.connect(base) as conn:
            conn.execute(f'DELETE FROM "{schema}".{prefix}_subject_keys WHERE subject = %s', (CHECK_SUBJECT,))
    before = stored(shared_url)
    assert not any("''" in row.split(",")[1] for row in before[2])  # no check row left
    with open_ledger(shared_url, key()) as wrong, pytest.raises(cl.ConfigurationError):
        wrong.erase(subject="user-1", reason="wrong key")
    assert stored(shared_url) == before  # not even a check row under the wrong key
    with open_ledger(shared_url, master) as ledger:
        keys_of(ledger).check_master()  # the data keys open: the check row is made
        assert ledger.erase(subject="user-1", reason="ok").already_erased is False


def test_erasing_a_subject_no_conversation_names_is_refused_unless_forced(shared_url: str) -> None:
    master = key()
    populate(shared_url, master)
    before = stored(shared_url)
    with open_ledger(shared_url, master) as ledger:
        with pytest.raises(cl.InvalidArgumentError, match="no conversation names data subject 'user-l'"):
            ledger.erase(subject="user-l", reason="a typo")
        with pytest.raises(cl.InvalidArgumentError, match="force"):
            ledger.erase("user-l", "a typo, positionally")
        assert stored(shared_url) == before
        report = ledger.erase(subject="user-9", reason="pre-empted", force=True)
        assert (report.subject, report.conversations, report.already_erased) == ("user-9", (), False)
        assert ledger.erase("user-10", "pre-empted", force=True).subject == "user-10"
        with pytest.raises(cl.ConversationErasedError):
            ledger.start("x", subject="user-9")
        again = ledger.erase(subject="user-9", reason="again")  # known now: no force needed
        assert again.already_erased and again.reason == "pre-empted"


def test_a_process_still_on_the_old_master_key_makes_no_key_after_a_rotation(shared_url: str) -> None:
    old, new = key(), key()
    cid = populate(shared_url, old)
    with open_ledger(shared_url, old) as stale:
        stale.append(cid, {"role": "user", "content": "before the rotation"})  # its key is cached
        with open_ledger(shared_url, old) as rotator:
            assert keys_of(rotator).rewrap(old, new) == 2
        before = stored(shared_url)
        for attempt in (
            lambda: stale.start("x", subject="user-new"),
            lambda: stale.start("x"),  # its own subject: a key of its own
            lambda: stale.erase(subject="user-1", reason="old key"),
        ):
            with pytest.raises(cl.ConfigurationError, match="restart every process with the new key"):
                attempt()
        assert stored(shared_url) == before
    with open_ledger(shared_url, new) as ledger:
        assert ledger.transcript(cid)[-1].message["content"] == "before the rotation"
        ledger.start("x", subject="user-new")


def test_rotation_refuses_a_wrong_current_key_and_a_new_key_of_the_wrong_length(
    shared_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master = key()
    populate(shared_url, master)
    before = stored(shared_url)
    with open_ledger(shared_url, master) as ledger:
        table = keys_of(ledger).table
        with pytest.raises(cl.ConfigurationError, match="not the current master key"):
            rewrap_keys(table, key(), key())
        with pytest.raises(cl.ConfigurationError, match="holds 16 bytes"):
            rewrap_keys(table, master, key(16))
    assert stored(shared_url) == before
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", master)
    assert main(["keys", "rotate", "--database", shared_url, "--new-key", key(16)]) == 2
    assert "32 bytes" in capsys.readouterr().err
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", key())
    assert main(["keys", "rotate", "--database", shared_url, "--new-key", key()]) == 2
    assert "not the current master key" in capsys.readouterr().err
    assert stored(shared_url) == before
    with pytest.raises(cl.ConfigurationError, match="holds 20 bytes"):
        open_ledger(shared_url, key(20))


def _erase_at_once(
    ledger: cl.Ledger, subject: str, barrier: threading.Barrier, results: list[Any], i: int
) -> None:
    barrier.wait(30)
    try:
        results[i] = ledger.erase(subject=subject, reason=f"eraser {i}")
    except cl.ContextLedgerError as exc:
        results[i] = exc


def test_two_erasures_of_one_subject_at_once_both_return_a_report(shared_url: str) -> None:
    master = key()
    ledgers = [open_ledger(shared_url, master) for _ in range(2)]
    try:
        for round_ in range(4):
            subject = f"raced-{round_}"
            cid = ledgers[0].start("x", subject=subject)
            ledgers[0].append(cid, {"role": "user", "content": "raced"})
            barrier = threading.Barrier(2)
            results: list[Any] = [None, None]
            threads = [
                threading.Thread(target=_erase_at_once, args=(ledgers[i], subject, barrier, results, i))
                for i in range(2)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert all(isinstance(r, cl.ErasureReport) for r in results), results
            assert sorted(r.already_erased for r in results) == [False, True]
            assert {r.conversations for r in results} == {(cid,)}
            assert len({(r.erased_at, r.reason) for r in results}) == 1
    finally:
        for ledger in ledgers:
            ledger.close()


@pytest.mark.parametrize(
    "bad", ["\ud800", "a\x00b", "x" * 201, "", "   "], ids=["surrogate", "nul", "201-chars", "empty", "blank"]
)
def test_a_bad_subject_or_reason_is_refused_alike_by_start_and_erase(sqlite_url: str, bad: str) -> None:
    master = key()
    populate(sqlite_url, master)
    before = stored(sqlite_url)
    with open_ledger(sqlite_url, master) as ledger:
        attempts = [
            lambda: ledger.start("x", subject=bad),
            lambda: ledger.erase(subject=bad, reason="r"),
            lambda: ledger.erase(subject=bad, reason="r", force=True),
        ]
        if len(bad) < 201:  # 201 characters make a fine reason
            attempts.append(lambda: ledger.erase(subject="user-1", reason=bad))
        if bad.strip():
            attempts.append(lambda: ledger.erase(bad, "r", force=True))
        for attempt in attempts:
            with pytest.raises(cl.InvalidArgumentError) as caught:
                attempt()
            assert caught.value.argument in ("subject", "reason", "subject_or_conversation")
        assert stored(sqlite_url) == before
        ledger.start("x", subject="y" * 200)  # the one limit, everywhere
        assert ledger.erase(subject="y" * 200, reason="r").subject == "y" * 200
