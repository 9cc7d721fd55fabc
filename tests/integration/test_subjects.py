"""Naming a conversation's data subject, on a real SQLite file and on PostgreSQL: the
stored records of one subject's conversations (starts, forks, framework sessions)
name one data key in their clear header, another subject's another (a fork given
another subject keeps the history it inherits, its first record, under its source's
key); bad subjects and stores that cannot shred are refused with typed errors,
writing nothing."""

from __future__ import annotations

import asyncio
import base64
import os
import sqlite3
import uuid
from typing import Any
from uuid import UUID

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.privacy.subjects import MAX_SUBJECT_CHARS, check_subject
from contextledger.infrastructure.keys.subject_mapper import MARK, key_ids_of, subject_keys_of

POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def open_ledger(url: str, cipher_key: str | None = None, **options: Any) -> cl.Ledger:
    return cl.Ledger.open(
        url,
        settings=cl.Settings(
            database_url=url,
            run_policy=False,
            cipher_key=cipher_key if cipher_key is not None else new_key(),
            snapshot_interval=2,
            **options,
        ),
    )


def record_keys(url: str) -> dict[UUID, dict[tuple[str, int], frozenset[bytes]]]:
    """Each conversation's stored events and snapshots, by (kind, version): the key ids
    each one's header names (one, or several for content of several subjects)."""
    tables = ("events", "snapshots")
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute(
                "SELECT 'events', originator_id, originator_version, state FROM stored_events "
                "UNION ALL "
                "SELECT 'snapshots', originator_id, originator_version, state FROM stored_snapshots"
            ).fetchall()
        found = [(r[0], UUID(r[1]), int(r[2]), bytes(r[3])) for r in rows]
    else:
        base, schema = url.split("?schema=")
        with psycopg.connect(base) as conn:
            rows = conn.execute(
                " UNION ALL ".join(
                    f"SELECT '{kind}', originator_id, originator_version, state "
                    f'FROM "{schema}".contextledger_{kind}'
                    for kind in tables
                )
            ).fetchall()
        found = [(r[0], r[1], int(r[2]), bytes(r[3])) for r in rows]
    out: dict[UUID, dict[tuple[str, int], frozenset[bytes]]] = {}
    for kind, oid, version, state in found:
        assert kind in tables
        named = key_ids_of(state)
        assert named, "every record is under a data key"
        assert (state[: len(MARK)] == MARK) == (len(named) == 1), "one key: format 1; several: format 2"
        out.setdefault(oid, {})[(kind, version)] = frozenset(named)
    return out


def key_ids(url: str) -> dict[UUID, set[frozenset[bytes]]]:
    """Each conversation's stored events and snapshots: the key ids their headers name."""
    return {oid: set(records.values()) for oid, records in record_keys(url).items()}


def fork_keys(
    records: dict[tuple[str, int], frozenset[bytes]],
) -> tuple[frozenset[bytes], set[frozenset[bytes]]]:
    """A fork's first record's key ids (its inherited history) and the key ids of its
    later events."""
    first = records[("events", 1)]
    later = {ids for place, ids in records.items() if place[0] == "events" and place[1] > 1}
    assert later, "the fork has records after its first: the check can fail"
    return first, later


def chat(ledger: cl.Ledger, cid: UUID, n: int = 5) -> None:
    for i in range(n):
        ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} of {cid}"})


def test_one_subjects_conversations_share_a_key_and_another_subjects_do_not(shared_url: str) -> None:
    with open_ledger(shared_url) as ledger:
        a1 = ledger.start("Be brief.", policy=POLICY, subject="user-42")
        a2 = ledger.start(policy=POLICY, subject="user-42", key="chat-a2")
        b = ledger.start(policy=POLICY, subject="user-7")
        own = ledger.start(policy=POLICY)
        for cid in (a1, a2, b, own):
            chat(ledger, cid)  # snapshots too (interval 2)
        keys = subject_keys_of(ledger)
        assert keys is not None
        assert keys.subject_of(a1) == keys.subject_of(a2) == "user-42"
        assert keys.subject_of(own) == str(own)
    ids = key_ids(shared_url)
    assert len(ids[a1]) == len(ids[a2]) == len(ids[b]) == len(ids[own]) == 1
    assert ids[a1] == ids[a2]
    assert ids[b] != ids[a1] and ids[own] != ids[a1] and ids[own] != ids[b]


