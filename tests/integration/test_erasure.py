"""Erasure by crypto-shredding (``Ledger.erase``), on a real SQLite file and on PostgreSQL.

The done-when scan: subject A's marker is planted in its system prompt, messages, tool
arguments and results, an edit, a retraction's reason, two forks (one of A's own
subject, one given another subject) and summaries (the offline summarizer copies text);
subject B's marker in B's. After erasing A, nothing the store holds gives A's marker
back, neither its raw bytes (SQLite files checkpointed, every PostgreSQL column) nor
anything the holder of the cipher key can still decrypt (every stored event and
snapshot through the ledger's mapper, every read-model row through its codec): the
second scan finds both markers before the erasure, so it can fail. B's contexts,
replays and ``verify`` are unchanged, and the followers carry on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from sqlalchemy import select

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.application.following.notifications import read_notifications
from contextledger.infrastructure.readmodels import SQLReadModels

MARK_A = "qx-subject-a-marker-e1d7"
MARK_B = "qx-subject-b-marker-5c20"
MARK_F = "qx-fork-own-marker-93ab"
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def fill(ledger: Ledger, marker: str, conversation_key: str) -> UUID:
    """A conversation with ``marker`` in every place content goes."""
    cid = ledger.start(f"You are the {marker} assistant.", policy=POLICY, key=conversation_key)
    for i in range(4):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": marker})},
        }
        ledger.append(cid, {"role": "user", "content": f"question {i} about {marker}"})
        ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": [call]})
        ledger.append(cid, {"role": "tool", "tool_call_id": f"call_{i}", "content": f"found {marker}"})
        ledger.append(cid, {"role": "assistant", "content": f"answer {i}: {marker}"})
    ledger.edit(cid, 12, {"role": "user", "content": f"edited question about {marker}"})
    ledger.retract(cid, 15, reason=f"withdrawn: {marker}")
    return cid


def readable(ledger: Ledger, models: SQLReadModels) -> str:
    """Everything the holder of the cipher key can still read: every stored event and
    snapshot decoded by the ledger's mapper, every read-model row opened by its codec."""
    parts: list[str] = []
    decode = ledger.mapper.to_domain_event
    ids: set[Any] = set()
    for page in read_notifications(ledger.notification_log):
        for notification in page:
            parts.append(repr(decode(notification)))
            ids.add(notification.originator_id)
    assert ledger.snapshots is not None
    for oid in ids:
        for stored in ledger.snapshots.recorder.select_events(oid):
            parts.append(repr(decode(stored)))
    with models.read() as conn:
        for table in models.tables.values():
            parts.extend(repr(row) for row in conn.execute(select(table)))
    return "\n".join(parts)


def audit(ledger: Ledger, cid: UUID) -> tuple[Any, ...]:
    return (
        ledger.context(cid),
        [e.record() for e in ledger.replay(cid)],
        ledger.transcript(cid),
        ledger.summaries(cid),
        ledger.totals(cid),
        ledger.verify(cid),
    )


