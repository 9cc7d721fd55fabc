"""What-if replays (``Ledger.simulate``) against live runs on real stores.

The recorded runs are live ledgers with the offline summarizer in the background and
``wait_idle`` after each append, so each summary lands before the next append: where
the simulation puts it. Then the simulation of the recorded policy reproduces the
recorded run exactly, and the simulation of another policy matches a live run under
that policy on the same messages. Nothing is ever written to the store.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import contextledger as cl
from tests.conftest import POSTGRES_URL, _postgres_admin
from tests.properties.test_corpora import load, split_system

RECORDED = cl.ReductionPolicy(trigger_messages=8, keep_messages=3, keep_tool_results=2)
#: The token trigger over the whole prompt (the default scope), and over the messages alone.
CANDIDATE = cl.ReductionPolicy(
    trigger_tokens=2000, keep_tokens=400, max_summary_tokens=150, max_context_tokens=3000, keep_tool_results=1
)
MESSAGES_SCOPE = cl.ReductionPolicy(
    trigger_tokens=700, keep_tokens=200, max_summary_tokens=150, max_context_tokens=2600, keep_tool_results=1,
    token_scope="messages",
)
#: A late trigger under a tight cap: the cap drops turns from the view before summaries land.
CAPPED = cl.ReductionPolicy(trigger_messages=24, keep_messages=4, max_summary_tokens=100, max_context_tokens=2400)


def workload() -> list[dict[str, Any]]:
    """A few corpus conversations: tool calls (one with tool definitions) and plain."""
    return (
        load("tools/taubench_airline_gpt4o.jsonl")[:2]
        + load("tools/sgd_tools.jsonl")[:1]
        + load("plain/sgd_plain.jsonl")[:2]
    )


def record(ledger: cl.Ledger, records: list[dict[str, Any]], policy: cl.ReductionPolicy) -> list[Any]:
    ids = []
    for number, item in enumerate(records):
        system, messages = split_system(item["messages"])
        cid = ledger.start(
            system, model="gpt-4o", policy=policy, key=f"chat-{number}", tools=item.get("tools")
        )
        for message in messages:
            ledger.append(cid, message)
            assert ledger.wait_idle()
        ids.append(cid)
    return ids


def rows(path: Path) -> list[str]:
    """Every row of every table of a SQLite file, as SQL text."""
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def pg_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the URL's PostgreSQL schema, table by table."""
    import psycopg

    base, _, query = url.partition("?schema=")
    with psycopg.connect(base) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (query,)
        )]
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{query}"."{t}"').fetchall(), key=repr) for t in tables
        }


def test_the_recorded_policy_with_the_offline_summarizer_reproduces_the_recorded_run(tmp_path: Path) -> None:
    path = tmp_path / "recorded.db"
    records = workload()
    with cl.Ledger.open(f"sqlite:///{path}") as ledger:
        ids = record(ledger, records, RECORDED)
        totals = [ledger.totals(cid) for cid in ids]
    # Opened again without the background policy (which moves its tracking row on its own).
    with cl.Ledger.open(f"sqlite:///{path}", run_policy=False) as ledger:
        before = rows(path)
        report = ledger.simulate(RECORDED)
        assert rows(path) == before  # nothing written: no event, snapshot, tracking row
    assert report.complete and report.stopped is None
    assert [c.conversation_id for c in report.conversations] == ids
    for found, total in zip(report.conversations, totals, strict=True):
        assert found.reason is None and found.simulated is not None
        assert found.simulated_turn_tokens == found.recorded_turn_tokens
        assert found.recorded.turns == found.turns_in_log > 0
        assert found.simulated.summarizer_calls == found.recorded.summarizer_calls == total.summarizer_calls
        assert found.simulated.summarizer_input_tokens == total.summarizer_input_tokens
        assert found.simulated.prefix_stable_turns == found.recorded.prefix_stable_turns
        assert found.simulated.cap_hits == found.recorded.cap_hits
        assert found.difference == 0
    assert report.recorded.summarizer_calls > len(ids)  # the policy fired in every kind of conversation
    assert report.simulated == report.recorded