def test_reopened_with_the_same_master_key_the_subjects_conversations_read_back(sqlite_url: str) -> None:
    master = new_key()
    with open_ledger(sqlite_url, master) as ledger:
        cid = ledger.start("Be brief.", policy=POLICY, subject="user-42")
        chat(ledger, cid)
    with open_ledger(sqlite_url, master) as again:
        assert [m["content"] for m in again.context(cid)][-1] == f"turn 4 of {cid}"
        forked = again.fork(cid)
        assert again.context(forked) == again.context(cid)


def test_a_fork_belongs_to_its_sources_subject_unless_given_another(shared_url: str) -> None:
    with open_ledger(shared_url) as ledger:
        source = ledger.start(policy=POLICY, subject="user-42")
        chat(ledger, source)
        inherits = ledger.fork(source)
        elsewhere = ledger.fork(source, subject="user-7", key="fork-7")
        own_source = ledger.start(policy=POLICY)
        chat(ledger, own_source, 2)
        of_own = ledger.fork(own_source)
        for cid in (inherits, elsewhere, of_own):
            chat(ledger, cid, 3)
        other = ledger.start(policy=POLICY, subject="user-7")
        chat(ledger, other, 1)
        keys = subject_keys_of(ledger)
        assert keys is not None
        assert keys.subject_of(inherits) == "user-42"
        assert keys.subject_of(elsewhere) == "user-7"
        assert keys.subject_of(of_own) == str(own_source)
    ids = key_ids(shared_url)
    # A fork of the same subject is under the subject's one key throughout.
    assert ids[inherits] == ids[source] and len(ids[source]) == 1
    assert ids[of_own] == ids[own_source] and len(ids[own_source]) == 1
    # A fork given another subject: its first record holds the history it inherits,
    # under both subjects' keys (erasing either erases it); its later events are its
    # own subject's, its snapshots (the whole state, inherited part included) both's.
    (source_key,), (other_key,) = ids[source], ids[other]
    assert source_key != other_key
    records = record_keys(shared_url)[elsewhere]
    first, later = fork_keys(records)
    assert first == source_key | other_key
    assert later == {other_key}
    snapshots = {ids for (kind, _), ids in records.items() if kind == "snapshots"}
    assert snapshots == {source_key | other_key}


def test_get_or_start_names_the_subject_once_and_refuses_another(sqlite_url: str) -> None:
    with open_ledger(sqlite_url) as ledger:
        cid = ledger.get_or_start("chat-9", policy=POLICY, subject="user-42")
        assert ledger.get_or_start("chat-9", policy=POLICY, subject="user-42") == cid
        assert ledger.get_or_start("chat-9") == cid  # no subject given: the conversation's stays
        with pytest.raises(cl.InvalidArgumentError, match="user-42"):
            ledger.get_or_start("chat-9", subject="user-7")
        # A conversation started without a subject is its own: it cannot take one later.
        plain = ledger.start(policy=POLICY, key="plain")
        with pytest.raises(cl.InvalidArgumentError, match=str(plain)):
            ledger.get_or_start("plain", subject="user-7")
        keys = subject_keys_of(ledger)
        assert keys is not None and keys.subject_of(cid) == "user-42"


def test_the_async_ledger_passes_the_subject(sqlite_url: str) -> None:
    async def run() -> tuple[UUID, UUID]:
        async with cl.AsyncLedger(open_ledger(sqlite_url)) as ledger:
            cid = await ledger.start(policy=POLICY, subject="user-42")
            await ledger.append(cid, {"role": "user", "content": "hello"})
            forked = await ledger.fork(cid, subject="user-7")
            await ledger.append(forked, {"role": "user", "content": "hello again"})
            assert await ledger.subject_of(forked) == "user-7"
            return cid, forked

    cid, forked = asyncio.run(run())
    ids = key_ids(sqlite_url)
    first, later = fork_keys(record_keys(sqlite_url)[forked])
    (source_key,) = ids[cid]
    (own_key,) = later
    # the inherited history goes with user-42 and with user-7; the rest with user-7
    assert source_key != own_key and first == source_key | own_key