def plant_and_erase(settings: Settings) -> tuple[UUID, UUID]:
    """Plant both subjects' markers, erase A; returns (a, b)."""
    with Ledger.open(settings=settings) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger, close_with_runner=False))
        a = fill(ledger, MARK_A, "subject-a")
        b = fill(ledger, MARK_B, "subject-b")
        # Another subject's fork: its first record (the inherited history) is under A's
        # key and F's; the summaries it makes of inherited messages too.
        own_fork = ledger.fork(a, subject="subject-f")
        for i in range(7):
            ledger.append(own_fork, {"role": "user", "content": f"the fork's own {i} {MARK_F}"})
        same_fork = ledger.fork(a, key="subject-a-fork")  # A's subject, as its source
        ledger.append(same_fork, {"role": "user", "content": f"more about {MARK_A}"})
        assert ledger.wait_idle(60)
        # A fork of that fork (F's subject): it inherits A's content as well.
        grand_fork = ledger.fork(own_fork, key="grand-fork")
        ledger.append(grand_fork, {"role": "user", "content": f"the grand fork's own {MARK_F}"})
        assert ledger.subject_of(grand_fork) == "subject-f"
        assert MARK_A in str(ledger.context(grand_fork))
        assert ledger.wait_idle(60)
        assert any(MARK_A in s.text for s in ledger.summaries(a))
        assert any(MARK_A in s.text for s in models.summaries.summaries(a))
        inherited = {s.text for s in ledger.summaries(a)}
        made_in_fork = [s.text for s in ledger.summaries(own_fork) if s.text not in inherited]
        assert any(MARK_A in text and MARK_F in text for text in made_in_fork), made_in_fork
        text = readable(ledger, models)
        assert MARK_A in text and MARK_B in text and MARK_F in text  # the scan can fail
        before = audit(ledger, b)

        assert ledger.subject_of(same_fork) == ledger.subject_of(a) == str(a)
        assert ledger.subject_of(own_fork) == "subject-f"
        # A is its own subject: erasing it erases its subject, the fork of that subject too.
        report = ledger.erase(conversation=a, reason="erasure request 17")
        assert isinstance(report, cl.ErasureReport)
        assert report.subject == str(a) and set(report.conversations) == {a, same_fork}
        assert report.reason == "erasure request 17" and not report.already_erased
        assert ledger.wait_idle(60)

        for cid in (a, same_fork):
            for read in (
                ledger.context,
                ledger.transcript,
                ledger.working_memory,
                ledger.totals,
                ledger.summaries,
                lambda c: list(ledger.replay(c)),
            ):
                with pytest.raises(cl.ConversationErasedError) as caught:
                    read(cid)
                assert caught.value.erased_at == report.erased_at
                assert caught.value.reason == "erasure request 17"
        # The forks of another subject keep what is their own (test_fork_remainder.py).
        for cid in (own_fork, grand_fork):
            context = ledger.context(cid)
            assert context and MARK_A not in str(context) and MARK_F in str(context)
            assert MARK_A not in str(ledger.transcript(cid))
        assert audit(ledger, b) == before
        verified = ledger.verify()
        assert verified.ok and set(verified.erased) == {a, same_fork}
        assert set(verified.partly_erased) == {own_fork, grand_fork}
        assert ledger.totals().conversations == 3
        assert models.transcript.transcript(a) == [] and models.summaries.summaries(a) == []
        assert models.transcript.transcript(own_fork) == []
        assert models.transcript.transcript(grand_fork) == []
        assert models.transcript.transcript(b) and models.summaries.summaries(b)

        text = readable(ledger, models)
        assert MARK_A not in text, "A's content is still readable with the key"
        assert MARK_B in text

        again = ledger.erase(conversation=a, reason="asked twice")
        assert again.already_erased and again.erased_at == report.erased_at
        assert again.reason == "erasure request 17"
        # Followers carry on for B: a new threshold of B is summarized.
        summaries = len(ledger.summaries(b))
        for i in range(6):
            ledger.append(b, {"role": "user", "content": f"later {i} {MARK_B}"})
        assert ledger.wait_idle(60)
        assert len(ledger.summaries(b)) > summaries
        models.close()
    return a, b


def checkpoint_and_scan(folder: Path) -> dict[str, tuple[bool, bool]]:
    for db in folder.glob("*.db"):
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {
        p.name: (MARK_A.encode() in p.read_bytes(), MARK_F.encode() in p.read_bytes())
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def test_erasure_on_a_sqlite_file(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        poll_interval=0.02,
        snapshot_interval=4,
        cipher_key=key(),
    )
    plant_and_erase(settings)
    found = checkpoint_and_scan(tmp_path)
    assert {"ledger.db", "ledger.views.db"} <= set(found)
    assert not any(hit for hit, _ in found.values()), found


@pytest.mark.postgres
def test_erasure_on_postgres(postgres_url: str) -> None:
    plant_and_erase(
        Settings(database_url=postgres_url, snapshot_interval=4, poll_interval=0.02, cipher_key=key())
    )
    base, schema = postgres_url.split("?schema=")
    with psycopg.connect(base) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
            )
        ]
        assert len(tables) >= 7
        for table in tables:
            rows = conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall()
            raw = b"".join(v if isinstance(v, bytes) else str(v).encode() for row in rows for v in row)
            assert MARK_A.encode() not in raw, table


