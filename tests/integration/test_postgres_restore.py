"""Backups and restores of a PostgreSQL store, on a server of the test's own
(tests/support/own_postgres.py): ``pg_dump``/``pg_restore`` give back a store that
verifies and replays identically, and a backup taken before an erasure does not bring
the subject back once the erasures made since are re-applied
(``contextledger erase --export-journal`` / ``--reapply``). A plain ``pg_basebackup`` of
the server, started as a server of its own, does the same for the whole cluster."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextledger.application import Ledger, Settings
from contextledger.domain import ReductionPolicy
from contextledger.domain.values.errors import ConversationErasedError
from contextledger.infrastructure.readmodels import SQLReadModels
from tests.support.own_postgres import OwnPostgres, postgres_binaries
from tests.support.processes import run_cli

pytestmark = [pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)
MARKER = "qx-restored-marker-51c2"
KEY = base64.b64encode(b"r" * 32).decode()


@pytest.fixture(scope="module")
def server() -> Iterator[OwnPostgres]:
    if postgres_binaries() is None:
        pytest.fail("no PostgreSQL binaries under /usr/lib/postgresql to start a server of the test's own")
    own = OwnPostgres()
    try:
        own.start()
        yield own
    finally:
        own.close()


def _settings(url: str, **updates: Any) -> Settings:
    return Settings(database_url=url, cipher_key=KEY, poll_interval=0.02, snapshot_interval=4, **updates)


def _dump(server: OwnPostgres, url: str, file: Path) -> None:
    subprocess.run(
        [str(server.bin / "pg_dump"), "-Fc", "-d", url, "-f", str(file)], check=True, capture_output=True
    )


def _restore(server: OwnPostgres, file: Path) -> str:
    url = server.create_database(f"r_{uuid.uuid4().hex[:12]}")
    subprocess.run(
        [str(server.bin / "pg_restore"), "--no-owner", "-d", url, str(file)], check=True, capture_output=True
    )
    return url


def _plain_dump(server: OwnPostgres, url: str) -> bytes:
    """Every byte of the database's contents, as ``pg_dump`` writes them."""
    return subprocess.run([str(server.bin / "pg_dump"), "-d", url], check=True, capture_output=True).stdout


def _cli(*args: str, database: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("CONTEXTLEDGER_") and k != "OPENAI_API_KEY"
    }
    env["CONTEXTLEDGER_CIPHER_KEY"] = KEY
    return run_cli(["--database", database, *args], env=env, cwd=REPO)


def _write(url: str) -> dict[str, uuid.UUID]:
    """Two subjects' conversations (alice's carrying the marker), read models beside."""
    with Ledger.open(settings=_settings(url)) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        alice = ledger.start(f"You help {MARKER}.", subject="alice")
        bob = ledger.start("You help bob.", subject="bob")
        for i in range(6):
            ledger.append(alice, {"role": "user", "content": f"alice {i} {MARKER}"})
            ledger.append(bob, {"role": "user", "content": f"bob {i}"})
        assert ledger.wait_idle(60)
    return {"alice": alice, "bob": bob}


def _replayed(url: str) -> list[str]:
    done = _cli("--json", "replay", "--all", database=url)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_dump_restores_a_store_that_verifies_and_replays_identically(
    server: OwnPostgres, tmp_path: Path
) -> None:
    url = server.create_database(f"s_{uuid.uuid4().hex[:12]}")
    cids = _write(url)
    _dump(server, url, tmp_path / "store.dump")
    restored = _restore(server, tmp_path / "store.dump")
    assert _replayed(restored) == _replayed(url)
    for database in (url, restored):
        done = _cli("verify", database=database)
        assert done.returncode == 0, done.stderr
    with (
        Ledger.open(settings=_settings(restored), read_only=True) as ledger,
        Ledger.open(settings=_settings(url), read_only=True) as original,
    ):
        for cid in cids.values():
            assert ledger.transcript(cid) == original.transcript(cid)
            assert ledger.context(cid) == original.context(cid)
        models = SQLReadModels.for_ledger(ledger, create=False)
        try:
            assert models.transcript.transcript(cids["bob"]) == original.transcript(cids["bob"])
        finally:
            models.close()


