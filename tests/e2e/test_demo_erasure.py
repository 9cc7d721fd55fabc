"""Erasure on the default store, end to end as a first user meets it: in an empty
folder with no configuration, ``contextledger demo``, then ``contextledger erase
--subject <the demo's subject>``: no file the demo left holds any of its conversation's
text afterwards, and ``contextledger verify`` exits 0 listing the conversation as erased,
its structure and digest chain checked (an erased record altered in the store shows)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

from contextledger.infrastructure.demo import DEMO_SUBJECT, DEMO_SYSTEM_PROMPT, synthesize_conversation
from tests.support import processes

MESSAGES = 150


def offline_env() -> dict[str, str]:
    """The environment of the command line: no API key, no ledger settings."""
    return {
        k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY" and not k.startswith("CONTEXTLEDGER_")
    }


def first_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m contextledger.infrastructure.cli ARGS`` as a new interpreter: how a
    first user starts it."""
    return subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=offline_env(),
    )


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own, forked with the package already
    imported (tests/support/processes.py): the same ``main``, environment and folder,
    without a new interpreter's start-up each time."""
    return processes.run_cli(args, env=offline_env(), cwd=cwd, timeout=300)


def strings_of(value: Any) -> list[str]:
    """Every string in a message (contents, tool names and arguments, ids)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_of(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings_of(v)]
    return []


def demo_texts() -> list[bytes]:
    """Pieces of the demo conversation's text long enough to be its own (not a role
    name or a JSON key): the system prompt and what every message says."""
    script = synthesize_conversation(seed=7, messages=MESSAGES)
    texts = [DEMO_SYSTEM_PROMPT, *(s for m in script for s in strings_of(m))]
    return sorted({t[:48].encode("utf-8") for t in texts if len(t) >= 24})


def every_file(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_the_demos_subject_is_erased_from_every_file_and_verify_lists_it_as_erased(tmp_path: Path) -> None:
    demo = first_run("demo", "--messages", str(MESSAGES), "--chart", "-", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert f"data subject       {DEMO_SUBJECT}" in demo.stdout
    said = {
        line.split()[0]: line.split()[1] for line in demo.stdout.splitlines()[:4] if line.startswith("  ")
    }
    cid, url = said["conversation"], said["database"]
    texts = demo_texts()
    assert len(texts) > 50
    found = every_file(tmp_path)
    assert any(t in found for t in texts)  # the scan can find the text: the read models hold it

    erased = run_cli(
        "erase", "--database", url, "--subject", DEMO_SUBJECT, "--reason", "test", "--json", cwd=tmp_path
    )
    assert erased.returncode == 0, erased.stderr
    report = json.loads(erased.stdout)
    assert report["subject"] == DEMO_SUBJECT and report["conversations"] == [cid]
    assert report["ranges"][0]["conversation_id"] == cid and report["ranges"][0]["events"] > MESSAGES
    assert len(report["key_ids"]) == 1 and len(report["record_digest"]) == 64
    receipt = tmp_path / "receipt" / "erasure.json"  # the scan below reads it too: it holds no text
    receipt.parent.mkdir()
    receipt.write_text(erased.stdout, encoding="utf-8")

    left = every_file(tmp_path)
    assert [t for t in texts if t in left] == []

    checked = run_cli("verify", "--database", url, "--receipt", str(receipt), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"receipt OK: subject {DEMO_SUBJECT} erased at ")
    forged = tmp_path / "receipt" / "forged.json"
    forged.write_text(json.dumps({**report, "key_ids": ["00" * 16]}), encoding="utf-8")
    refused = run_cli("verify", "--database", url, "--receipt", str(forged), cwd=tmp_path)
    assert refused.returncode == 1 and "is not a tombstone" in refused.stderr

    verify = run_cli("verify", "--database", url, cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr
    assert f"ERASED conversation {cid}" in verify.stdout
    assert "verify OK: 1 conversation, 1 erased" in verify.stdout
    # Its structure and digest chain were checked, over what the erasure recorded.
    assert "its structure and digest chain verified" in verify.stdout
    as_json = json.loads(run_cli("verify", "--database", url, "--json", cwd=tmp_path).stdout)
    assert as_json["ok"] and as_json["erased_checked"] == [cid] and as_json["events"] > MESSAGES

    # An erased record altered in the store is found, though nothing of it can be read.
    path = tmp_path / url.removeprefix("sqlite:///")  # relative to the folder, or absolute
    with sqlite3.connect(path) as db:
        (state,) = db.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? AND originator_version = 3",
            (UUID(cid).hex,),
        ).fetchone()
        changed = bytes(state[:-1]) + bytes([state[-1] ^ 1])
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = 3",
            (changed, UUID(cid).hex),
        )
    tampered = run_cli("verify", "--database", url, cwd=tmp_path)
    assert tampered.returncode == 1, tampered.stdout
    assert f"MISMATCH conversation {cid} version 3: the erased record is not the one" in tampered.stdout


def test_after_the_demos_erasure_the_demo_refuses_to_keep_the_store_and_recreates_it_otherwise(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert (
        run_cli("demo", "--database", url, "--messages", "30", "--chart", "-", cwd=tmp_path).returncode == 0
    )
    erased = run_cli("erase", "--database", url, "--subject", DEMO_SUBJECT, "--reason", "test", cwd=tmp_path)
    assert erased.returncode == 0, erased.stderr
    kept = run_cli("demo", "--database", url, "--messages", "30", "--chart", "-", "--keep", cwd=tmp_path)
    assert kept.returncode == 2 and f"{DEMO_SUBJECT} was erased" in kept.stderr
    again = run_cli("demo", "--database", url, "--messages", "30", "--chart", "-", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
