"""An event store restored from an older backup, under read models that applied more
of the log than it now holds: ``stats`` and ``list`` read the log instead of rows
ahead of it, ``worker`` refuses to run those read models with ``ReadModelAheadError``
(naming the read model, its position and the log's head), and ``rebuild`` makes them
again from the log (docs/operations.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from tests.conftest import POSTGRES_URL

BACKED_UP = 6
LATER = 4


def _append(url: str, conversation: Any, count: int, first: int) -> Any:
    with cl.Ledger.open(url, run_policy=False) as ledger:
        if conversation is None:
            conversation = ledger.start("assistant")
        for n in range(first, first + count):
            ledger.append(conversation, {"role": "user", "content": f"question number {n}"})
        return conversation


def _backup(url: str) -> Any:
    """What a restore needs later: the SQLite file's copy, the PostgreSQL log's top."""
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        copy = path.with_suffix(".backup")
        with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
            source.backup(target)
        return copy
    with cl.Ledger.open(url, run_policy=False, read_only=True) as ledger:
        recorder: Any = ledger.recorder
        return recorder.max_notification_id()


def _restore(url: str, backup: Any) -> None:
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        for extra in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            extra.unlink(missing_ok=True)
        with sqlite3.connect(backup) as source, sqlite3.connect(path) as target:
            source.backup(target)
        return
    schema = url.split("schema=")[1]
    with psycopg.connect(POSTGRES_URL.split("?")[0], autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{schema}".contextledger_events WHERE notification_id > %s', (backup,))
        conn.execute(f'DELETE FROM "{schema}".contextledger_snapshots')


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    assert main(args) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_read_models_ahead_of_a_restored_log_are_refused_and_rebuilt(
    shared_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = shared_url
    db = ["--database", url]
    assert main(["init", *db]) == 0
    conversation = _append(url, None, BACKED_UP, 0)
    backup = _backup(url)
    _append(url, conversation, LATER, BACKED_UP)
    assert main(["worker", "--once", *db]) == 0
    capsys.readouterr()
    ahead = _json(["stats", "--json", *db], capsys)
    assert ahead["source"] == "token_totals read model"

    _restore(url, backup)
    with cl.Ledger.open(url, run_policy=False, read_only=True) as ledger:
        truth = ledger.totals()
        head = ledger.recorder.max_notification_id()
    assert truth.full_history_tokens < ahead["full_history_tokens"]

    # What only reads shows the log's truth, not the rows ahead of it.
    stats = _json(["stats", "--json", *db], capsys)
    assert stats["source"] == "log"
    assert stats["full_history_tokens"] == truth.full_history_tokens
    listed = _json(["list", "--json", *db], capsys)
    assert [row["messages"] for row in listed] == [BACKED_UP]

    # The worker refuses to run read models ahead of the log, naming them.
    assert main(["worker", "--once", *db]) == 1
    err = capsys.readouterr().err
    assert "past the log's head" in err and f"head={head}" in err and "contextledger rebuild" in err

    # A rebuild makes them again from the log; the worker then runs.
    assert main(["rebuild", *db]) == 0
    assert main(["worker", "--once", *db]) == 0
    capsys.readouterr()
    stats = _json(["stats", "--json", *db], capsys)
    assert stats["source"] == "token_totals read model"
    assert stats["full_history_tokens"] == truth.full_history_tokens
    assert [row["messages"] for row in _json(["list", "--json", *db], capsys)] == [BACKED_UP]


def test_a_runner_over_read_models_ahead_of_the_log_raises_the_typed_error(
    shared_url: str,
) -> None:
    from contextledger.infrastructure.readmodels import SQLReadModels

    url = shared_url
    assert main(["init", "--database", url]) == 0
    conversation = _append(url, None, BACKED_UP, 0)
    backup = _backup(url)
    _append(url, conversation, LATER, BACKED_UP)
    assert main(["worker", "--once", "--database", url]) == 0
    _restore(url, backup)
    with cl.Ledger.open(url, run_policy=False) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        runner = models.runner(ledger)
        try:
            with pytest.raises(cl.ReadModelAheadError) as caught:
                ledger.attach(runner)
            error = caught.value
            assert isinstance(error, cl.StoreError)
            assert error.projection in runner.names
            assert error.head == ledger.recorder.max_notification_id()
            assert error.position is not None and error.position > error.head
            assert not runner.running
        finally:
            runner.stop()
            models.close()


def test_attach_read_models_over_a_restored_log_refuses_and_a_rebuild_lets_it_run(
    shared_url: str,
) -> None:
    from contextledger.infrastructure.readmodels import SQLReadModels, attach_read_models

    url = shared_url
    assert main(["init", "--database", url]) == 0
    conversation = _append(url, None, BACKED_UP, 0)
    backup = _backup(url)
    _append(url, conversation, LATER, BACKED_UP)
    assert main(["worker", "--once", "--database", url]) == 0
    _restore(url, backup)
    with cl.Ledger.open(url, run_policy=False) as ledger:
        with pytest.raises(cl.ReadModelAheadError):
            attach_read_models(ledger)
        models = SQLReadModels.for_ledger(ledger)
        try:
            runner = models.runner(ledger, close_with_runner=False)
            for name in runner.names:
                runner.rebuild(name)
        finally:
            models.close()
        models = attach_read_models(ledger)
        assert ledger.wait_idle(30)
        assert models.token_totals.global_totals().full_history_tokens == ledger.totals().full_history_tokens
