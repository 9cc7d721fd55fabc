"""The SQL read models follow retractions, edits, system prompt and tool changes,
summary invalidations and forks: live and rebuilt (in process and with
``contextledger rebuild``) they equal the ledger's answers and each other, on SQLite
files and PostgreSQL; an earlier release's tables are rebuilt when opened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import select, text

from contextledger.application import Ledger, ReductionPolicy
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels, attach_read_models
from tests.integration.test_readmodels import CountingSummarizer, converse
from tests.support.readmodel_checks import assert_read_models_equal_ledger

POLICY = ReductionPolicy(trigger_messages=8, keep_messages=3)
TOOLS = [{"type": "function", "function": {"name": "lookup_order", "description": "Find an order.",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    with Ledger.open(url, summarizer=CountingSummarizer()) as opened:
        yield opened


def table_rows(models: SQLReadModels, name: str) -> list[tuple[Any, ...]]:
    table = models.tables[name]
    with models.read() as conn:
        found = [tuple(row) for row in conn.execute(select(table))]
    return sorted(found, key=repr)


def edit_everything(ledger: Ledger) -> dict[str, UUID]:
    """A conversation with summaries that is retracted from, edited, rewound, popped
    and forked (now and at a past version, and a fork of the fork, each edited too)."""
    cid = ledger.start("You track parcels.", policy=POLICY, key="parcels", tools=TOOLS)
    converse(ledger, cid, 5)
    assert ledger.wait_idle(30)
    assert ledger.totals(cid).summaries >= 1
    past = ledger.conversation(cid).version
    ledger.record_usage(cid, prompt_tokens=400, completion_tokens=20)
    ledger.retract(cid, 0, reason="personal data")  # summarized: invalidates its summary
    ledger.edit(cid, 4, {"role": "assistant", "content": "Order 0 was delivered."})
    ledger.change_system_prompt(cid, "You track parcels and refunds, briefly.")
    ledger.change_tools(cid, None)
    converse(ledger, cid, 2, tag="later-")
    ledger.pop(cid)
    ledger.rewind(cid, 28)
    fork_now = ledger.fork(cid, key="parcels-fork")
    fork_past = ledger.fork(cid, past)
    ledger.edit(fork_now, 5, {"role": "user", "content": "question 1, as the fork asks it"})
    ledger.retract(fork_past, 10, reason="wrong order")
    ledger.append(fork_past, {"role": "user", "content": "and order 9?"})
    grandchild = ledger.fork(fork_now)
    ledger.retract(fork_now, 15, reason="after the grandchild forked")
    ledger.clear(grandchild)
    ledger.append(grandchild, {"role": "user", "content": "start again"})
    # The source changes after its forks; they keep what stood when they were made.
    ledger.retract(cid, 20, reason="after the forks")
    ledger.edit(cid, 5, {"role": "user", "content": "question 1, edited in the source"})
    assert ledger.wait_idle(30)
    return {"source": cid, "fork_now": fork_now, "fork_past": fork_past, "grandchild": grandchild}


def test_read_models_follow_every_edit_and_fork(ledger: Ledger, url: str) -> None:
    models = attach_read_models(ledger)
    ids = edit_everything(ledger)
    assert ledger.wait_idle(30)
    assert_read_models_equal_ledger(models, ledger)

    source = ids["source"]
    rows = models.transcript.transcript(source)
    assert (0, rows[0].retracted_version, "personal data") in models.transcript.retracted(source)
    edited = [r for r in rows if r.position == 4]
    assert [r.superseded_by_version is not None for r in edited] == [True, False]
    assert edited[1].edited_from_version == edited[0].version
    assert any(not s.valid and s.invalidated_reason == "retracted" for s in models.summaries.summaries(source))
    listed = {r.conversation_id: r for r in models.conversations.conversations()}
    assert listed[ids["fork_past"]].forked_from == source
    assert listed[ids["grandchild"]].forked_from == ids["fork_now"]
    assert listed[source].system_prompt_version is not None
    assert listed[source].key == "parcels"
    # The fork made now never sees the source's later retraction at 20.
    fork_rows = models.transcript.transcript(ids["fork_now"])
    assert not [r for r in fork_rows if r.position == 20 and r.retracted]
    assert all(r.inherited_from == source for r in fork_rows if r.position < 20 and not r.edited_from_version)
    assert [r.inherited_from for r in fork_rows if r.position == 5] == [source, None]

    # The global totals count each stored message once.
    overall = models.token_totals.global_totals()
    stored = sum(1 for cid in ids.values() for e in ledger.replay(cid) if e.kind == "MessageAppended")
    assert overall.messages == stored == ledger.totals().messages
    per_conversation = sum(ledger.totals(cid).messages for cid in ids.values())
    assert per_conversation > overall.messages
    assert overall.tools_tokens == sum(ledger.totals(cid).tools_tokens for cid in ids.values())


def test_rebuilt_read_models_hold_the_same_rows_as_live_ones(ledger: Ledger) -> None:
    models = attach_read_models(ledger)
    edit_everything(ledger)
    assert ledger.wait_idle(30)
    live = {name: table_rows(models, name) for name in READ_MODEL_NAMES}
    runner = models.runner(ledger, close_with_runner=False)
    for name in READ_MODEL_NAMES:
        runner.rebuild(name)
        assert table_rows(models, name) == live[name], name
    assert_read_models_equal_ledger(models, ledger)


def test_the_rebuild_command_gives_the_rows_live_following_gave(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        models = attach_read_models(ledger)
        edit_everything(ledger)
        assert ledger.wait_idle(30)
        live = {name: table_rows(models, name) for name in READ_MODEL_NAMES}
    assert main(["rebuild", "--database", url]) == 0
    assert "rebuilt transcript" in capsys.readouterr().out
    with Ledger.open(url, run_policy=False) as ledger:
        rebuilt = SQLReadModels.for_ledger(ledger)
        try:
            for name in READ_MODEL_NAMES:
                assert table_rows(rebuilt, name) == live[name], name
            assert_read_models_equal_ledger(rebuilt, ledger)
        finally:
            rebuilt.close()


def test_tables_of_an_earlier_release_are_rebuilt_when_opened(url: str) -> None:
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        models = attach_read_models(ledger)
        ids = edit_everything(ledger)
        assert ledger.wait_idle(30)
    # Make the tables look as the previous release left them: no marks, no fork
    # columns, the transcript keyed by position only; tracking at the log's end.
    with models.begin() as conn:
        prefix = "" if models.schema is None else f'"{models.schema}".'
        for name in ("transcript", "summaries", "token_totals", "conversations"):
            conn.execute(text(f"DROP TABLE {prefix}cl_{name}"))
        conn.execute(text(
            f"CREATE TABLE {prefix}cl_transcript (conversation_id CHAR(32) NOT NULL, position INTEGER NOT NULL, "
            "version INTEGER NOT NULL, role VARCHAR(16) NOT NULL, message TEXT NOT NULL, tokens INTEGER NOT NULL, "
            "timestamp TIMESTAMP NOT NULL, digest VARCHAR(64) NOT NULL, client_message_id VARCHAR(200), "
            "PRIMARY KEY (conversation_id, position))"
        ))
        conn.execute(text(f"CREATE TABLE {prefix}cl_summaries (conversation_id CHAR(32) NOT NULL, "
                          "version INTEGER NOT NULL, PRIMARY KEY (conversation_id, version))"))
        conn.execute(text(f"CREATE TABLE {prefix}cl_token_totals (conversation_id CHAR(32) PRIMARY KEY, "
                          "base_tokens INTEGER NOT NULL, messages BIGINT NOT NULL)"))
        conn.execute(text(f"CREATE TABLE {prefix}cl_conversations (conversation_id CHAR(32) PRIMARY KEY, "
                          "model VARCHAR(200) NOT NULL)"))
    models.close()

    with Ledger.open(url, run_policy=False) as ledger:
        reopened = SQLReadModels.for_ledger(ledger)
        try:
            for view in reopened.views.values():
                assert view.max_tracking_id(ledger.name) is None  # set back to zero
            runner = reopened.runner(ledger, close_with_runner=False)
            assert runner.catch_up(timeout=60) > 0
            assert_read_models_equal_ledger(reopened, ledger, ids.values())
        finally:
            reopened.close()
