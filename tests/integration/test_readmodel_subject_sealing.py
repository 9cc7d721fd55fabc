"""Read-model values are sealed under the keys of the data subjects whose content they
hold, so that an erasure makes them unreadable in every copy: a copy of the SQLite read
models (``*.views.db``) taken before the erasure, and PostgreSQL's row versions (dead
tuples, read through ``pageinspect``), give back nothing of the erased subject with the
master key and every key still held; the other subject's values still open. Read
models an earlier release sealed under the master key are rebuilt when opened."""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from sqlalchemy import text

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.domain import StoreError
from contextledger.infrastructure.keys.subject_mapper import key_ids_of, subject_keys_of
from contextledger.infrastructure.readmodels import SQLReadModels
from contextledger.infrastructure.readmodels.sealing import (
    SEALED_PREFIX,
    SUBJECT_SEALED_PREFIX,
    SubjectSealer,
    codec_for_key,
)

VICTIM = "qx-victim-marker-5d1e"
OTHER = "qx-other-marker-92ab"
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)
SEALED = re.compile(rb"clsealed[12]:[A-Za-z0-9+/=]+")


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def write(ledger: Ledger, marker: str, subject: str) -> UUID:
    """A conversation of ``subject`` with ``marker`` in every sealed column: messages,
    tool arguments, client ids, a retraction's reason, an edit, its key, summaries."""
    cid = ledger.start("a prompt", policy=POLICY, subject=subject, key=f"{marker}-key")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": json.dumps({"q": marker})},
    }
    for i in range(4):
        ledger.append(
            cid, {"role": "user", "content": f"question {i} {marker}"}, client_message_id=f"{marker}-c{i}"
        )
        ledger.append(
            cid, {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"call_{i}"}]}
        )
        ledger.append(cid, {"role": "tool", "tool_call_id": f"call_{i}", "content": f"found {marker}"})
        ledger.append(cid, {"role": "assistant", "content": f"answer {i} {marker}"})
    ledger.edit(cid, 12, {"role": "user", "content": f"edited {marker}"})
    ledger.retract(cid, 15, reason=f"withdrawn {marker}")
    return cid


def build(settings: Settings) -> tuple[Ledger, SQLReadModels, UUID, UUID, UUID]:
    ledger = Ledger.open(settings=settings)
    models = SQLReadModels.for_ledger(ledger)
    victim = write(ledger, VICTIM, "subject-v")
    other = write(ledger, OTHER, "subject-o")
    # A fork of the victim's conversation given the other subject: its copies of the
    # inherited rows hold the victim's content too.
    fork = ledger.fork(victim, subject="subject-o", key=f"{OTHER}-fork")
    ledger.append(fork, {"role": "user", "content": f"the fork's own {OTHER}"})
    assert ledger.wait_idle(60)
    runner = models.runner(ledger, close_with_runner=False)
    runner.catch_up(timeout=60)
    runner.stop()
    assert any(VICTIM in s.text for s in models.summaries.summaries(victim))
    assert any(VICTIM in json.dumps(e.message) for e in models.transcript.transcript(fork))
    return ledger, models, victim, other, fork


def opened(values: Iterable[bytes], ledger: Ledger, master: str) -> list[str]:
    """Every sealed value that opens with the master key or any data key still held."""
    codec = codec_for_key(master)
    keys = subject_keys_of(ledger)
    assert codec is not None and keys is not None
    sealer = SubjectSealer(keys)
    texts: list[str] = []
    for raw in values:
        value = raw.decode("ascii")
        try:
            found = sealer.open(value) if value.startswith(SUBJECT_SEALED_PREFIX) else codec.open(value)
        except StoreError:
            continue
        if found is not None:
            texts.append(found)
    return texts


def sealed_in(blob: bytes) -> list[bytes]:
    return SEALED.findall(blob)


def _payload(value: bytes) -> bytes:
    """The bytes of a sealed value (its key header first)."""
    encoded = value.split(b":", 1)[1]
    return base64.b64decode(encoded + b"=" * (-len(encoded) % 4))


def check(texts: list[str], raw: bytes) -> None:
    assert VICTIM.encode() not in raw  # never in clear
    assert not [t for t in texts if VICTIM in t], [t for t in texts if VICTIM in t][:3]
    assert any(OTHER in t for t in texts)  # the others' values still open


