"""What ``verify`` finds where an erasure's traces were tampered with, on a real SQLite
file and on PostgreSQL: a key row whose wrapped key is NULL without a tombstone is a
lost key (``KeyMissingError``), never an erasure; a tombstone whose ``ContentErased``
record is gone is a problem."""

from __future__ import annotations

import base64
import os
import sqlite3
from typing import Any

import psycopg
import pytest

import contextledger as cl
from contextledger.domain.erasure import Erasure


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def execute(url: str, sql: str, *params: Any) -> None:
    """``sql`` on the store's own tables (``{p}``: their prefix), as an intruder would."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql.format(p="stored"), params)
        return
    base, schema = url.split("?schema=")
    with psycopg.connect(base) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(sql.format(p="contextledger").replace("?", "%s"), params)


def open_ledger(url: str, master: str) -> cl.Ledger:
    return cl.Ledger.open(settings=cl.Settings(database_url=url, cipher_key=master, run_policy=False))


def test_a_key_nulled_without_a_tombstone_is_a_missing_key_not_an_erasure(shared_url: str) -> None:
    master = key()
    with open_ledger(shared_url, master) as ledger:
        lost = ledger.start("You help.", subject="user-1")
        ledger.append(lost, {"role": "user", "content": "hello"})
        kept = ledger.start("You help.", subject="user-2")
    execute(shared_url, "UPDATE {p}_subject_keys SET wrapped_key = NULL WHERE subject = ?", "user-1")
    with open_ledger(shared_url, master) as ledger:
        with pytest.raises(cl.KeyMissingError) as caught:
            ledger.transcript(lost)
        assert not isinstance(caught.value, cl.ConversationErasedError)
        report = ledger.verify()
        assert not report.ok and lost not in report.erased
        assert {p.conversation_id for p in report.problems} == {lost}
        assert all("key table" in p.problem for p in report.problems)
        assert ledger.transcript(kept) == []
        with pytest.raises(cl.KeyMissingError):
            ledger.start("again", subject="user-1")  # no new key over a lost one


def test_a_tombstone_whose_erasure_record_was_deleted_is_a_problem(shared_url: str) -> None:
    master = key()
    with open_ledger(shared_url, master) as ledger:
        gone = ledger.start("You help.", subject="user-1")
        ledger.append(gone, {"role": "user", "content": "hello"})
        ledger.start("You help.", subject="user-2")
        ledger.erase(subject="user-1", reason="asked")
        assert ledger.verify().ok  # so the check below can fail
    record = Erasure.id_for("user-1")
    column = record.hex if shared_url.startswith("sqlite") else record
    execute(shared_url, "DELETE FROM {p}_events WHERE originator_id = ?", column)
    with open_ledger(shared_url, master) as ledger:
        report = ledger.verify()
        assert not report.ok and report.erased == (gone,)
        [problem] = report.problems
        assert problem.conversation_id == gone and "no ContentErased record" in problem.problem
        assert "'user-1'" in problem.problem
