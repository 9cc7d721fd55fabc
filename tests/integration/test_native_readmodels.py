"""The SQL summaries read model holds a native summary's format and payload, as
``Ledger.summaries`` gives them, on SQLite and PostgreSQL: live, after a table an
earlier release made (without the two columns) is rebuilt from the log, and sealed
with a cipher key."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path
from typing import Any

import anthropic
import openai
from sqlalchemy import text

import contextledger as cl
from contextledger.infrastructure.readmodels import SQLReadModels, attach_read_models
from contextledger.testing import FakeAnthropicServer, FakeOpenAIServer, Reply, ScriptedSummarizer
from contextledger.testing.compaction import ANTHROPIC_COMPACTION_BETA

CLAUDE = "claude-haiku-4-5"
MANAGE: Any = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 400}}]}


def _compacted_conversations(ledger: cl.Ledger) -> list[Any]:
    """One conversation compacted by Anthropic, one by OpenAI (fake servers, real SDKs)."""
    with FakeAnthropicServer() as claude_server, FakeOpenAIServer() as openai_server:
        claude_server.default = Reply("Oslo has fjords, museums and long summer days.")
        claude = anthropic.Anthropic(base_url=claude_server.base_url, api_key="sk-ant-test", max_retries=0)
        first = ledger.start("You answer about Oslo.", model=CLAUDE)
        for turn in range(20):
            ledger.append(
                first, {"role": "user", "content": f"Tell me fact {turn} about Oslo, with the details."}
            )
            reply = claude.beta.messages.create(
                model=CLAUDE,
                max_tokens=200,
                betas=[ANTHROPIC_COMPACTION_BETA],
                context_management=MANAGE,
                **ledger.context(first, format="anthropic"),
            )
            ledger.append(first, reply)
        gpt = openai.OpenAI(base_url=openai_server.base_url, api_key="sk-test", max_retries=0)
        second = ledger.start("You answer about Oslo.", model="gpt-4.1-mini")
        for turn in range(20):
            ledger.append(second, {"type": "message", "role": "user", "content": f"Tell me fact {turn}."})
            # The context as the body sends it (test_native_readable's _loop says why).
            reply = gpt.responses.create(
                model="gpt-4.1-mini",
                context_management=[{"type": "compaction", "compact_threshold": 300}],
                extra_body=ledger.context(second, format="responses"),
            )
            ledger.append(second, reply)
    return [first, second]


def _assert_views_hold_native(models: SQLReadModels, ledger: cl.Ledger, ids: list[Any]) -> None:
    for cid, native in zip(ids, ("anthropic", "responses"), strict=True):
        found = models.summaries.summaries(cid)
        assert found == ledger.summaries(cid)
        assert found and {s.native for s in found} == {native}
        assert all(s.payload and s.payload[0]["type"] == "compaction" for s in found)


def test_the_summaries_view_shows_native_and_payload(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, summarizer=ScriptedSummarizer(), run_policy=False) as ledger:
        models = attach_read_models(ledger)
        ids = _compacted_conversations(ledger)
        assert ledger.wait_idle(30)
        _assert_views_hold_native(models, ledger, ids)
        # A contextledger summary beside them: no native, no payload.
        plain = ledger.start("s", policy=cl.ReductionPolicy(trigger_messages=4, keep_messages=2))
        for n in range(5):
            ledger.append(plain, {"role": "user", "content": f"question {n}"})
        request = ledger.pending_summary(plain)
        assert request is not None
        ledger.record_summary(request, ledger.summarizer.summarize(request))
        assert ledger.wait_idle(30)
        [own] = models.summaries.summaries(plain)
        assert (own.native, own.payload) == (None, None)


def test_a_summaries_table_without_the_native_columns_is_rebuilt_with_them(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, summarizer=ScriptedSummarizer(), run_policy=False) as ledger:
        models = attach_read_models(ledger)
        ids = _compacted_conversations(ledger)
        assert ledger.wait_idle(30)
    # As the release before them left the table: no native, no payload column.
    with models.begin() as conn:
        table = "cl_summaries" if models.schema is None else f'"{models.schema}".cl_summaries'
        conn.execute(text(f"ALTER TABLE {table} DROP COLUMN payload"))
        conn.execute(text(f"ALTER TABLE {table} DROP COLUMN native"))
    models.close()
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        reopened = SQLReadModels.for_ledger(ledger)
        try:
            assert reopened.summaries.max_tracking_id(ledger.name) is None  # set back to zero
            assert reopened.runner(ledger, close_with_runner=False).catch_up(timeout=60) > 0
            _assert_views_hold_native(reopened, ledger, ids)
        finally:
            reopened.close()


def test_the_payload_column_is_sealed_with_a_cipher_key(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    settings = cl.Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=key)
    with cl.Ledger.open(settings=settings, summarizer=ScriptedSummarizer(), run_policy=False) as ledger:
        models = attach_read_models(ledger)
        ids = _compacted_conversations(ledger)
        assert ledger.wait_idle(30)
        _assert_views_hold_native(models, ledger, ids)
        opaque = next(s.payload for s in ledger.summaries(ids[1]) if s.payload)[0]["encrypted_content"]
        claude_text = ledger.summaries(ids[0])[-1].text
        models.close()
    views = tmp_path / "ledger.views.db"
    assert views.exists()
    with sqlite3.connect(views) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        stored = [row[0] for row in conn.execute("SELECT payload FROM cl_summaries")]
    assert stored and all(isinstance(value, str) for value in stored)
    data = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.views.db*"))
    assert opaque.encode() not in data and claude_text.encode() not in data


def _erased_files(folder: Path, cipher: str | None) -> tuple[list[str], bytes]:
    """A conversation compacted by OpenAI with read models attached, its readable
    summary made on demand, then its subject erased (with a cipher key): the payloads
    and the readable text, and the bytes of every file left."""
    folder.mkdir()
    settings = cl.Settings(
        database_url=f"sqlite:///{folder / 'ledger.db'}", cipher_key=cipher, native_readable="on_demand"
    )
    with cl.Ledger.open(settings=settings, summarizer=ScriptedSummarizer(), run_policy=False) as ledger:
        models = attach_read_models(ledger)
        with FakeOpenAIServer() as server:
            gpt = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
            subject = {} if cipher is None else {"subject": "subject-a"}
            cid = ledger.start("You answer about Oslo.", model="gpt-4.1-mini", **subject)
            for turn in range(20):
                ledger.append(cid, {"type": "message", "role": "user", "content": f"Tell me fact {turn}."})
                reply = gpt.responses.create(  # the context as the body sends it (see above)
                    model="gpt-4.1-mini",
                    context_management=[{"type": "compaction", "compact_threshold": 300}],
                    extra_body=ledger.context(cid, format="responses"),
                )
                ledger.append(cid, reply)
        ledger.context(cid)  # makes and records the newest readable summary
        assert ledger.wait_idle(30)
        found = models.summaries.summaries(cid)
        assert found == ledger.summaries(cid) and found[-1].text.startswith("Summary of")
        secrets = [s.payload[0]["encrypted_content"] for s in found if s.payload]
        secrets.append(found[-1].text)
        if cipher is not None:
            ledger.erase("subject-a", "the subject asked")
            assert ledger.wait_idle(30)
            assert models.summaries.summaries(cid) == []
        models.close()
    for db in folder.glob("*.db"):
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return secrets, b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())


def test_erasing_the_subject_leaves_no_native_payload_or_readable_text_in_any_file(tmp_path: Path) -> None:
    """With read models attached and the readable summaries made on demand: after the
    subject is erased no file holds a compaction's payload or the readable text (the
    same scan finds both in a store without a cipher key)."""
    secrets, data = _erased_files(tmp_path / "clear", None)
    assert all(secret.encode() in data for secret in secrets)
    secrets, data = _erased_files(tmp_path / "sealed", base64.b64encode(os.urandom(32)).decode())
    assert not any(secret.encode() in data for secret in secrets)