def test_a_rebuild_runs_through_an_erasure_committed_mid_batch(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        snapshot_interval=4,
        cipher_key=key(),
        run_policy=False,
    )
    with Ledger.open(settings=settings) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        a = fill(ledger, MARK_A, "subject-a")
        b = fill(ledger, MARK_B, "subject-b")
        runner = models.runner(ledger, close_with_runner=False, batch_size=5, read_size=5, batch_events=3)
        erased: list[cl.ErasureReport] = []

        def progress(done: int, head: int) -> None:
            if not erased:
                erased.append(ledger.erase(conversation=a, reason="mid-batch"))

        applied = runner.rebuild_many(
            ["transcript", "summaries", "token_totals", "conversations"], progress=progress
        )
        assert erased and all(n > 0 for n in applied.values())
        runner.catch_up()
        assert models.transcript.transcript(a) == []
        assert a not in {r.conversation_id for r in models.conversations.conversations()}
        assert b in {r.conversation_id for r in models.conversations.conversations()}
        assert models.token_totals.totals(a) is None
        assert [e.message for e in models.transcript.transcript(b)] == [
            e.message for e in ledger.transcript(b)
        ]
        assert models.token_totals.totals(b) is not None
        models.close()


def test_erase_refuses_bad_input_and_needs_per_subject_keys(tmp_path: Path) -> None:
    plain = Settings(database_url=f"sqlite:///{tmp_path / 'plain.db'}", run_policy=False, key_scope="store")
    with Ledger.open(settings=plain) as ledger:
        cid = ledger.start("x")
        with pytest.raises(cl.ConfigurationError, match="key_scope"):
            ledger.erase(conversation=cid, reason="no per-subject keys")
        assert ledger.subject_of(cid) == str(cid)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'enc.db'}", cipher_key=key(), run_policy=False)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("x")
        with pytest.raises(cl.InvalidArgumentError):
            ledger.erase(reason="neither")
        with pytest.raises(cl.InvalidArgumentError):
            ledger.erase(subject=str(cid), conversation=cid, reason="both")
        with pytest.raises(cl.InvalidArgumentError, match="reason"):
            ledger.erase(conversation=cid, reason="")
        with pytest.raises(cl.ConversationNotFoundError):
            ledger.erase(conversation=uuid4(), reason="no such conversation")
        with pytest.raises(cl.ConversationNotFoundError):
            ledger.subject_of(uuid4())
        ledger.append(cid, {"role": "user", "content": "still here"})  # nothing was erased
        assert len(ledger.transcript(cid)) == 1
        report = ledger.erase(conversation=cid, reason="ok")
        assert report.conversations == (cid,)
        other = ledger.start("y")
        ledger.append(other, {"role": "user", "content": "kept"})
        whatif = ledger.simulate({"trigger_messages": 4, "keep_messages": 1})  # past the erased one
        assert [c.conversation_id for c in whatif.conversations] == [other]
        with pytest.raises(cl.ConversationErasedError):
            ledger.simulate({"trigger_messages": 4, "keep_messages": 1}, cid)
        exported = [event for _, event in ledger.audit.export()]  # goes past the erased records
        assert [e.kind for e in exported if e.conversation_id == cid] == ["Erased", "Erased"]
        erasures = [e for e in exported if e.kind == "ContentErased"]
        assert [e.data["conversations"] for e in erasures] == [[str(cid)]]
        with pytest.raises(cl.ConversationErasedError):
            ledger.append(cid, {"role": "user", "content": "after"})


def test_one_conversation_of_a_shared_subject_is_not_erased_alone(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=key(), run_policy=False
    )
    with Ledger.open(settings=settings) as ledger:
        one = ledger.start("x", key="one", subject="tenant-7")
        two = ledger.start("y", key="two", subject="tenant-7")
        solo = ledger.start("z", key="solo", subject="tenant-8")
        with pytest.raises(cl.InvalidArgumentError, match="tenant-7"):
            ledger.erase(conversation=one, reason="one of two")
        assert ledger.context(one) and ledger.context(two)  # nothing was erased
        report = ledger.erase(conversation=solo, reason="the only one")
        assert report.subject == "tenant-8" and report.conversations == (solo,)
        report = ledger.erase(subject="tenant-7", reason="all of them")
        assert set(report.conversations) == {one, two}
        for cid in (one, two, solo):
            with pytest.raises(cl.ConversationErasedError):
                ledger.context(cid)
        assert ledger.verify().ok and len(ledger.verify().erased) == 3


