"""``verify`` finds events deleted from the end of a conversation's log (on a real
SQLite file and on PostgreSQL): what is left has an intact digest chain, but the read
models applied the conversation through a later version. An intact store and a
conversation erased on purpose still verify OK."""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.infrastructure.cli import main
from tests.support.raw_store import RawStore

#: No snapshot past the end of these short logs: only the read models can tell.
SNAPSHOTS = 1000


def open_ledger(url: str, master: str | None = None) -> cl.Ledger:
    settings = cl.Settings(database_url=url, cipher_key=master, run_policy=False, snapshot_interval=SNAPSHOTS)
    return cl.Ledger.open(settings=settings)


def build(url: str, messages: int = 4) -> tuple[UUID, UUID, int]:
    """A conversation to cut short, and one after it (so that the notification log
    goes on past the cut), followed by the read models; the first one's last version."""
    with open_ledger(url) as ledger:
        cl.attach_read_models(ledger)
        damaged = ledger.start("You help.")
        for i in range(messages):
            ledger.append(damaged, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
        fine = ledger.start("You help too.")
        ledger.append(fine, {"role": "user", "content": "hello"})
        assert ledger.wait_idle(30)
        last = ledger.conversation(damaged).version
        assert ledger.verify().ok  # so the checks below can fail
    return damaged, fine, last


@pytest.mark.parametrize("deleted", [1, 2])
def test_events_deleted_from_the_end_are_reported(shared_url: str, deleted: int) -> None:
    damaged, fine, last = build(shared_url)
    RawStore(shared_url).delete("events", damaged, *range(last - deleted + 1, last + 1))
    end = last - deleted
    with open_ledger(shared_url) as ledger:
        cl.attach_read_models(ledger)
        for report in (ledger.verify(), ledger.verify(damaged)):
            assert not report.ok
            [problem] = report.problems
            assert problem.conversation_id == damaged and problem.version == end + 1
            assert f"through version {last}" in problem.problem
            assert f"the log ends at version {end}" in problem.problem
        assert ledger.verify(fine).ok


@pytest.mark.parametrize("deleted", [1, 2])
def test_the_cli_reports_events_deleted_from_the_end(
    shared_url: str, deleted: int, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged, fine, last = build(shared_url)
    RawStore(shared_url).delete("events", damaged, *range(last - deleted + 1, last + 1))
    end = last - deleted
    assert main(["verify", "--database", shared_url]) == 1
    captured = capsys.readouterr()
    [line] = captured.out.splitlines()
    assert f"MISMATCH conversation {damaged} version {end + 1}:" in line
    assert f"through version {last}, but the log ends at version {end}" in line
    assert "verify FAILED" in captured.err and str(damaged) in captured.err
    assert main(["verify", str(fine), "--database", shared_url]) == 0


def test_an_intact_store_with_read_models_verifies_ok(
    shared_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged, _, _ = build(shared_url)
    with open_ledger(shared_url) as ledger:
        cl.attach_read_models(ledger)
        ledger.append(damaged, {"role": "user", "content": "one more"})
        assert ledger.wait_idle(30)
        assert ledger.verify().ok and ledger.verify(damaged).ok
    assert main(["verify", "--database", shared_url]) == 0
    assert capsys.readouterr().out.startswith("verify OK: 2 conversations,")


def test_a_conversation_erased_on_purpose_is_not_reported(
    shared_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    master = base64.b64encode(os.urandom(32)).decode()
    with open_ledger(shared_url, master) as ledger:
        cl.attach_read_models(ledger)
        gone = ledger.start("You help.", subject="user-1")
        for i in range(3):
            ledger.append(gone, {"role": "user", "content": f"m{i}"})
        kept = ledger.start("You help.", subject="user-2")
        ledger.append(kept, {"role": "user", "content": "hello"})
        assert ledger.wait_idle(30)
        ledger.erase(subject="user-1", reason="asked")
        assert ledger.wait_idle(30)
        report = ledger.verify()
        assert report.ok and report.erased == (gone,)
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", master)
    assert main(["verify", "--database", shared_url]) == 0
    assert "ERASED conversation" in capsys.readouterr().out


@settings(max_examples=15, deadline=None)
@given(messages=st.integers(0, 6), data=st.data())
def test_any_cut_at_the_end_is_reported_at_the_first_missing_version(
    messages: int, data: st.DataObject
) -> None:
    """Whatever the log's length and however many events are cut from its end (its
    ``Started`` left), verify reports exactly one problem, at the first missing
    version, naming the read models' head and where the log ends."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'ledger.db'}"
        damaged, _, last = build(url, messages)
        deleted = data.draw(st.integers(0, last - 1), label="deleted")
        RawStore(url).delete("events", damaged, *range(last - deleted + 1, last + 1))
        with open_ledger(url) as ledger:
            cl.attach_read_models(ledger)
            report = ledger.verify()
        if deleted == 0:
            assert report.ok
            return
        [problem] = report.problems
        assert (problem.conversation_id, problem.version) == (damaged, last - deleted + 1)
        assert f"through version {last}, but the log ends at version {last - deleted}" in problem.problem