@pytest.mark.parametrize(
    "candidate", [CANDIDATE, MESSAGES_SCOPE, CAPPED], ids=["tokens", "message-tokens", "capped"]
)
def test_a_changed_policy_matches_a_live_run_under_it(
    tmp_path: Path, postgres_url: str, candidate: cl.ReductionPolicy
) -> None:
    records = workload()
    with cl.Ledger.open(f"sqlite:///{tmp_path / 'a.db'}") as recorded:
        record(recorded, records, RECORDED)
        report = recorded.simulate(candidate.model_dump(exclude_defaults=True))
    with cl.Ledger.open(postgres_url) as live:
        record(live, records, candidate)
    with cl.Ledger.open(postgres_url, run_policy=False) as live:
        before = pg_rows(postgres_url)
        under_candidate = live.simulate(candidate)  # its recorded side: the live run
        assert pg_rows(postgres_url) == before and "contextledger_events" in before
    assert report.complete
    for simulated, lived in zip(report.conversations, under_candidate.conversations, strict=True):
        assert simulated.key == lived.key
        assert simulated.simulated is not None
        assert simulated.simulated_turn_tokens == lived.recorded_turn_tokens
        assert simulated.simulated.summarizer_calls == lived.recorded.summarizer_calls
        assert simulated.simulated.summarizer_output_tokens == lived.recorded.summarizer_output_tokens
        assert simulated.simulated.cap_hits == lived.recorded.cap_hits
        assert simulated.simulated.prefix_stable_turns == lived.recorded.prefix_stable_turns
    assert report.simulated == under_candidate.recorded
    assert report.simulated.tokens_sent != report.recorded.tokens_sent
    assert report.simulated.summarizer_calls > 0
    if candidate is CAPPED:
        assert report.simulated.cap_hits > 0 == report.recorded.cap_hits
    biggest = report.largest_differences(2)
    assert len(biggest) == 2 and abs(biggest[0].difference) >= abs(biggest[1].difference) > 0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two stores of one kind: SQLite files, or PostgreSQL schemas (dropped afterwards)."""
    if request.param == "sqlite":
        yield (f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}")
        return
    admin: Any = _postgres_admin()
    schemas = [f"w_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for schema in schemas:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        base = POSTGRES_URL.split("?")[0]
        yield (f"{base}?schema={schemas[0]}", f"{base}?schema={schemas[1]}")
    finally:
        for schema in schemas:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


def test_it_reads_every_shard_and_an_encrypted_store(two_stores: tuple[str, str]) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    urls = two_stores
    settings = cl.Settings(stores=urls, database_url=urls[0], cipher_key=key)
    records = load("plain/sgd_plain.jsonl")[:4]
    with cl.Ledger.open(settings=settings) as ledger:
        ids = record(ledger, records, RECORDED)
        assert all(shard.conversation_ids() for shard in ledger.shards)  # spread over both
        report = ledger.simulate(RECORDED)
        one = ledger.simulate(RECORDED, conversations=["chat-2"])
    assert sorted(c.conversation_id for c in report.conversations) == sorted(ids)
    assert all(c.simulated_turn_tokens == c.recorded_turn_tokens for c in report.conversations)
    assert [c.key for c in one.conversations] == ["chat-2"]


def test_the_call_budget_stops_the_replay_and_says_where(tmp_path: Path) -> None:
    with cl.Ledger.open("memory://") as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:3], RECORDED)
        report = ledger.simulate(RECORDED, budget_calls=2)
    assert not report.complete and report.simulated.summarizer_calls == 2
    assert report.stopped is not None and "budget of 2 summarizer calls" in report.stopped
    partial = [c for c in report.conversations if not c.complete]
    assert partial and partial[0].simulated is not None
    assert partial[0].recorded.turns == partial[0].simulated.turns < partial[0].turns_in_log
    assert report.recorded.turns == report.simulated.turns
    first, stopped_in, never = report.conversations
    assert first.complete and stopped_in is partial[0]
    assert never.simulated is None and never.reason == "not reached: the summarizer call budget ran out"
    assert report.stopped.endswith("; 1 conversation not reached")


def test_edits_replay_and_forks_and_refused_conversations_are_reported() -> None:
    with cl.Ledger.open("memory://") as ledger:
        cid = ledger.start("You help.", policy=RECORDED)

        def say(n: int) -> None:
            for message in ({"role": "user", "content": f"question {n} about the order"},
                            {"role": "assistant", "content": f"answer {n}: it ships on day {n}."}):
                ledger.append(cid, message)
                assert ledger.wait_idle()

        for n in range(12):
            say(n)
        ledger.retract(cid, 2, reason="pasted a card number")  # summarized: its summary is redone
        assert ledger.wait_idle()
        ledger.edit(cid, 20, {"role": "user", "content": "question 10, corrected"})
        assert ledger.wait_idle()
        ledger.change_system_prompt(cid, "You help, briefly.")
        for n in range(12, 15):
            say(n)
        ledger.pop(cid)
        assert ledger.wait_idle()
        ledger.rewind(cid, 25)
        assert ledger.wait_idle()
        say(15)
        fork = ledger.fork(cid)
        long = ledger.start("You help.", policy=RECORDED)
        ledger.append(long, {"role": "user", "content": "word " * 400})
        assert any(not s.valid for s in ledger.summaries(cid))  # the edits invalidated summaries
        same = ledger.simulate(RECORDED, conversations=[cid])
        report = ledger.simulate({"trigger_messages": 4, "keep_messages": 1, "max_context_tokens": 300,
                                  "max_summary_tokens": 100})
    edited = same.conversations[0]
    assert edited.reason is None and edited.simulated is not None
    assert edited.simulated_turn_tokens == edited.recorded_turn_tokens
    assert edited.simulated.summarizer_calls == edited.recorded.summarizer_calls > 3
    reasons = {c.conversation_id: c.reason for c in report.conversations}
    assert reasons[cid] is None
    assert "fork" in str(reasons[fork])
    assert "refuses it" in str(reasons[long]) and "max_context_tokens (300)" in str(reasons[long])
    assert len(report.not_simulated) == 2


def test_bad_input_gets_typed_errors() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        ledger.start("You help.")
        with pytest.raises(cl.InvalidPolicyError, match="colour"):
            ledger.simulate({"trigger_messages": 4, "colour": "red"})
        with pytest.raises(cl.InvalidPolicyError, match="keep_messages"):
            ledger.simulate({"trigger_messages": 4, "keep_messages": 9})
        with pytest.raises(cl.ConversationNotFoundError):
            ledger.simulate(RECORDED, conversations=["no-such-chat"])
        with pytest.raises(cl.InvalidArgumentError):
            ledger.simulate(RECORDED, budget_calls=-1)
        with pytest.raises(cl.InvalidArgumentError):
            ledger.simulate(RECORDED, prices={"gpt-4o": "cheap"})
        with pytest.raises(cl.InvalidArgumentError):
            ledger.simulate(RECORDED, summarizer="psychic")


def test_the_price_table_prices_context_and_summarizer_tokens() -> None:
    with cl.Ledger.open("memory://") as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:1], RECORDED)
        report = ledger.simulate(
            RECORDED, prices={"gpt-4o": {"input": 1.0, "output": 2.0}, "offline": [0.5, 4.0]}
        )
        unpriced = ledger.simulate(RECORDED, prices={"gpt-4o": [1.0, 2.0]})
    sim = report.simulated
    assert sim.context_cost == pytest.approx(sim.tokens_sent / 1e6)
    usage = sim.summarizer_usage[0]
    assert usage.model == "offline-extractive"
    assert usage.cost == pytest.approx((usage.input_tokens * 0.5 + usage.output_tokens * 4.0) / 1e6)
    assert unpriced.simulated.unpriced_models == ("offline-extractive",)


def test_the_openai_summarizer_stops_at_the_call_budget(tmp_path: Path) -> None:
    from contextledger.testing import FakeOpenAIServer, Status

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with cl.Ledger.open(url) as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:2], RECORDED)
    with FakeOpenAIServer() as server:
        server.script(Status(500))  # the first call fails: recorded, tried again after the next append
        settings = cl.Settings(
            database_url=url, run_policy=False, openai_api_key="sk-test", openai_base_url=server.base_url
        )
        with cl.Ledger.open(settings=settings) as ledger:
            report = ledger.simulate(RECORDED, summarizer="openai", budget_calls=3)
        assert server.request_count == 3
        sent = [r.body for r in server.requests]
    assert not report.complete and report.stopped is not None and "turn" in report.stopped
    sim = report.simulated
    assert sim.summarizer_calls == 3 and sim.summaries == 2
    assert [u.model for u in sim.summarizer_usage] == ["gpt-4o-mini"]
    assert sim.summarizer_usage[0].cost is not None and sim.summarizer_input_tokens > 0
    assert all(body["model"] == "gpt-4o-mini" for body in sent)
    partial = next(c for c in report.conversations if not c.complete)
    assert partial.simulated is not None and partial.simulated.turns < partial.turns_in_log


def test_the_async_ledger_simulates_too(tmp_path: Path) -> None:
    import asyncio

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with cl.Ledger.open(url) as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:1], RECORDED)
        expected = ledger.simulate(CANDIDATE)

    async def run() -> cl.WhatIfReport:
        async with cl.AsyncLedger.open(url, run_policy=False) as ledger:
            return await ledger.simulate(CANDIDATE, conversations="chat-0")

    found = asyncio.run(run())
    assert found.simulated == expected.simulated and found.recorded == expected.recorded


class _FlakyOnce:
    """A summarizer of the user's own that crashes once, answers None once, then works."""

    def __init__(self, inner: cl.Summarizer) -> None:
        self.inner = inner
        self.model = inner.model
        self.calls = 0

    def summarize(self, request: cl.SummaryRequest) -> cl.SummaryResult:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("choices")
        if self.calls == 2:
            return None  # type: ignore[return-value]
        return self.inner.summarize(request)


def test_a_summarizer_that_crashes_or_answers_nothing_fails_an_attempt_and_is_tried_again() -> None:
    with cl.Ledger.open("memory://") as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:1], RECORDED)
        flaky = _FlakyOnce(ledger.summarizer)
        report = ledger.simulate(RECORDED, summarizer=flaky)
    assert report.complete and flaky.calls == report.simulated.summarizer_calls
    assert report.simulated.summarizer_calls == report.recorded.summarizer_calls + 2
    assert report.simulated.summaries == report.recorded.summaries
    assert report.simulated.tokens_sent > report.recorded.tokens_sent  # the first summary landed later
