"""``contextledger list`` on a store holding an erased conversation, with and without
read models: the erased one is left out, the others listed, exit 0."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.readmodels import attach_read_models


@pytest.mark.parametrize("read_models", [False, True], ids=["log", "read-models"])
def test_list_leaves_an_erased_conversation_out_with_or_without_read_models(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    read_models: bool,
) -> None:
    secret = base64.b64encode(os.urandom(32)).decode()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with cl.Ledger.open(
        settings=cl.Settings(database_url=url, cipher_key=secret, run_policy=False)
    ) as ledger:
        models = attach_read_models(ledger) if read_models else None
        gone = ledger.start("You help.", subject="user-1")
        ledger.append(gone, {"role": "user", "content": "erase me"})
        kept = ledger.start("You help.")
        ledger.append(kept, {"role": "user", "content": "keep me"})
        ledger.erase(subject="user-1", reason="asked")
        ledger.wait_idle()
        del models
    assert (tmp_path / "ledger.views.db").exists() is read_models
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", secret)
    assert main(["list", "--database", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["conversation_id"] for r in rows] == [str(kept)]
    assert rows[0]["messages"] == 1
    assert main(["list", "--database", url]) == 0
    out = capsys.readouterr().out
    assert str(kept) in out and str(gone) not in out and "1 conversation\n" in out