def test_framework_sessions_start_their_conversation_under_the_subject(shared_url: str) -> None:
    from contextledger.integrations.agents import LedgerSession
    from contextledger.integrations.langchain import LedgerChatMessageHistory
    from contextledger.integrations.pydantic_ai import LedgerHistory

    with open_ledger(shared_url) as ledger:
        direct = ledger.start(policy=POLICY, subject="user-42")
        chat(ledger, direct, 1)
        sessions = [
            LedgerSession(f"s-{uuid.uuid4()}", ledger, policy=POLICY, subject="user-42"),
            LedgerChatMessageHistory(f"lc-{uuid.uuid4()}", ledger, policy=POLICY, subject="user-42"),
            LedgerHistory(f"pa-{uuid.uuid4()}", ledger, policy=POLICY, subject="user-42"),
            LedgerHistory(str(uuid.uuid4()), ledger, policy=POLICY, subject="user-42"),  # a UUID session id
        ]
        started = [s.conversation_id for s in sessions]
        for cid in started:
            chat(ledger, cid, 1)
        bare = LedgerHistory(f"pa-{uuid.uuid4()}", ledger, policy=POLICY)
        chat(ledger, bare.conversation_id, 1)
    ids = key_ids(shared_url)
    assert all(ids[cid] == ids[direct] for cid in started)
    assert ids[bare.conversation_id] != ids[direct]


@pytest.mark.parametrize("bad", ["", "   ", "x" * (MAX_SUBJECT_CHARS + 1), "a\x00b", 42, b"user"])
def test_a_bad_subject_is_refused_before_anything_is_written(sqlite_url: str, bad: Any) -> None:
    with open_ledger(sqlite_url) as ledger:
        with pytest.raises(cl.InvalidArgumentError) as caught:
            ledger.start(policy=POLICY, subject=bad)
        assert caught.value.argument == "subject"
        source = ledger.start(policy=POLICY)
        with pytest.raises(cl.InvalidArgumentError):
            ledger.fork(source, subject=bad)
        with pytest.raises(cl.InvalidArgumentError):
            ledger.get_or_start("chat-bad", subject=bad)
        assert ledger.conversation_ids() == [source]
    from contextledger.integrations.pydantic_ai import LedgerHistory

    with pytest.raises(cl.InvalidArgumentError):
        LedgerHistory("chat-x", url=sqlite_url, subject=bad)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(st.text(st.characters(exclude_categories=()), min_size=1, max_size=MAX_SUBJECT_CHARS + 20))
@settings(max_examples=200, deadline=None)
def test_a_subject_is_accepted_exactly_when_it_is_non_blank_short_valid_unicode_and_without_nul(
    text: str,
) -> None:
    valid = bool(text.strip()) and len(text) <= MAX_SUBJECT_CHARS and "\x00" not in text and _encodable(text)
    try:
        assert check_subject(text) == text
        accepted = True
    except cl.InvalidArgumentError:
        accepted = False
    assert accepted is valid


def test_a_subject_needs_per_subject_keys_but_no_cipher_key(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with cl.Ledger.open(url, settings=cl.Settings(database_url=url, run_policy=False)) as plain:
        cid = plain.start(policy=POLICY, subject="user-42")
        source = plain.start(policy=POLICY)
        fork = plain.fork(source, subject="user-42")
        assert plain.subject_of(cid) == plain.subject_of(fork) == "user-42"
        assert len(plain.conversation_ids()) == 3
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_ledger(url, key_scope="store") as store_scope:
        with pytest.raises(cl.ConfigurationError, match="key_scope"):
            store_scope.start(policy=POLICY, subject="user-42")
        assert store_scope.conversation_ids() == []


def test_subjects_with_several_stores_are_kept_in_the_store_of_each_conversation(tmp_path: Any) -> None:
    urls = [f"sqlite:///{tmp_path / f's{i}.db'}" for i in range(2)]
    settings_ = cl.Settings(stores=tuple(urls), run_policy=False, cipher_key=new_key(), snapshot_interval=2)
    with cl.Ledger.open(urls, settings=settings_) as ledger:
        started = [ledger.start(policy=POLICY, subject="user-42") for _ in range(8)]
        for cid in started:
            chat(ledger, cid, 1)
        stored: dict[UUID, set[bytes]] = {}
        for url, shard in zip(urls, ledger.shards, strict=True):
            keys = subject_keys_of(shard)
            assert keys is not None
            ids = key_ids(url)
            for cid in ids.keys() & set(started):
                assert keys.subject_of(cid) == "user-42"
            stored.update({cid: v for cid, v in ids.items() if cid in started})
        assert set(stored) == set(started)
        assert all(ledger.context(cid)[-1]["content"] == f"turn 0 of {cid}" for cid in started)
