"""The ``contextledger`` command line, end to end on a SQLite file: as a subprocess
(``python -m contextledger.infrastructure.cli``) and in-process through ``main(argv)``."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent

from contextledger.application import Ledger
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.demo import minimum_summarizer_calls
from tests.support import processes

DEMO_MESSAGES = 300
SUBCOMMANDS = ("demo", "context", "transcript", "replay", "stats", "export", "verify",
               "rebuild", "worker", "init", "list", "close-tool-calls", "serve")


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "OPENAI_API_KEY" and not k.startswith("CONTEXTLEDGER_")}
    return env


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=cli_env(),
    )


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs read the environment through Settings: keep them offline."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key in [k for k in os.environ if k.startswith("CONTEXTLEDGER_")]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, subprocess.CompletedProcess[str]]:
    """One demo run in a process forked with the package imported (tests "in a
    subprocess" start a new interpreter); the other tests read its database."""
    folder = tmp_path_factory.mktemp("demo")
    url = f"sqlite:///{folder / 'demo.db'}"
    done = processes.run_cli(["demo", "--database", url, "--messages", str(DEMO_MESSAGES)], env=cli_env(), cwd=folder)
    return url, done


@pytest.fixture(scope="module")
def cid(demo: tuple[str, subprocess.CompletedProcess[str]]) -> str:
    url, _ = demo
    with Ledger.open(url, run_policy=False) as ledger:
        return str(ledger.conversation_ids()[0])


@pytest.fixture(scope="module")
def n_messages(demo: tuple[str, subprocess.CompletedProcess[str]], cid: str) -> int:
    """The demo plays whole exchanges: at least DEMO_MESSAGES messages."""
    url, _ = demo
    with Ledger.open(url, run_policy=False) as ledger:
        found = ledger.totals(UUID(cid)).messages
    assert DEMO_MESSAGES <= found < DEMO_MESSAGES + 12
    return found


def test_the_demo_plays_a_long_conversation_and_closes_with_a_report(
    demo: tuple[str, subprocess.CompletedProcess[str]], n_messages: int,
) -> None:
    url, done = demo
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("messages", "summaries", "summarizer calls", "tokens appended",
                  "tokens sent", "savings", "verify", "chart"):
        assert re.search(rf"^{label}\s", out, re.MULTILINE), label
    assert f"messages             {n_messages}\n" in out
    assert "verify               OK" in out
    assert "minimum the policy allows" in out
    # Progress lines (stderr is a pipe, not a terminal).
    assert done.stderr.count("demo [") > 5 and "100%" in done.stderr
    chart = Path(url.removeprefix("sqlite:///")).with_suffix(".html")
    page = chart.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "<svg" in page and "<script" not in page
    assert str(chart) in out


def test_the_demo_report_as_json_shows_the_minimum_summarizer_calls_and_the_savings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'json-demo.db'}"
    assert main(["demo", "--database", url, "--messages", "220", "--json", "--chart", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert 220 <= report["messages"] < 232
    assert report["tool_messages"] > 40
    minimum = minimum_summarizer_calls(report["messages"], 100, 10)
    assert report["minimum_summarizer_calls"] == minimum == 2
    assert report["summarizer_calls"] == report["summaries"] == report["minimum_summarizer_calls"]
    assert report["tokens_sent"] < report["tokens_sent_full_history"]
    assert 0.3 < report["savings"] < 1
    assert report["verify"] == "OK" and report["read_models_match"] is True
    assert report["chart"] is None


def test_the_demo_recreates_its_database_unless_told_to_keep_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'again.db'}"
    args = ["demo", "--database", url, "--messages", "30", "--chart", "-", "--json"]
    assert main(args) == 0
    assert main(args) == 0
    assert main([*args, "--keep"]) == 0
    capsys.readouterr()
    with Ledger.open(url, run_policy=False) as ledger:
        assert len(ledger.conversation_ids()) == 2


def test_the_demo_refuses_to_recreate_a_database_that_is_not_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'precious.db'}"
    with Ledger.open(url, run_policy=False) as ledger:
        ledger.start("a production conversation")
    assert main(["demo", "--database", url, "--messages", "30"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing to recreate" in err
    with Ledger.open(url, run_policy=False) as ledger:
        assert len(ledger.conversation_ids()) == 1


def test_context_prints_the_working_memory_and_its_json_is_openai_format(
    demo: tuple[str, subprocess.CompletedProcess[str]], cid: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["context", cid, "--database", url]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith(f"context of {cid} at version ")
    assert "system" in text[1] and "Summary of the earlier conversation" in text[2]

    assert main(["context", cid, "--database", url, "--json"]) == 0
    messages = json.loads(capsys.readouterr().out)
    with Ledger.open(url, run_policy=False) as ledger:
        assert messages == ledger.context(UUID(cid))
        early = ledger.context(UUID(cid), version=6)
    assert main(["context", cid, "--database", url, "--version", "6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == early
    assert len(early) == 6  # the system prompt and the first five messages


def test_transcript_lists_every_message_ever_appended(
    demo: tuple[str, subprocess.CompletedProcess[str]], cid: str,
    n_messages: int, capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["transcript", cid, "--database", url, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["position"] for e in entries] == list(range(n_messages))
    assert entries[0]["message"]["role"] == "user"
    assert main(["transcript", cid, "--database", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == n_messages + 1 and lines[-1].startswith(f"{n_messages} messages")


def test_replay_shows_each_event_in_order_with_versions_and_timestamps(
    demo: tuple[str, subprocess.CompletedProcess[str]], cid: str,
    n_messages: int, capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["replay", cid, "--database", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("v1 ") and "Started" in lines[0]
    assert any("ThresholdReached" in line for line in lines)
    assert any("SummaryCreated" in line for line in lines)
    assert main(["replay", cid, "--database", url, "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [e["version"] for e in events] == list(range(1, len(events) + 1))
    assert all("T" in e["timestamp"] for e in events)
    kinds = [e["kind"] for e in events]
    assert kinds.count("MessageAppended") == n_messages
    assert kinds.count("ThresholdReached") == kinds.count("SummaryCreated") >= 2


def test_stats_for_one_conversation_and_for_all(
    demo: tuple[str, subprocess.CompletedProcess[str]], cid: str,
    n_messages: int, capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["stats", cid, "--database", url, "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["messages"] == n_messages
    assert one["context_tokens"] < one["full_history_tokens"]
    assert main(["stats", "--database", url, "--json"]) == 0
    overall = json.loads(capsys.readouterr().out)
    assert overall["conversations"] == 1
    assert overall["appended_tokens"] == one["appended_tokens"]
    assert overall["summaries"] == one["summaries"]
    assert main(["stats", cid, "--database", url]) == 0
    assert "context tokens" in capsys.readouterr().out


def test_export_writes_one_json_line_per_event(
    demo: tuple[str, subprocess.CompletedProcess[str]], cid: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["export", cid, "--database", url]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["topic"] == "contextledger.conversation.Started"
    assert {line["originator_id"] for line in lines} == {cid}
    assert [line["version"] for line in lines] == list(range(1, len(lines) + 1))
    assert main(["export", "--database", url]) == 0
    everything = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(everything) == len(lines)
    ids = [line["notification_id"] for line in everything]
    assert ids == sorted(ids)


def test_verify_passes_then_fails_naming_the_version_of_a_tampered_event(
    demo: tuple[str, subprocess.CompletedProcess[str]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["verify", "--database", url]) == 0
    assert capsys.readouterr().out.startswith("verify OK")

    copy = tmp_path / "tampered.db"
    with sqlite3.connect(url.removeprefix("sqlite:///")) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    with sqlite3.connect(copy) as conn:
        rowid, oid, version, topic, state = conn.execute(
            "SELECT rowid, originator_id, originator_version, topic, state FROM stored_events "
            "WHERE topic = 'contextledger.conversation.MessageAppended' "
            "ORDER BY rowid LIMIT 1 OFFSET 20"
        ).fetchone()
    # Rewritten by someone who can read the store's key table (the keys are unwrapped
    # without a master key): decrypted, changed and encrypted again with its own key.
    with Ledger.open(f"sqlite:///{copy}", run_policy=False) as ledger:
        stored = StoredEvent(originator_id=UUID(oid), originator_version=version, topic=topic, state=state)
        event = ledger.mapper.to_domain_event(stored)
        message = event.message.model_copy(update={"content": "a quietly rewritten message"})  # type: ignore[attr-defined]
        rewritten = ledger.mapper.to_stored_event(event.model_copy(update={"message": message}))  # type: ignore[attr-defined]
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (rewritten.state, rowid))
    assert main(["verify", "--database", f"sqlite:///{copy}"]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1
    assert f"version {version}:" in captured.err and "does not match its digest" in captured.err
    assert f"version {version}:" in captured.out


def test_rebuild_recreates_the_read_models_with_a_progress_bar(
    demo: tuple[str, subprocess.CompletedProcess[str]], cid: str,
    n_messages: int, capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["rebuild", "transcript", "--database", url]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"rebuilt transcript: {n_messages} events applied")
    # stderr is not a terminal here: plain progress lines instead of a bar.
    assert "rebuild transcript" in captured.err and "100%" in captured.err
    assert main(["rebuild", "--database", url]) == 0
    assert capsys.readouterr().out.count("rebuilt ") == 4


def test_a_worker_run_once_processes_until_idle_and_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'work.db'}"
    with Ledger.open(url, run_policy=False) as ledger:
        from contextledger.application import ReductionPolicy

        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=10, keep_messages=2))
        for n in range(25):
            ledger.append(cid, {"role": "user", "content": f"message {n} about the weather"})
    assert main(["worker", "--once", "--shard", "0/1", "--database", url]) == 0
    assert "idle at notification" in capsys.readouterr().out
    with Ledger.open(url, run_policy=False) as ledger:
        assert ledger.totals(cid).summaries >= 1


@pytest.mark.parametrize("args", [
    ["context", "not-a-uuid"],
    ["transcript", "1234"],
    ["replay", "x"],
    ["stats", "zzz"],
    ["verify", "nope"],
    ["worker", "--shard", "3/2"],
])
def test_a_bad_argument_is_a_usage_error_in_one_line(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*args, "--database", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err


def test_an_unknown_conversation_or_database_is_a_usage_error_in_one_line(
    demo: tuple[str, subprocess.CompletedProcess[str]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = demo
    assert main(["context", "00000000-0000-4000-8000-000000000000", "--database", url]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["transcript", "00000000-0000-4000-8000-000000000000",
                 "--database", f"sqlite:///{tmp_path / 'missing.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no database" in err


@pytest.mark.parametrize("command", [["list"], ["init"], ["demo", "--messages", "10"], ["worker", "--once"],
                                     ["rebuild"], ["verify"], ["context", "chat-7"]], ids=lambda c: c[0])
def test_a_path_too_long_for_the_system_is_a_store_error_in_one_short_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / ('a' * 5000)}.db"
    assert main([*command, "--database", url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected" not in err, err[:300]
    assert "error: cannot open the event store: File name too long" in err and len(err) < 300
    assert not any(tmp_path.iterdir())


def test_a_bad_conversation_id_in_a_subprocess_exits_2_with_one_line(tmp_path: Path) -> None:
    done = run_cli("context", "k" * 201, "--database",
                   f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "invalid conversation id" in done.stderr


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, UUID]:
    """A SQLite file holding one conversation started with the key ``chat-7``."""
    url = f"sqlite:///{tmp_path_factory.mktemp('keyed') / 'keyed.db'}"
    with Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("You help.", key="chat-7")
        ledger.append(cid, {"role": "user", "content": "hello"})
        ledger.append(cid, {"role": "assistant", "content": "hi there"})
    return url, cid


#: Every command that takes a conversation, with the options it needs.
CONVERSATION_COMMANDS = [
    ["context"], ["transcript"], ["replay"], ["export"], ["verify"], ["stats"],
    ["close-tool-calls"],
]


@pytest.mark.parametrize("command", CONVERSATION_COMMANDS, ids=lambda c: c[0])
def test_every_conversation_command_takes_the_key_as_it_takes_the_id(
    command: list[str], keyed: tuple[str, UUID], capsys: pytest.CaptureFixture[str],
) -> None:
    url, cid = keyed
    assert main([*command, "chat-7", "--database", url, "--json"]) == 0
    by_key = capsys.readouterr().out
    assert main([*command, str(cid), "--database", url, "--json"]) == 0
    by_id = capsys.readouterr().out
    assert by_key == by_id and by_key.strip()


def test_a_key_of_no_conversation_is_an_unknown_conversation(
    keyed: tuple[str, UUID], capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = keyed
    assert main(["context", "chat-8", "--database", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err


@pytest.mark.parametrize("command", CONVERSATION_COMMANDS, ids=lambda c: c[0])
def test_an_unknown_key_is_named_as_typed_not_by_the_id_it_stands_for(
    command: list[str], keyed: tuple[str, UUID], capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = keyed
    assert main([*command, "chat-8", "--database", url]) == 2
    err = capsys.readouterr().err
    assert err == f"contextledger {command[0]}: error: no conversation has the key 'chat-8'\n"
    unknown = "00000000-0000-4000-8000-000000000000"
    assert main([*command, unknown, "--database", url]) == 2
    assert unknown in capsys.readouterr().err


def test_counts_of_one_are_in_the_singular(keyed: tuple[str, UUID], capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = keyed
    assert main(["verify", "--database", url]) == 0
    assert capsys.readouterr().out == "verify OK: 1 conversation, 3 events, 2 messages, 0 summaries\n"
    assert main(["list", "--database", url]) == 0
    assert capsys.readouterr().out.endswith("\n1 conversation\n")
    assert main(["init", "--database", url]) == 0
    assert "(1 conversation)" in capsys.readouterr().out


def test_after_keys_rotate_the_old_key_is_told_to_use_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import base64

    old, new = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    url = f"sqlite:///{tmp_path / 'keyed.db'}"
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", old)
    with Ledger.open(url, run_policy=False) as ledger:
        ledger.append(ledger.start("You help.", key="chat-7"), {"role": "user", "content": "hello"})
    assert main(["keys", "rotate", "--new-key", new, "--database", url]) == 0
    capsys.readouterr()
    assert main(["context", "chat-7", "--database", url]) == 1  # still the old key
    err = capsys.readouterr().err
    assert "wrapped under another master key" in err and "SubjectKeys" not in err
    assert "after `contextledger keys rotate`, use the new key" in err and "CONTEXTLEDGER_CIPHER_KEY" in err
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", new)
    assert main(["context", "chat-7", "--database", url]) == 0
    assert "hello" in capsys.readouterr().out


@pytest.mark.parametrize(("value", "reason"), [
    ("", "1 to 200 characters"),
    ("k" * 201, "1 to 200 characters"),
    ("bad\udcff-key", "lone surrogate"),
])
@pytest.mark.parametrize("command", CONVERSATION_COMMANDS, ids=lambda c: c[0])
def test_a_malformed_id_or_key_is_a_usage_error_naming_why(
    command: list[str], value: str, reason: str, keyed: tuple[str, UUID],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = keyed
    assert main([*command, value, "--database", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "invalid conversation id or key" in captured.err and reason in captured.err


def test_a_key_and_a_malformed_key_in_a_subprocess(
    keyed: tuple[str, UUID], tmp_path: Path,
) -> None:
    url, _ = keyed
    done = run_cli("transcript", "chat-7", "--database", url, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [e["message"]["content"] for e in json.loads(done.stdout)] == ["hello", "hi there"]
    # Bytes that are not UTF-8 reach Python as lone surrogates: refused, not crashed on.
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "context", b"chat-\xff",
         "--database", url],
        capture_output=True, timeout=120, cwd=tmp_path, env=cli_env(),
    )
    assert done.returncode == 2
    assert done.stdout == b""
    err = done.stderr.decode("utf-8", "replace")
    assert err.count("\n") == 1 and "lone surrogate" in err and "Traceback" not in err


@pytest.mark.parametrize(("command", "keyword"), [
    ("demo", "progress"), ("context", "--version"), ("transcript", "oldest"),
    ("replay", "timestamp"), ("stats", "totals"), ("export", "JSON"), ("verify", "digest"),
    ("rebuild", "progress"), ("worker", "SIGTERM"),
])
def test_every_subcommand_explains_itself(
    command: str, keyword: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: contextledger {command}")
    assert "--database URL" in out and keyword in out


def test_the_top_level_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in SUBCOMMANDS)


def test_a_worker_runs_until_sigterm_and_then_exits_cleanly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    with Ledger.open(url, run_policy=False) as ledger:
        ledger.start("s")
    worker = subprocess.Popen(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "worker", "--database", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=cli_env(),
    )
    try:
        assert worker.stderr is not None
        started = worker.stderr.readline()
        assert "worker: all conversations, read models on" in started
        worker.send_signal(signal.SIGTERM)
        _, rest = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0, rest
    assert "stopping" in rest
