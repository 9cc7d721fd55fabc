"""Edits in the audit trail on a real SQLite file: verify covers them, the transcript
keeps every version, totals count them, replay by version is exact, forks stand apart."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult
from contextledger.testing import assert_valid_openai_context as assert_valid


class Echo:
    model = "echo"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        text = "Said: " + " ".join(str(m.content) for m in request.messages)
        return SummaryResult(text=text, model=self.model, prompt_version="e1")


def conversation(ledger: Ledger) -> Any:
    cid = ledger.start("sys", policy=ReductionPolicy(trigger_messages=4, keep_messages=1))
    for i in range(8):
        ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
        ledger.wait_idle()
    return cid


def tamper(path: str, topic: str, change: Any) -> None:
    with sqlite3.connect(path) as conn:
        rowid, state = conn.execute(
            "SELECT rowid, state FROM stored_events WHERE topic = ? ORDER BY rowid LIMIT 1", (topic,)
        ).fetchone()
        data = json.loads(state)
        change(data)
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (json.dumps(data).encode(), rowid))


#: Records in clear (no master key, key_scope "store"), so the test can edit them as JSON.
IN_CLEAR = Settings(key_scope="store")


@pytest.mark.parametrize(
    ("topic", "change", "problem"),
    [
        ("contextledger.conversation.MessageEdited",
         lambda d: d["message"].update(content="quietly rewritten"), "does not match its digest"),
        ("contextledger.conversation.MessagesRetracted",
         lambda d: d.update(positions=[2]), "does not match its digest"),
        ("contextledger.conversation.SummaryInvalidated",
         lambda d: d["reopened"][0]["message"].update(content="smuggled"), "is not the current one"),
    ],
)
def test_a_tampered_edit_event_is_detected_by_verify(
    sqlite_url: str, topic: str, change: Any, problem: str
) -> None:
    with Ledger.open(sqlite_url, summarizer=Echo(), settings=IN_CLEAR) as ledger:
        cid = conversation(ledger)
        ledger.edit(cid, 1, {"role": "assistant", "content": "M1"})
        ledger.retract(cid, 3)
        assert ledger.verify(cid).ok
    tamper(sqlite_url.removeprefix("sqlite:///"), topic, change)
    with Ledger.open(sqlite_url, summarizer=Echo(), run_policy=False, settings=IN_CLEAR) as ledger:
        report = ledger.verify(cid)
        assert not report.ok
        assert any(problem in p.problem for p in report.problems), report.problems


def test_the_transcript_keeps_originals_and_totals_count_the_edits(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url, summarizer=Echo()) as ledger:
        cid = conversation(ledger)
        before = ledger.totals(cid)
        ledger.edit(cid, 1, {"role": "assistant", "content": "M1 longer than before"})
        ledger.retract(cid, 2, reason="wrong")
        ledger.wait_idle()
        entries = ledger.transcript(cid)
        at_1 = [e for e in entries if e.position == 1]
        assert [e.message["content"] for e in at_1] == ["m1", "M1 longer than before"]
        assert at_1[0].superseded_by_version == at_1[1].version
        assert at_1[1].edited_from_version == at_1[0].version and at_1[1].current
        [at_2] = [e for e in entries if e.position == 2]
        assert at_2.retracted and at_2.message["content"] == "m2"
        totals = ledger.totals(cid)
        assert totals.messages == before.messages == 8
        assert (totals.retracted_messages, totals.edited_messages) == (1, 1)
        assert totals.summaries_invalidated >= 1
        assert totals.full_history_tokens < before.full_history_tokens + at_1[1].tokens
        context = ledger.context(cid)
        assert_valid(context)
        assert "m2" not in str(context) and "m1 " not in str(context) and "Said: m0 m1" not in str(context)


def test_every_past_version_replays_exactly_across_edits_and_forks(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url, summarizer=Echo()) as ledger:
        cid = conversation(ledger)
        seen: dict[int, list[dict[str, Any]]] = {}

        def remember() -> None:
            ledger.wait_idle()
            memory = ledger.working_memory(cid)
            seen[memory.version] = memory.messages

        remember()
        ledger.edit(cid, 0, {"role": "user", "content": "M0"})
        remember()
        fork = ledger.fork(cid, key="branch")
        ledger.rewind(cid, 3)
        remember()
        ledger.change_system_prompt(cid, "new sys")
        remember()
        ledger.append(fork, {"role": "assistant", "content": "fork only"})
        ledger.retract(fork, 0)
        ledger.wait_idle()
        for version, context in seen.items():
            assert ledger.context(cid, version=version) == context
        assert "fork only" not in str(ledger.context(cid))
        assert "M0" in str(ledger.context(cid)) and "M0" not in str(ledger.context(fork))
        assert ledger.context(cid)[0]["content"] == "new sys" and ledger.context(fork)[0]["content"] == "sys"
        assert fork in ledger.conversation_ids()
        assert ledger.verify().ok


def test_the_read_models_keep_following_the_log_through_edits_and_forks(sqlite_url: str) -> None:
    from contextledger.infrastructure.readmodels import attach_read_models
    from tests.support.readmodel_checks import assert_read_models_equal_ledger

    with Ledger.open(sqlite_url, summarizer=Echo()) as ledger:
        models = attach_read_models(ledger)
        cid = conversation(ledger)
        ledger.edit(cid, 1, {"role": "assistant", "content": "M1"})
        ledger.retract(cid, 3)
        ledger.change_system_prompt(cid, "new")
        fork = ledger.fork(cid)
        ledger.append(fork, {"role": "user", "content": "in the fork"})
        assert ledger.wait_idle(30)
        # The read models follow the edit events as the ledger's own queries do.
        assert models.transcript.transcript(cid) == ledger.transcript(cid)
        assert models.transcript.transcript(fork) == ledger.transcript(fork)
        assert models.transcript.transcript(fork)[-1].message == {"role": "user", "content": "in the fork"}
        assert_read_models_equal_ledger(models, ledger)
