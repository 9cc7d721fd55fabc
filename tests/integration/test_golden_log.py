"""Old logs replay the same way: a SQLite store written by earlier code
(``tests/fixtures/golden-v1.db``, made by ``make_golden.py``) is opened, as a copy,
with today's code and must give the transcript, summaries, the context at every
version, totals, events and verify recorded in ``golden-v1.json``.

Fields a later version adds to a result are allowed; a field that changes meaning
or value is not.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import contextledger as cl
from tests.fixtures.make_golden import jsonable
from tests.unit.test_topics import PINNED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "golden-v1.db"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "golden-v1.json").read_text(encoding="utf-8"))
CONVERSATIONS = sorted(EXPECTED["conversations"])


def like(actual: Any, expected: Any) -> Any:
    """``actual`` restricted to the keys ``expected`` has (recursively): new fields pass."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {k: like(actual[k], v) if k in actual else "<missing>" for k, v in expected.items()}
    if isinstance(expected, list) and isinstance(actual, list) and len(actual) == len(expected):
        return [like(a, e) for a, e in zip(actual, expected, strict=True)]
    return actual


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cl.Ledger]:
    copy = tmp_path_factory.mktemp("golden") / GOLDEN.name
    shutil.copyfile(GOLDEN, copy)  # never write to the checked-in log
    with cl.Ledger.open(f"sqlite:///{copy}", run_policy=False) as ledger:
        yield ledger


#: Topics that were pinned after this log was written (a newer golden log holds them).
NEWER_THAN_V1 = {
    "contextledger.conversation.ToolsChanged",
    "contextledger.conversation.MessagesRetracted",
    "contextledger.conversation.MessageEdited",
    "contextledger.conversation.SystemPromptChanged",
    "contextledger.conversation.SummaryInvalidated",
    "contextledger.conversation.NativeSummaryReadable",
    "contextledger.conversation.Forked",
    "contextledger.placement.Recorded",
    "contextledger.erasure.ContentErased",
}


def test_the_golden_log_holds_every_topic_pinned_when_it_was_written() -> None:
    with closing(sqlite3.connect(f"file:{GOLDEN}?mode=ro", uri=True)) as db:
        stored = {
            row[0]
            for row in db.execute("SELECT topic FROM stored_events UNION SELECT topic FROM stored_snapshots")
        }
    assert stored == set(PINNED) - NEWER_THAN_V1


def test_the_conversations_are_the_ones_written(ledger: cl.Ledger) -> None:
    assert sorted(str(cid) for cid in ledger.conversation_ids()) == CONVERSATIONS


@pytest.mark.parametrize("cid", CONVERSATIONS)
def test_the_transcript_is_unchanged(ledger: cl.Ledger, cid: str) -> None:
    expected = EXPECTED["conversations"][cid]["transcript"]
    assert like(jsonable(ledger.transcript(UUID(cid))), expected) == expected


@pytest.mark.parametrize("cid", CONVERSATIONS)
def test_the_summaries_are_unchanged(ledger: cl.Ledger, cid: str) -> None:
    expected = EXPECTED["conversations"][cid]["summaries"]
    assert like(jsonable(ledger.summaries(UUID(cid))), expected) == expected


@pytest.mark.parametrize("cid", CONVERSATIONS)
def test_the_context_at_every_version_is_unchanged(ledger: cl.Ledger, cid: str) -> None:
    golden = EXPECTED["conversations"][cid]
    assert ledger.conversation(UUID(cid)).version == golden["version"]
    messages = golden["context_messages"]
    differing = [
        int(v)
        for v, indices in golden["contexts"].items()
        if ledger.context(UUID(cid), version=int(v)) != [messages[i] for i in indices]
    ]
    assert differing == []
    assert ledger.context(UUID(cid)) == [messages[i] for i in golden["contexts"][str(golden["version"])]]


@pytest.mark.parametrize("cid", CONVERSATIONS)
def test_the_totals_are_unchanged(ledger: cl.Ledger, cid: str) -> None:
    expected = EXPECTED["conversations"][cid]["totals"]
    assert like(jsonable(ledger.totals(UUID(cid))), expected) == expected


@pytest.mark.parametrize("cid", CONVERSATIONS)
def test_every_event_reads_as_it_was_written(ledger: cl.Ledger, cid: str) -> None:
    expected = EXPECTED["conversations"][cid]["events"]
    assert like([event.record() for event in ledger.replay(UUID(cid))], expected) == expected


def test_the_global_totals_and_verify_are_unchanged(ledger: cl.Ledger) -> None:
    assert like(jsonable(ledger.totals()), EXPECTED["totals"]) == EXPECTED["totals"]
    report = ledger.verify()
    assert report.ok and EXPECTED["verify"]["ok"]
    assert like({**jsonable(report), "ok": report.ok}, EXPECTED["verify"]) == EXPECTED["verify"]


def test_the_golden_log_is_exercised_where_it_matters() -> None:
    main = EXPECTED["conversations"][CONVERSATIONS[0]]
    kinds = {event["kind"] for event in main["events"]}
    assert {"SummaryCreated", "SummarizationFailed", "PolicyChanged", "UsageRecorded"} <= kinds
    assert len(main["transcript"]) >= 100 and len(main["summaries"]) >= 2
    assert any(len(m["message"].get("tool_calls") or []) == 2 for m in main["transcript"])