def test_an_old_backup_restored_does_not_bring_an_erased_subject_back(
    server: OwnPostgres, tmp_path: Path
) -> None:
    live = server.create_database(f"s_{uuid.uuid4().hex[:12]}")
    cids = _write(live)
    _dump(server, live, tmp_path / "old.dump")  # before the erasure
    erased = _cli("erase", "--subject", "alice", "--reason", "right to erasure", database=live)
    assert erased.returncode == 0, erased.stderr
    journal = tmp_path / "erasures.jsonl"
    exported = _cli("erase", "--export-journal", str(journal), database=live)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [(line["subject"], line["conversations"]) for line in lines] == [("alice", [str(cids["alice"])])]

    restored = _restore(server, tmp_path / "old.dump")
    with psycopg.connect(restored) as conn:
        (wrapped,) = conn.execute(
            "SELECT wrapped_key FROM contextledger_subject_keys WHERE subject = 'alice'"
        ).fetchone() or (None,)
    assert wrapped is not None  # the backup holds alice's key again
    before = _cli("export", "--plaintext", database=restored)
    assert before.returncode == 0, before.stderr
    assert MARKER in before.stdout  # the scan below can fail: the content is readable again
    assert _plain_dump(server, restored).count(bytes(wrapped).hex().encode()) == 1

    reapplied = _cli("erase", "--reapply", str(journal), database=restored)
    assert reapplied.returncode == 0, reapplied.stderr
    assert "subject alice erased again" in reapplied.stdout
    again = _cli("erase", "--reapply", live, database=restored)  # from the live store: nothing more to do
    assert again.returncode == 0, again.stderr
    assert "subject alice was erased already" in again.stdout

    worker = _cli("worker", "--once", database=restored)
    assert worker.returncode == 0, worker.stderr
    with psycopg.connect(restored, autocommit=True) as conn:
        conn.execute("VACUUM contextledger_subject_keys")
    with Ledger.open(settings=_settings(restored, run_policy=False)) as ledger:
        models = SQLReadModels.for_ledger(ledger, create=False)
        try:
            assert models.conversations.conversations()
            assert cids["alice"] not in {r.conversation_id for r in models.conversations.conversations()}
            assert models.transcript.transcript(cids["alice"]) == []
        finally:
            models.close()
        with pytest.raises(ConversationErasedError):
            ledger.transcript(cids["alice"])
        assert [e.message["content"] for e in ledger.transcript(cids["bob"])] == [
            f"bob {i}" for i in range(6)
        ]
    after = _cli("export", "--plaintext", database=restored)
    assert after.returncode == 0, after.stderr
    assert after.stdout.count(MARKER) == 0
    scanned = _plain_dump(server, restored)
    assert scanned.count(MARKER.encode()) == 0
    assert scanned.count(bytes(wrapped).hex().encode()) == 0  # the key restored is gone again
    assert _plain_dump(server, live).count(MARKER.encode()) == 0
    verified = _cli("verify", database=restored)
    assert verified.returncode == 0, verified.stderr


def test_reapply_refuses_a_journal_that_is_not_one(server: OwnPostgres, tmp_path: Path) -> None:
    url = server.create_database(f"s_{uuid.uuid4().hex[:12]}")
    _write(url)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"subject": "alice"}\n')
    done = _cli("erase", "--reapply", str(bad), database=url)
    assert done.returncode == 2
    assert "not an erasure journal line" in done.stderr
    with Ledger.open(settings=_settings(url), read_only=True) as ledger:
        assert ledger.transcript(ledger.conversation_ids()[0])  # nothing erased


def _fill(url: str) -> dict[str, uuid.UUID]:
    """Conversations of two subjects (alice's carrying the marker) summarized under
    ``POLICY``, a fork of alice's, and the read models caught up beside them."""
    with Ledger.open(settings=_settings(url)) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        cids = {
            "alice": ledger.start(f"You help {MARKER}.", subject="alice", policy=POLICY),
            "bob": ledger.start("You help bob.", subject="bob", policy=POLICY),
            "carol": ledger.start("You help carol.", subject="carol"),
        }
        for i in range(10):
            ledger.append(cids["alice"], {"role": "user", "content": f"alice {i} {MARKER}"})
            ledger.append(cids["bob"], {"role": "user", "content": f"bob {i}"})
        ledger.append(cids["carol"], {"role": "user", "content": "carol 0"})
        cids["fork"] = ledger.fork(cids["alice"])
        ledger.append(cids["fork"], {"role": "user", "content": f"fork {MARKER}"})
        assert ledger.wait_idle(60)
        assert models.summaries.summaries(cids["alice"]) and models.summaries.summaries(cids["bob"])
    return cids


