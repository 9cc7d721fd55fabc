"""``contextledger verify`` on a damaged store (real SQLite files and PostgreSQL
schemas edited behind the ledger's back): it exits 1 and prints every problem, each
with its conversation and version, and still verifies the other conversations."""

from __future__ import annotations

import json

import pytest

from contextledger.infrastructure.cli import main
from tests.support.raw_store import APPENDED, Store, build_store


@pytest.fixture
def store(shared_url: str) -> Store:
    return build_store(shared_url)


def damage(store: Store) -> tuple[int, int, int]:
    """An undecodable event, a deleted one and an edited snapshot in one conversation."""
    rows = store.raw.rows("events", store.damaged)
    snapshots = [v for v, _, _ in store.raw.rows("snapshots", store.damaged)]
    undecodable = next(v for v, t, _ in rows if t == APPENDED and v < snapshots[0])
    deleted = next(v for v, t, _ in rows if t == APPENDED and snapshots[0] < v < snapshots[1])
    (state,) = [s for v, _, s in rows if v == undecodable]
    store.raw.set_state("events", store.damaged, undecodable, state[:-9])
    store.raw.delete("events", store.damaged, deleted)
    return undecodable, deleted, snapshots[0]


def test_verify_prints_every_problem_and_exits_1(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    undecodable, deleted, _ = damage(store)
    assert main(["verify", "--database", store.url]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert any(f"{store.damaged} version {undecodable}: undecodable event" in line for line in lines), lines
    assert any(f"{store.damaged} version {deleted}: the event at version {deleted} is missing" in line
               for line in lines), lines
    assert all(str(store.damaged) in line for line in lines)  # the other conversation is fine
    assert captured.err.count("\n") == 1 and "verify FAILED" in captured.err
    assert f"version {undecodable}:" in captured.err and "more)" in captured.err

    assert main(["verify", "--database", store.url, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["conversations"] == 2
    assert {p["conversation_id"] for p in report["problems"]} == {str(store.damaged)}
    assert {undecodable, deleted} <= {p["version"] for p in report["problems"]}

    assert main(["verify", str(store.fine), "--database", store.url]) == 0
    assert capsys.readouterr().out.startswith("verify OK: 1 conversation,")


def test_verify_names_a_snapshot_that_disagrees_with_its_events(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    version = store.raw.rows("snapshots", store.damaged)[-1][0]
    store.raw.edit("snapshots", store.damaged, version,
                   lambda d: d["state"].update(system_prompt="You are EVIL."))
    assert main(["context", str(store.damaged), "--database", store.url, "--json"]) == 0
    assert "You are EVIL." in capsys.readouterr().out  # what loading trusts...
    assert main(["verify", "--database", store.url]) == 1  # ...verify does not
    out = capsys.readouterr().out
    assert f"version {version}: the snapshot at version {version} does not match" in out
    assert "system_prompt" in out
