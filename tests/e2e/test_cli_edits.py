"""The command line shows what edits did: marks in ``transcript``, ``replay`` and
``export`` (text and JSON), forks in ``list``, edit counters and the estimate's
drift in ``stats``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from contextledger.application import Ledger, ReductionPolicy
from contextledger.infrastructure.cli import main
from tests.integration.test_readmodels import CountingSummarizer, converse

POLICY = ReductionPolicy(trigger_messages=8, keep_messages=3)


@pytest.fixture
def edited(tmp_path: Path) -> Iterator[tuple[str, UUID, UUID]]:
    """A conversation retracted from, edited and summarized, and a fork of it."""
    url = f"sqlite:///{tmp_path / 'edits.db'}"
    with Ledger.open(url, summarizer=CountingSummarizer()) as ledger:
        cid = ledger.start("You track parcels.", policy=POLICY)
        converse(ledger, cid, 3)
        assert ledger.wait_idle(30)
        ledger.record_usage(cid, prompt_tokens=500, completion_tokens=9)
        ledger.retract(cid, 0, reason="customer asked to forget this")
        ledger.edit(cid, 4, {"role": "assistant", "content": "Order 0 was delivered on Monday."})
        fork = ledger.fork(cid)
    yield url, cid, fork


def test_transcript_marks_retracted_edited_and_inherited_messages(
    edited: tuple[str, UUID, UUID], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cid, fork = edited
    assert main(["transcript", str(cid), "--database", url]) == 0
    out = capsys.readouterr().out
    retracted = [line for line in out.splitlines() if line.startswith("#0 ")]
    assert "retracted at v" in retracted[0] and "customer asked to forget this" in retracted[0]
    edits = [line for line in out.splitlines() if line.startswith("#4 ")]
    assert "replaced by v" in edits[0] and "Order 0 is in transit." in edits[0]
    assert "edit of v" in edits[1]
    assert edits[1].index("delivered on Monday") < edits[1].index("original: Order 0 is in transit.")
    assert "1 replaced by an edit" in out.splitlines()[-1]

    assert main(["transcript", str(cid), "--database", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    first = rows[0]
    assert first["retracted"] is True and first["retracted_reason"] == "customer asked to forget this"
    at_four = [r for r in rows if r["position"] == 4]
    assert at_four[0]["superseded_by_version"] == at_four[1]["version"]
    assert at_four[1]["edited_from_version"] == at_four[0]["version"] and at_four[1]["current"]

    assert main(["transcript", str(fork), "--database", url, "--json"]) == 0
    forked = json.loads(capsys.readouterr().out)
    assert {r["inherited_from"] for r in forked} == {str(cid)}
    assert main(["transcript", str(fork), "--database", url]) == 0
    assert f"from {cid}" in capsys.readouterr().out


def test_replay_and_export_mark_what_later_events_did(
    edited: tuple[str, UUID, UUID], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cid, fork = edited
    assert main(["replay", str(cid), "--database", url]) == 0
    out = capsys.readouterr().out
    assert "retract retracted #0" in out and "customer asked to forget this" in out
    assert "invalidated (retracted at v" in out
    assert any("SummaryCreated" in line and "[invalidated at v" in line for line in out.splitlines())
    assert any("MessageEdited" in line and "was v" in line and "in transit" in line for line in out.splitlines())

    assert main(["replay", str(cid), "--database", url, "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    edit = next(e for e in events if e["kind"] == "MessageEdited")
    assert edit["marks"]["original"]["content"] == "Order 0 is in transit."
    appended = {e["data"]["position"]: e for e in events if e["kind"] == "MessageAppended"}
    assert appended[0]["marks"]["retracted_reason"] == "customer asked to forget this"
    assert appended[4]["marks"]["superseded_by_version"] == edit["version"]
    assert "marks" not in appended[1]
    assert any(e["marks"]["valid"] is False for e in events if e["kind"] == "SummaryCreated" and "marks" in e)

    assert main(["export", str(fork), "--database", url]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["kind"] == "Forked"
    origin = lines[0]["data"]["origin"]
    assert lines[0]["marks"] == {"forked_from": str(cid), "forked_at_version": origin["version"],
                                 "through_position": origin["through_position"]}
    assert main(["export", str(cid), "--database", url]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e.get("marks") for e in exported] == [e.get("marks") for e in events]
    assert main(["replay", str(fork), "--database", url]) == 0
    assert f"forked from {cid}" in capsys.readouterr().out


def test_list_shows_forks_and_stats_the_edits_and_the_estimates_drift(
    edited: tuple[str, UUID, UUID], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cid, fork = edited
    assert main(["list", "--database", url, "--json"]) == 0
    listed = {row["conversation_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(listed) == {str(cid), str(fork)}
    assert listed[str(fork)]["forked_from"] == str(cid)
    assert listed[str(fork)]["messages"] == listed[str(cid)]["messages"] == 15
    assert main(["list", "--database", url]) == 0
    assert f"fork of {cid}" in capsys.readouterr().out

    with Ledger.open(url, run_policy=False) as ledger:
        totals = ledger.totals(cid)
        overall = ledger.totals()
    assert main(["stats", str(cid), "--database", url, "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["estimate_error"] == totals.estimate_error == totals.estimated_prompt_tokens - 500
    assert one["retracted_messages"] == 1 and one["edited_messages"] == 1
    assert one["summaries_invalidated"] >= 1
    assert main(["stats", str(cid), "--database", url]) == 0
    assert "estimate error" in capsys.readouterr().out

    assert main(["stats", "--database", url, "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every["messages"] == overall.messages == 15  # the fork's shared history once
    for name in ("provider_prompt_tokens", "estimated_prompt_tokens", "usage_records", "tools_tokens",
                 "retracted_messages", "edited_messages", "summaries_invalidated", "estimate_error"):
        assert every[name] == getattr(overall, name), name
    assert every["usage_records"] == 1


def test_the_demo_refuses_to_recreate_a_database_holding_a_fork(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert main(["demo", "--database", url, "--messages", "30", "--chart", "-", "--json"]) == 0
    with Ledger.open(url, run_policy=False) as ledger:
        ledger.fork(ledger.conversation_ids()[0])
    capsys.readouterr()
    assert main(["demo", "--database", url, "--messages", "30", "--chart", "-", "--json"]) == 2
    assert "refusing to recreate" in capsys.readouterr().err
    with Ledger.open(url, run_policy=False) as ledger:
        assert len(ledger.conversation_ids()) == 2  # the demo's and the fork
