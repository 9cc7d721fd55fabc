"""Encryption at rest and compression, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

import psycopg
import pytest

from contextledger.application import Ledger, Settings
from contextledger.domain import StoreError

SECRET_TEXT = "my card number is 4111-1111-1111-1111"


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def raw_sqlite(path: Path) -> bytes:
    with sqlite3.connect(path) as conn:
        return b"".join(row[0] for row in conn.execute("SELECT state FROM stored_events"))


def raw_postgres(url: str) -> bytes:
    base, schema = url.split("?schema=")
    with psycopg.connect(base) as conn:
        rows = conn.execute(f'SELECT state FROM "{schema}".contextledger_events').fetchall()
    return b"".join(bytes(r[0]) for r in rows)


def write_and_read(url: str, **options: object) -> None:
    settings = Settings(database_url=url, run_policy=False, **options)  # type: ignore[arg-type]
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("You are a payments assistant.")
        ledger.append(cid, {"role": "user", "content": SECRET_TEXT})
    with Ledger.open(settings=settings) as ledger:
        assert ledger.transcript(cid)[0].message["content"] == SECRET_TEXT
        assert ledger.verify(cid).ok


@pytest.mark.parametrize("compress", [False, True])
def test_sqlite_events_are_encrypted_at_rest(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "enc.db"
    write_and_read(f"sqlite:///{path}", cipher_key=key(), compress=compress)
    stored = raw_sqlite(path)
    assert stored and SECRET_TEXT.encode() not in stored and b"payments assistant" not in stored


def test_without_a_cipher_and_per_subject_keys_the_plain_text_is_stored_so_the_check_above_can_fail(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plain.db"
    write_and_read(f"sqlite:///{path}", key_scope="store")
    assert SECRET_TEXT.encode() in raw_sqlite(path)


def test_without_a_cipher_records_are_still_under_their_subjects_keys(tmp_path: Path) -> None:
    path = tmp_path / "default.db"
    write_and_read(f"sqlite:///{path}")
    stored = raw_sqlite(path)
    assert stored and SECRET_TEXT.encode() not in stored and b"payments assistant" not in stored


def test_compression_shrinks_what_is_stored(tmp_path: Path) -> None:
    sizes = {}
    for compress in (False, True):
        path = tmp_path / f"c{compress}.db"
        with Ledger.open(settings=Settings(database_url=f"sqlite:///{path}", run_policy=False,
                                           compress=compress)) as ledger:
            cid = ledger.start("s")
            ledger.append(cid, {"role": "user", "content": "the same words again " * 200})
        sizes[compress] = len(raw_sqlite(path))
    assert sizes[True] < sizes[False] / 3


@pytest.mark.postgres
def test_postgres_events_are_encrypted_and_compressed_at_rest(postgres_url: str) -> None:
    write_and_read(postgres_url, cipher_key=key(), compress=True)
    stored = raw_postgres(postgres_url)
    assert stored and SECRET_TEXT.encode() not in stored


def test_reading_with_the_wrong_key_is_a_store_error_not_garbage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with Ledger.open(settings=Settings(database_url=url, run_policy=False, cipher_key=key())) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": SECRET_TEXT})
    other_key = Settings(database_url=url, run_policy=False, cipher_key=key())
    with Ledger.open(settings=other_key) as ledger, pytest.raises(StoreError, match="cannot decode"):
        ledger.transcript(cid)
