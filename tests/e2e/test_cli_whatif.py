"""``contextledger whatif --policy FILE`` end to end on a SQLite file: text and JSON
output, exit statuses, and a one-line reason for every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from tests.integration.test_whatif import RECORDED, record
from tests.properties.test_corpora import load


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key in [k for k in os.environ if k.startswith("CONTEXTLEDGER_")]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store of two corpus conversations recorded under ``RECORDED``."""
    path = tmp_path_factory.mktemp("whatif") / "store.db"
    with cl.Ledger.open(f"sqlite:///{path}") as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:2], RECORDED)
    return f"sqlite:///{path}"


def policy_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_recorded_policy_in_json_reproduces_the_log(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = policy_file(tmp_path, RECORDED.model_dump_json(exclude_defaults=True))
    assert main(["whatif", "--database", url, "--policy", policy, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] is True
    assert report["simulated"] == report["recorded"]
    assert report["recorded"]["turns"] > 0 and report["recorded"]["summarizer_calls"] > 0
    assert [c["key"] for c in report["conversations"]] == ["chat-0", "chat-1"]
    for conversation in report["conversations"]:
        assert conversation["simulated_turn_tokens"] == conversation["recorded_turn_tokens"]


def test_a_changed_policy_prints_both_sides_and_the_largest_differences(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = policy_file(tmp_path, '{"trigger_messages": 20, "keep_messages": 6}')
    assert main(["whatif", "--database", url, "--policy", policy, "--conversations", "chat-1"]) == 0
    out = capsys.readouterr().out
    assert "1 conversation replayed" in out
    assert "recorded" in out and "simulated" in out and "tokens per turn, p95" in out
    assert "largest differences" in out and "(chat-1)" in out and "(chat-0)" not in out
    assert "example price table" in out


def test_the_budget_stops_the_replay_and_the_report_says_so(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = policy_file(tmp_path, RECORDED.model_dump_json())
    assert main(["whatif", "--database", url, "--policy", policy, "--budget-calls", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] is False and "budget of 1 summarizer calls" in report["stopped"]
    assert report["simulated"]["summarizer_calls"] == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("trigger_messages: 5", "is not JSON: Expecting value at line 1 column 1"),
        ("[1, 2]", "must hold a JSON object, not list"),
        ('{"trigger_messages": 5, "colour": "red"}', "colour: Extra inputs are not permitted"),
        ('{"trigger_messages": 5, "keep_messages": 8}', "keep_messages (8) must be smaller than trigger_messages (5)"),
        ('{"trigger_messages": "often"}', "trigger_messages: Input should be a valid integer"),
    ],
)
def test_a_bad_policy_file_exits_2_with_one_line(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, reason: str
) -> None:
    assert main(["whatif", "--database", url, "--policy", policy_file(tmp_path, text)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("contextledger whatif: error:")
    assert reason in captured.err


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--conversations", "chat-9"], "no conversation has the key 'chat-9'"),
        (["--summarizer", "openai"], "needs an API key"),
        (["--budget-calls", "-1"], "must be 0 or more"),
        (["--prices", "/no/such/prices.json"], "no prices file at /no/such/prices.json"),
    ],
)
def test_other_bad_input_exits_2_with_one_line(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], reason: str
) -> None:
    policy = policy_file(tmp_path, '{"trigger_messages": 20}')
    assert main(["whatif", "--database", url, "--policy", policy, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err


def test_a_missing_policy_file_or_store_exits_2(tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--database", url, "--policy", str(tmp_path / "absent.json")]) == 2
    assert "no policy file at" in capsys.readouterr().err
    policy = policy_file(tmp_path, "{}")
    assert main(["whatif", "--database", f"sqlite:///{tmp_path / 'absent.db'}", "--policy", policy]) == 2
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "absent.db").exists()


def test_as_a_subprocess(url: str, tmp_path: Path) -> None:
    policy = policy_file(tmp_path, '{"trigger_tokens": 400, "keep_tokens": 100, "max_summary_tokens": 80}')
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY" and not k.startswith("CONTEXTLEDGER_")}
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "whatif", "--database", url,
         "--policy", policy, "--json"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["policy"] == {"trigger_tokens": 400, "keep_tokens": 100, "max_summary_tokens": 80}
    assert report["simulated"]["turns"] == report["recorded"]["turns"] > 0


def test_the_command_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "whatif" in capsys.readouterr().out
