"""With a cipher key, the application's own names -- conversation keys, a fork's key,
client message ids -- are sealed in the read models too (no SQLite file and no
PostgreSQL table holds them), and a conversation is still found by its key through
the lookup digest; without a key they are stored as they are (so the scan can fail)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextledger.application import Ledger, Settings
from contextledger.infrastructure.readmodels import SQLReadModels

NAME = "zq-private-name-5e1b"
KEY = f"chat-{NAME}"
FORK_KEY = f"fork-{NAME}"
CLIENT_ID = f"msg-{NAME}"


def plant(settings: Settings) -> None:
    """Name a conversation, a fork and a message; read every name back."""
    with Ledger.open(settings=settings, run_policy=False) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        cid = ledger.start("You are terse.", key=KEY)
        ledger.append(cid, {"role": "user", "content": "hello"}, client_message_id=CLIENT_ID)
        ledger.append(cid, {"role": "assistant", "content": "hi"})
        fork = ledger.fork(cid, key=FORK_KEY)
        assert ledger.wait_idle(60)
        found = models.conversations.by_key(KEY)
        assert found is not None and found.conversation_id == cid and found.key == KEY
        forked = models.conversations.by_key(FORK_KEY)
        assert forked is not None and forked.conversation_id == fork and forked.key == FORK_KEY
        assert models.conversations.by_key("chat-nobody") is None
        assert models.token_totals.totals(cid).key == KEY  # type: ignore[union-attr]
        assert models.transcript.transcript(cid)[0].client_message_id == CLIENT_ID


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def sqlite_settings(folder: Path, **options: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{folder / 'ledger.db'}", poll_interval=0.02, **options)


def _holds_name(found: dict[str, bool]) -> bool:
    return any(found.values())


def scan(folder: Path) -> dict[str, bool]:
    """For every file in ``folder`` (database, views, WAL, shared memory): name found?"""
    return {p.name: NAME.encode() in p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def scan_postgres(url: str) -> dict[str, bool]:
    """For every table of the URL's schema: the name in any column of any row?"""
    base, schema = url.split("?schema=")
    found: dict[str, bool] = {}
    with psycopg.connect(base) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))]
        for table in tables:
            rows = conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall()
            raw = b"".join(v if isinstance(v, bytes) else str(v).encode() for row in rows for v in row)
            found[table] = NAME.encode() in raw
    return found


def test_with_a_key_no_sqlite_file_holds_a_key_or_client_message_id(tmp_path: Path) -> None:
    plant(sqlite_settings(tmp_path, cipher_key=key()))
    found = scan(tmp_path)
    assert {"ledger.db", "ledger.views.db"} <= set(found)
    assert not _holds_name(found), found


def test_without_a_key_the_names_are_found_in_the_read_models(tmp_path: Path) -> None:
    plant(sqlite_settings(tmp_path))
    found = scan(tmp_path)
    assert found.get("ledger.views.db") or found.get("ledger.views.db-wal")


@pytest.mark.postgres
def test_with_a_key_no_postgres_column_holds_a_key_or_client_message_id(postgres_url: str) -> None:
    plant(Settings(database_url=postgres_url, cipher_key=key()))
    found = scan_postgres(postgres_url)
    assert {"cl_conversations", "cl_token_totals", "cl_transcript"} <= set(found)
    assert not _holds_name(found), found


@pytest.mark.postgres
def test_without_a_key_the_postgres_scan_finds_the_names(postgres_url: str) -> None:
    plant(Settings(database_url=postgres_url))
    found = scan_postgres(postgres_url)
    assert found["cl_conversations"] and found["cl_token_totals"] and found["cl_transcript"]

