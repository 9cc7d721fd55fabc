"""Encryption at rest covers everything the library stores: a marker planted in the
system prompt, messages, tool-call arguments, tool results and (through the offline
summarizer, which copies text) summaries is found nowhere in the raw bytes of any
SQLite file (event store, read models, WAL) or any PostgreSQL table of the schema when
a cipher key is set, and is found in them without one (so the scan can fail)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.domain import StoreError
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.readmodels import SQLReadModels

MARKER = "qx-planted-marker-7f3a9c"
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def plant(settings: Settings) -> Any:
    """Write the marker everywhere content goes; read it back through every reader."""
    with Ledger.open(settings=settings) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        cid = ledger.start(f"You are the {MARKER} assistant.", policy=POLICY)
        call = {"id": "call_1", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"q": MARKER})}}
        for i in range(4):
            ledger.append(cid, {"role": "user", "content": f"question {i} about {MARKER}"})
            ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"call_{i}"}]})
            ledger.append(cid, {"role": "tool", "tool_call_id": f"call_{i}", "content": f"found {MARKER}"})
            ledger.append(cid, {"role": "assistant", "content": f"answer {i}: {MARKER}"})
        # Edits carry content too: an edit's new message, a retraction's reason, a fork.
        ledger.edit(cid, 12, {"role": "user", "content": f"edited question about {MARKER}"})
        ledger.retract(cid, 15, reason=f"withdrawn: {MARKER}")
        ledger.fork(cid)
        assert ledger.wait_idle(60)
        summaries = models.summaries.summaries(cid)
        assert summaries and any(MARKER in s.text for s in summaries)
        rows = models.transcript.transcript(cid)
        assert len({r.position for r in rows}) == 16 and MARKER in rows[0].message["content"]
        assert MARKER in json.dumps(rows[1].message)
        assert any(MARKER in str(m.get("content")) for m in ledger.context(cid))
    return cid


def scan_sqlite(folder: Path) -> dict[str, bool]:
    """For every file in ``folder`` (database, views, WAL, shared memory): marker found?"""
    return {p.name: MARKER.encode() in p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def sqlite_settings(folder: Path, **options: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{folder / 'ledger.db'}", poll_interval=0.02,
                    snapshot_interval=4, **options)


def test_with_a_key_no_sqlite_file_holds_the_marker(tmp_path: Path) -> None:
    folder = tmp_path / "enc"
    folder.mkdir()
    plant(sqlite_settings(folder, cipher_key=key()))
    found = scan_sqlite(folder)
    assert {"ledger.db", "ledger.views.db"} <= set(found)
    assert not any(found.values()), found


def test_without_a_key_and_per_subject_keys_the_scan_finds_the_marker_in_events_and_read_models(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    plant(sqlite_settings(folder, key_scope="store"))
    found = scan_sqlite(folder)
    assert found.get("ledger.db") or found.get("ledger.db-wal")
    assert found.get("ledger.views.db") or found.get("ledger.views.db-wal")


def test_read_models_need_the_key_and_export_asks_for_plaintext(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = key()
    settings = sqlite_settings(tmp_path, cipher_key=secret)
    cid = plant(settings)
    without = SQLReadModels.for_url(settings.database_url)
    with pytest.raises(StoreError, match="cipher key"):
        without.transcript.transcript(cid)
    without.close()
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", secret)
    url = settings.database_url
    assert main(["export", str(cid), "--database", url]) == 2
    assert MARKER not in capsys.readouterr().out
    assert main(["export", str(cid), "--database", url, "--plaintext"]) == 0
    assert MARKER in capsys.readouterr().out
    assert main(["stats", str(cid), "--database", url, "--json"]) == 0


def scan_postgres(url: str) -> dict[str, bool]:
    """For every table of the URL's schema: marker in any column of any row?"""
    base, schema = url.split("?schema=")
    found: dict[str, bool] = {}
    with psycopg.connect(base) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))]
        for table in tables:
            rows = conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall()
            raw = b"".join(v if isinstance(v, bytes) else str(v).encode() for row in rows for v in row)
            found[table] = MARKER.encode() in raw
    return found


@pytest.mark.postgres
def test_with_a_key_no_postgres_table_holds_the_marker(postgres_url: str) -> None:
    plant(Settings(database_url=postgres_url, snapshot_interval=4, cipher_key=key()))
    found = scan_postgres(postgres_url)
    assert {"cl_transcript", "cl_summaries"} <= set(found) and len(found) >= 5
    assert not any(found.values()), found


@pytest.mark.postgres
def test_without_a_key_and_per_subject_keys_the_postgres_scan_finds_the_marker(postgres_url: str) -> None:
    plant(Settings(database_url=postgres_url, snapshot_interval=4, key_scope="store"))
    found = scan_postgres(postgres_url)
    assert found["cl_transcript"] and found["cl_summaries"]
    assert any(found[t] for t in found if not t.startswith("cl_"))  # the events
