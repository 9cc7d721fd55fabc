"""The command line over several stores, as an operator runs it: ``init`` each store,
write through the library, then ``list``, ``stats``, ``verify``, ``replay``, ``export``,
``worker`` (every store, or one) and ``rebuild`` see every conversation wherever it
lives; ``CONTEXTLEDGER_STORES`` works like repeated ``--store``; a store added later
is created with ``init`` and the old conversations stay where they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.application.storage.sharding import home_store
from contextledger.infrastructure.cli import main
from tests.conftest import POSTGRES_URL, _postgres_admin


class Ran:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """``run(*args, env=...)``: the command line's ``main`` in this process (one
    command as a subprocess is in ``test_the_worker_runs_as_a_process``)."""

    def call(*args: str, env: dict[str, str] | None = None) -> Ran:
        with monkeypatch.context() as patch:
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            capsys.readouterr()
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse usage errors
                code = int(exc.code or 0)
            out, err = capsys.readouterr()
        return Ran(code, out, err)

    return call


def stores_args(urls: list[str]) -> list[str]:
    return [part for url in urls for part in ("--store", url)]


@pytest.fixture(params=["sqlite", "postgres"])
def three_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'store{i}.db'}" for i in range(3)]
        return
    admin = _postgres_admin()
    names = [f"cli_{i}_{uuid.uuid4().hex[:10]}" for i in range(3)]
    for name in names:
        admin.execute(f'CREATE SCHEMA "{name}"')  # type: ignore[attr-defined]
    try:
        yield [f"{POSTGRES_URL.split('?')[0]}?schema={name}" for name in names]
    finally:
        for name in names:
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key in [k for k in os.environ if k.startswith("CONTEXTLEDGER_")]:
        monkeypatch.delenv(key)


def test_the_command_line_covers_every_store(three_stores: list[str], run: Callable[..., Ran]) -> None:
    two, grown = three_stores[:2], three_stores
    made = run("init", *stores_args(two))
    assert made.returncode == 0, made.stderr
    policy = cl.ReductionPolicy(trigger_messages=6, keep_messages=2)
    with cl.Ledger.open(two, run_policy=False) as ledger:
        # Keys make the ids, and so the stores they land in, the same on every run.
        old = [ledger.start("sys", policy=policy, key=f"old-{i}") for i in range(8)]
        for cid in old:
            for n in range(7):
                ledger.append(cid, {"role": "user", "content": f"line {n} of {cid}"})
    assert {home_store(cid, 2) for cid in old} == {0, 1}

    listed = run("list", "--json", "--limit", "100", *stores_args(two))
    assert listed.returncode == 0, listed.stderr
    assert sorted(r["conversation_id"] for r in json.loads(listed.stdout)) == sorted(map(str, old))

    # One worker per store: each follows its own log and summarizes its own conversations.
    for index in (0, 1):
        worker = run("worker", "--once", "--follow-store", str(index), *stores_args(two))
        assert worker.returncode == 0, worker.stderr
        assert f"of store {index}" in worker.stdout
    with cl.Ledger.open(two, run_policy=False) as ledger:
        assert all(ledger.summaries(cid) for cid in old)
    bad = run("worker", "--once", "--follow-store", "5", *stores_args(two))
    assert bad.returncode == 2 and "there are 2 stores" in bad.stderr

    # A third store: created with init, then given to every process.
    assert run("init", "--database", grown[2]).returncode == 0
    env = {"CONTEXTLEDGER_STORES": ",".join(grown)}
    with cl.Ledger.open(grown, run_policy=False) as ledger:
        new = [ledger.start("sys", key=f"new-{i}") for i in range(30)]
        for cid in new:
            ledger.append(cid, {"role": "user", "content": "new"})
        ledger.append(old[0], {"role": "user", "content": "old, appended after the third store came"})
    assert {home_store(cid, 3) for cid in new} == {0, 1, 2}

    stats = run("stats", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["conversations"] == len(old) + len(new)
    verify = run("verify", "--json", env=env)
    assert verify.returncode == 0, verify.stderr
    report = json.loads(verify.stdout)
    assert report["ok"] and report["conversations"] == len(old) + len(new)
    assert report["messages"] == 7 * len(old) + len(new) + 1

    exported = [json.loads(line) for line in run("export", env=env).stdout.splitlines()]
    assert {e["store"] for e in exported} == {0, 1, 2}
    started = {e["originator_id"] for e in exported if e["kind"] == "Started"}
    assert started == {str(c) for c in [*old, *new]}
    placements = [e for e in exported if e["topic"] == "contextledger.placement.Recorded"]
    assert all(p["store"] == 0 for p in placements)
    assert {p["data"]["conversation_id"] for p in placements} == started

    replayed = run("replay", "--all", "--json", env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert len(replayed.stdout.splitlines()) == len(exported)
    context = run("context", str(old[0]), "--json", env=env)
    assert context.returncode == 0, context.stderr
    assert "after the third store came" in context.stdout

    rebuilt = run("rebuild", "conversations", "--json", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["rebuilt"]["conversations"] > 0
    both = run("list", "--database", grown[0], "--store", grown[1])
    assert both.returncode == 2 and "not both" in both.stderr
    served = run("serve", *stores_args(grown))
    assert served.returncode == 2 and "one store" in served.stderr


def test_the_worker_runs_as_a_process_on_contextledger_stores(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / f'p{i}.db'}" for i in range(2)]
    policy = cl.ReductionPolicy(trigger_messages=6, keep_messages=2)
    with cl.Ledger.open(urls, run_policy=False) as ledger:
        ids = [ledger.start("sys", policy=policy, key=f"worker-{i}") for i in range(6)]
        for cid in ids:
            for n in range(7):
                ledger.append(cid, {"role": "user", "content": f"line {n}"})
    env = {k: v for k, v in os.environ.items()
           if k != "OPENAI_API_KEY" and not k.startswith("CONTEXTLEDGER_")}
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "worker", "--once"],
        capture_output=True, text=True, timeout=300,
        env={**env, "CONTEXTLEDGER_STORES": " ".join(urls)},
    )
    assert done.returncode == 0, done.stderr
    assert "of stores 0, 1" in done.stderr and "of store 0" in done.stdout and "of store 1" in done.stdout
    with cl.Ledger.open(urls, run_policy=False) as ledger:
        assert all(ledger.summaries(cid) for cid in ids)