def test_a_read_only_ledger_refuses_erase(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=key(), run_policy=False
    )
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("x")
    with Ledger.open(settings=settings, read_only=True) as reader:
        with pytest.raises(cl.ReadOnlyError):
            reader.erase(conversation=cid, reason="read only")
        assert reader.subject_of(cid) == str(cid)


def test_a_missing_key_is_not_an_erasure(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    settings = Settings(database_url=f"sqlite:///{db}", cipher_key=key(), run_policy=False)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("x")
        ledger.append(cid, {"role": "user", "content": "hello"})
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM stored_subject_keys")
    with Ledger.open(settings=settings) as ledger:
        with pytest.raises(cl.KeyMissingError):
            ledger.context(cid)
        assert not ledger.verify().ok and ledger.verify().erased == ()


def test_async_erase(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=key(), run_policy=False
    )

    async def scenario() -> cl.ErasureReport:
        async with cl.AsyncLedger(Ledger(settings)) as ledger:
            cid = await ledger.start("x")
            assert await ledger.subject_of(cid) == str(cid)
            report = await ledger.erase(conversation=cid, reason="async")
            assert report.conversations == (cid,)
            with pytest.raises(cl.ConversationErasedError):
                await ledger.context(cid)
            return report

    assert asyncio.run(scenario()).reason == "async"


def test_the_viewer_and_the_command_line_show_an_erased_conversation_as_erased(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from contextledger.infrastructure.cli import main
    from contextledger.infrastructure.web import create_app

    secret = key()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=secret, run_policy=False
    )
    with Ledger.open(settings=settings) as ledger:
        gone = ledger.start("You help.")
        kept = ledger.start("You help.")
        ledger.append(kept, {"role": "user", "content": "hello"})
        client = TestClient(create_app(ledger))
        assert len(client.get("/conversations.json").json()["conversations"]) == 2  # listed once
        ledger.erase(conversation=gone, reason="asked by the subject")
        listed = {c["id"]: c for c in client.get("/conversations.json").json()["conversations"]}
        assert listed[str(gone)]["erased_at"] and listed[str(gone)]["erase_reason"] == "asked by the subject"
        assert listed[str(kept)]["erased_at"] is None and listed[str(kept)]["messages"] == 1
        page = client.get(f"/conversations/{gone}.json")
        assert page.status_code == 410 and "asked by the subject" in page.json()["error"]
        verified = client.get("/verify.json").json()
        assert verified["verified"] and verified["erased"] == [str(gone)]
        fresh = TestClient(create_app(ledger))  # listed from scratch after the erasure
        rows = {c["id"]: c for c in fresh.get("/conversations.json").json()["conversations"]}
        assert rows[str(gone)]["erased_at"]
        assert "erased" in fresh.get("/conversations").text
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", secret)
    assert main(["verify", "--database", settings.database_url]) == 0
    out = capsys.readouterr().out
    assert f"ERASED conversation {gone}" in out and "1 erased" in out
    assert main(["verify", "--database", settings.database_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["erased"] == [str(gone)]


def test_erase_takes_its_target_positionally_as_the_design_names_it(tmp_path: Path) -> None:
    # erase(subject_or_conversation, reason): a string a store knows as a subject is the
    # subject; otherwise a conversation's id or key.
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=key(), run_policy=False
    )
    with Ledger.open(settings=settings) as ledger:
        shared = [ledger.start("x", subject="user-42"), ledger.start("y", subject="user-42")]
        keyed = ledger.start("z", key="support-7")
        by_id = ledger.start("w")
        kept = ledger.start("v")
        with pytest.raises(cl.InvalidArgumentError, match="nobody"):
            ledger.erase("nobody", "no such subject or conversation")
        with pytest.raises(cl.InvalidArgumentError):
            ledger.erase("user-42", "twice", subject="user-42")
        with pytest.raises(cl.InvalidArgumentError, match="reason"):
            ledger.erase("user-42")
        report = ledger.erase("user-42", "the person asked")
        assert report.subject == "user-42" and set(report.conversations) == set(shared)
        assert ledger.erase("support-7", "by key").conversations == (keyed,)
        assert ledger.erase(by_id, "by id").conversations == (by_id,)
        assert ledger.erase(str(kept), "by id as text").conversations == (kept,)
        for cid in (*shared, keyed, by_id, kept):
            with pytest.raises(cl.ConversationErasedError):
                ledger.context(cid)
