"""An encrypted store opened without its master key, on a real SQLite file and on
PostgreSQL: a ``ConfigurationError`` at opening, one line saying to pass the key, not
a damaged log; and the viewer's loading thread survives a store it cannot read."""

from __future__ import annotations

import base64
import os
import sqlite3
import threading
import warnings
from typing import Any

import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("scope", ["subject", "store"])
def test_an_encrypted_store_opened_without_its_key_says_to_pass_the_key(
    shared_url: str, read_only: bool, scope: str
) -> None:
    with cl.Ledger.open(
        settings=cl.Settings(database_url=shared_url, cipher_key=key(), key_scope=scope, run_policy=False)
    ) as ledger:
        cid = ledger.start("You help.")
        ledger.append(cid, {"role": "user", "content": "secret"})
    with pytest.raises(cl.ConfigurationError) as caught:
        cl.Ledger.open(settings=cl.Settings(database_url=shared_url, run_policy=False, read_only=read_only))
    error = caught.value
    assert not isinstance(error, cl.LogDamagedError)
    assert error.setting == "cipher_key" and "master key" in error.message and "\n" not in error.message
    assert error.url is not None and error.url.split(":")[0] == shared_url.split(":")[0]
    assert "CONTEXTLEDGER_CIPHER_KEY" in error.message


def test_the_command_line_says_to_pass_the_key_in_one_line(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with cl.Ledger.open(
        settings=cl.Settings(database_url=sqlite_url, cipher_key=key(), run_policy=False)
    ) as ledger:
        ledger.start("You help.")
    monkeypatch.delenv("CONTEXTLEDGER_CIPHER_KEY", raising=False)
    for command in (["list"], ["verify"]):
        assert main([*command, "--database", sqlite_url]) == 2
        err = capsys.readouterr().err.strip()
        assert "is encrypted: open it with its master key" in err and len(err.splitlines()) == 1


def test_the_viewers_loading_thread_survives_a_store_it_cannot_read(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from contextledger.infrastructure.web import create_app

    secret = key()
    settings = cl.Settings(database_url=sqlite_url, cipher_key=secret, run_policy=False)
    with cl.Ledger.open(settings=settings) as ledger:
        ledger.start("You help.", subject="user-1")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("DELETE FROM stored_subject_keys WHERE subject = 'user-1'")  # a lost key
    died: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    with cl.Ledger.open(settings=settings) as ledger, TestClient(create_app(ledger)) as client:
        loader = next((t for t in threading.enumerate() if t.name == "contextledger-viewer-index"), None)
        if loader is not None:
            loader.join(30)
        assert died == []
        page = client.get("/conversations.json")
        assert page.status_code == 500 and "KeyMissingError" in page.json()["error"]
        assert client.get("/conversations.json").status_code == 500  # still serving