def test_a_copy_of_the_views_taken_before_the_erasure_gives_back_nothing_of_the_subject(
    tmp_path: Path,
) -> None:
    master = key()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=master, poll_interval=0.02
    )
    ledger, models, _, _, fork = build(settings)
    try:
        copy = tmp_path / "copy.views.db"
        with sqlite3.connect(tmp_path / "ledger.views.db") as source, sqlite3.connect(copy) as target:
            source.backup(target)
        before = opened(sealed_in(copy.read_bytes()), ledger, master)
        assert any(VICTIM in t for t in before)  # the check below can fail
        assert all(v.startswith(SUBJECT_SEALED_PREFIX.encode()) for v in sealed_in(copy.read_bytes()))

        ledger.erase(subject="subject-v", reason="erasure request 1")
        raw = copy.read_bytes()
        check(opened(sealed_in(raw), ledger, master), raw)
        with sqlite3.connect(copy) as conn:  # the rows, as SQL gives them
            values = [
                str(v).strip('"').encode()
                for table in ("cl_transcript", "cl_summaries", "cl_conversations", "cl_token_totals")
                for row in conn.execute(f"SELECT * FROM {table}")
                for v in row
                if isinstance(v, str) and "clsealed" in v
            ]
        assert values
        check(opened(values, ledger, master), raw)
        # The fork still reads as its remainder through the read models it keeps.
        assert models.transcript.transcript(fork) == [] or all(
            VICTIM not in json.dumps(e.message) for e in models.transcript.transcript(fork)
        )
    finally:
        models.close()
        ledger.close()


@pytest.mark.postgres
def test_postgres_row_versions_give_back_nothing_of_the_erased_subject(postgres_url: str) -> None:
    master = key()
    ledger, models, _, _, _ = build(
        Settings(database_url=postgres_url, cipher_key=master, poll_interval=0.02)
    )
    schema = postgres_url.split("schema=")[1]
    tables = ["cl_transcript", "cl_summaries", "cl_conversations", "cl_token_totals"]
    try:
        with psycopg.connect(postgres_url.split("?")[0], autocommit=True) as conn:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
            except psycopg.Error:
                pytest.skip("the pageinspect extension is not available")

            def tuples() -> bytes:
                """The bytes of every row version of the read-model tables, dead ones too."""
                blob = b""
                for table in tables:
                    name = f'"{schema}"."{table}"'
                    pages = conn.execute(
                        "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int", (name,)
                    ).fetchone()
                    assert pages is not None
                    for page in range(int(pages[0])):
                        for (data,) in conn.execute(
                            "SELECT t_data FROM heap_page_items(get_raw_page(%s, %s)) WHERE t_data IS NOT NULL",
                            (name, page),
                        ):
                            blob += bytes(data) + b"\n"
                return blob

            for table in tables:  # no VACUUM reclaims the dead rows while the test reads them
                conn.execute(f'ALTER TABLE "{schema}"."{table}" SET (autovacuum_enabled = false)')
            before = tuples()
            assert any(VICTIM in t for t in opened(sealed_in(before), ledger, master))  # can fail
            keys = subject_keys_of(ledger)
            assert keys is not None
            victim_key = keys.key_for("subject-v").key_id
            ledger.erase(subject="subject-v", reason="erasure request 2")
            runner = models.runner(ledger, close_with_runner=False)
            runner.catch_up(timeout=60)  # the erasure's deletion of rows: dead tuples now
            runner.stop()
            after = tuples()
            # The dead row versions are still there, values under the victim's key among them.
            dead = [v for v in sealed_in(after) if victim_key in (key_ids_of(_payload(v)) or [])]
            assert dead
            check(opened(sealed_in(after), ledger, master), after)
            rows = [
                str(v).strip('"').encode()
                for table in tables
                for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"')
                for v in row
                if isinstance(v, str) and "clsealed" in v
            ]
            check(opened(rows, ledger, master), after)
    finally:
        models.close()
        ledger.close()


def test_read_models_sealed_under_the_master_key_are_rebuilt_when_opened(tmp_path: Path) -> None:
    master = key()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=master, poll_interval=0.02
    )
    with Ledger.open(settings=settings) as ledger:
        write(ledger, VICTIM, "subject-v")
        # An earlier release's read models: every value under the master key.
        old = SQLReadModels.for_url(settings.database_url, cipher_key=master)
        runner = old.runner(ledger)
        runner.catch_up(timeout=60)
        runner.stop()
        raw = (tmp_path / "ledger.views.db").read_bytes()
        assert SEALED_PREFIX.encode() in raw and SUBJECT_SEALED_PREFIX.encode() not in raw

        models = SQLReadModels.for_ledger(ledger)  # rebuilt from the log on opening
        try:
            runner = models.runner(ledger, close_with_runner=False)
            runner.catch_up(timeout=60)
            runner.stop()
            with models.engine.connect() as conn:
                values = [
                    str(v)
                    for table in ("cl_transcript", "cl_summaries", "cl_conversations", "cl_token_totals")
                    for row in conn.execute(text(f"SELECT * FROM {table}"))
                    for v in row
                    if isinstance(v, str) and "clsealed" in v
                ]
            assert values and all(v.strip('"').startswith(SUBJECT_SEALED_PREFIX) for v in values)
            assert len(models.transcript.transcript(ledger.conversation_ids()[0])) == 17
        finally:
            models.close()