def _same_store(restored: str, original: str, cids: dict[str, uuid.UUID]) -> None:
    """Transcripts, contexts, summaries and read models of ``restored`` equal the original's."""
    with (
        Ledger.open(settings=_settings(restored), read_only=True) as ledger,
        Ledger.open(settings=_settings(original), read_only=True) as source,
    ):
        assert sorted(ledger.conversation_ids()) == sorted(source.conversation_ids())
        copied = SQLReadModels.for_ledger(ledger, create=False)
        models = SQLReadModels.for_ledger(source, create=False)
        try:
            assert copied.conversations.conversations() == models.conversations.conversations()
            for cid in cids.values():
                assert ledger.transcript(cid) == source.transcript(cid)
                assert ledger.context(cid) == source.context(cid)
                assert ledger.summaries(cid) == source.summaries(cid)
                assert copied.transcript.transcript(cid) == models.transcript.transcript(cid)
                assert copied.summaries.summaries(cid) == models.summaries.summaries(cid)
        finally:
            copied.close()
            models.close()


def test_a_base_backup_started_as_its_own_server_verifies_replays_identically_and_takes_erasures(
    server: OwnPostgres,
) -> None:
    name = f"s_{uuid.uuid4().hex[:12]}"
    live = server.create_database(name)
    cids = _fill(live)
    backup = server.base_backup(server.folder / f"backup-{uuid.uuid4().hex[:8]}")
    try:
        assert not (backup / "standby.signal").exists() and (backup / "backup_label").exists()
        copy = OwnPostgres.from_backup(backup)
    finally:
        shutil.rmtree(backup, ignore_errors=True)
    try:
        assert copy.port != server.port
        assert copy.execute("SELECT pg_is_in_recovery()") == [(False,)]  # a primary of its own
        restored = copy.database_url(name)
        for database in (live, restored):
            done = _cli("verify", database=database)
            assert done.returncode == 0, done.stderr
        assert _replayed(restored) == _replayed(live)
        _same_store(restored, live, cids)
        with psycopg.connect(restored) as conn:
            (wrapped,) = conn.execute(
                "SELECT wrapped_key FROM contextledger_subject_keys WHERE subject = 'alice'"
            ).fetchone() or (None,)
        assert wrapped is not None

        # An erasure on the original after the backup; the copy still reads alice.
        erased = _cli("erase", "--subject", "alice", "--reason", "right to erasure", database=live)
        assert erased.returncode == 0, erased.stderr
        journal = copy.folder / "erasures.jsonl"
        exported = _cli("erase", "--export-journal", str(journal), database=live)
        assert exported.returncode == 0, exported.stderr
        before = _cli("export", "--plaintext", database=restored)
        assert before.returncode == 0, before.stderr
        assert MARKER in before.stdout  # the scan below can fail: the content is readable here
        assert _plain_dump(copy, restored).count(bytes(wrapped).hex().encode()) == 1

        reapplied = _cli("erase", "--reapply", str(journal), database=restored)
        assert reapplied.returncode == 0, reapplied.stderr
        assert "subject alice erased again" in reapplied.stdout
        worker = _cli("worker", "--once", database=restored)
        assert worker.returncode == 0, worker.stderr
        with psycopg.connect(restored, autocommit=True) as conn:
            conn.execute("VACUUM contextledger_subject_keys")
        with Ledger.open(settings=_settings(restored), read_only=True) as ledger:
            for erased_cid in (cids["alice"], cids["fork"]):
                with pytest.raises(ConversationErasedError):
                    ledger.transcript(erased_cid)
            assert [e.message["content"] for e in ledger.transcript(cids["bob"])][:2] == ["bob 0", "bob 1"]
            models = SQLReadModels.for_ledger(ledger, create=False)
            try:
                listed = {r.conversation_id for r in models.conversations.conversations()}
                assert cids["bob"] in listed and not {cids["alice"], cids["fork"]} & listed
                assert models.transcript.transcript(cids["alice"]) == []
            finally:
                models.close()
        after = _cli("export", "--plaintext", database=restored)
        assert after.returncode == 0, after.stderr
        assert after.stdout.count(MARKER) == 0
        scanned = _plain_dump(copy, restored)
        assert scanned.count(MARKER.encode()) == 0
        assert scanned.count(bytes(wrapped).hex().encode()) == 0
        verified = _cli("verify", database=restored)
        assert verified.returncode == 0, verified.stderr
    finally:
        copy.close()
