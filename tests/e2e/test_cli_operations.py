"""Operator behaviour of the command line: what creates a database and what refuses
to, masked URLs, escaped content, PostgreSQL failures named by cause, global options,
``list``, ``init``, ``--version``, the offline demo, a relative tiktoken cache, and
Ctrl-C during long work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.cli.connect import CLI_CONNECT_TIMEOUT, check_postgres, settings_for
from contextledger.infrastructure.counting.encodings import SHIPPED, SHIPPED_DIR, cache_file_name
from contextledger.infrastructure.persistence.database import Database
from tests.support import processes

REPO = Path(__file__).resolve().parents[2]
CID = "00000000-0000-4000-8000-000000000000"


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "OPENAI_API_KEY" and not k.startswith("CONTEXTLEDGER_")}
    return {**env, **extra}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "contextledger.infrastructure.cli", *args]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key in [k for k in os.environ if k.startswith("CONTEXTLEDGER_")]:
        monkeypatch.delenv(key)


def with_password(url: str, password: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@", 1)


# ------------------------------------------------------------- missing databases


@pytest.mark.parametrize("args", [
    ["worker", "--once"], ["stats"], ["context", CID], ["verify"], ["rebuild"],
    ["transcript", CID], ["replay", CID], ["replay", "--all"], ["export"], ["list"],
    ["close-tool-calls", CID],
])
def test_a_command_on_a_missing_sqlite_file_exits_2_and_creates_nothing(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    assert main([*args, "--database", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no database at {tmp_path / 'typo.db'}" in err
    assert list(tmp_path.iterdir()) == []


def test_init_creates_the_database_once_and_then_the_commands_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert main(["init", "--database", url]) == 0
    assert capsys.readouterr().out.startswith(f"created {url}")
    assert (tmp_path / "new.db").exists() and (tmp_path / "new.views.db").exists()
    assert main(["init", "--database", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"database": url, "created": False, "conversations": 0}
    assert main(["list", "--database", url]) == 0
    assert capsys.readouterr().out.endswith("0 conversations\n")
    assert main(["verify", "--database", url]) == 0


# --------------------------------------------------------------- list, options


def test_list_shows_the_newest_activity_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'many.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        first, second, third = (ledger.start(f"assistant {n}") for n in range(3))
        for n in range(3):
            ledger.append(second, {"role": "user", "content": f"question {n}"})
        ledger.append(first, {"role": "user", "content": "the latest word"})
        expected_tokens = ledger.totals(first).full_history_tokens
    assert main(["list", "--database", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [UUID(r["conversation_id"]) for r in rows] == [first, second, third]
    assert [r["messages"] for r in rows] == [1, 3, 0]
    assert rows[0]["tokens"] == expected_tokens and rows[0]["summaries"] == 0
    assert rows[0]["last_activity"] > rows[1]["last_activity"] > rows[2]["last_activity"]
    assert main(["list", "--database", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["conversation", "messages", "tokens", "summaries", "last", "activity"]
    assert lines[1].startswith(str(first)) and lines[-1] == "3 conversations"


def test_global_options_mean_the_same_before_or_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'opts.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "hi"})
    outputs = []
    for argv in (["stats", str(cid), "--database", url, "--json"],
                 ["--database", url, "--json", "stats", str(cid)],
                 ["--json", "stats", str(cid), "--database", url],
                 ["--database", url, "stats", str(cid), "--json"]):
        assert main(argv) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert all(found == outputs[0] for found in outputs)
    assert outputs[0]["messages"] == 1


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"contextledger {version('contextledger')}\n"


# ------------------------------------------------------------- what is printed


def test_control_characters_in_content_are_shown_escaped_and_json_stays_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'esc.db'}"
    hostile = "before\x1b[2J\x1b[31mred\x07after\u202eevil"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": hostile})
    for command in ("transcript", "context", "replay"):
        assert main([command, str(cid), "--database", url]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, command
        assert "\\x1b[2J\\x1b[31mred\\x07after\\u202eevil" in out, command
    assert main(["transcript", str(cid), "--database", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["message"]["content"] == hostile
    assert main(["export", str(cid), "--database", url]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[1]["data"]["message"]["content"] == hostile


@pytest.mark.postgres
def test_database_passwords_are_masked_in_banners_errors_and_reports(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = with_password(postgres_url, "s3cret-pw")
    assert main(["demo", "--database", url, "--messages", "30", "--json", "--chart", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert "s3cret-pw" not in captured.out + captured.err
    assert report["database"].startswith("postgresql://postgres:***@")

    assert main(["worker", "--once", "--database", url]) == 0
    captured = capsys.readouterr()
    assert "s3cret-pw" not in captured.out + captured.err and "postgres:***@" in captured.err

    missing = with_password(postgres_url.replace("/test?", "/no_such_database_cl?"), "s3cret-pw")
    assert main(["list", "--database", missing]) == 1
    err = capsys.readouterr().err
    assert "s3cret-pw" not in err and "***" in err


# ------------------------------------------------------- PostgreSQL failures


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_command_line_waits_a_short_time_for_postgresql() -> None:
    settings = settings_for(Database.parse("postgresql://app@db.example:5432/app"))
    assert Database.parse(settings.database_url).option("connect_timeout", "") == str(CLI_CONNECT_TIMEOUT)
    assert CLI_CONNECT_TIMEOUT <= 3
    given = settings_for(Database.parse("postgresql://app@db.example:5432/app?connect_timeout=9"))
    assert Database.parse(given.database_url).option("connect_timeout", "") == "9"


def test_no_server_at_the_port_is_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/test"
    with pytest.raises(cl.StoreError) as caught:
        check_postgres(Database.parse(url))
    assert caught.value.cause == "server_unreachable"
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert main(["list", "--database", url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no PostgreSQL server answers at 127.0.0.1:{port}" in err


@pytest.mark.postgres
def test_a_missing_database_is_named_as_such(postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres_url.split("?")[0].rsplit("/", 1)[0] + "/no_such_database_cl"
    with pytest.raises(cl.StoreError) as caught:
        check_postgres(Database.parse(url))
    assert caught.value.cause == "database_missing"
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert main(["stats", "--database", url]) == 1
    assert "database 'no_such_database_cl' does not exist" in capsys.readouterr().err


@pytest.mark.postgres
def test_an_unknown_role_is_an_authentication_failure(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_url.replace("postgresql://postgres@", "postgresql://no_such_role_cl@", 1)
    with pytest.raises(cl.StoreError) as caught:
        check_postgres(Database.parse(url))
    assert caught.value.cause == "authentication_failed"
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert main(["verify", "--database", url]) == 1
    err = capsys.readouterr().err
    assert "authentication failed for user 'no_such_role_cl'" in err and "no_such_role_cl" in err


# --------------------------------------------------------------------- the demo


def test_the_demo_stays_offline_when_an_openai_key_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-would-be-billed")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    url = f"sqlite:///{tmp_path / 'offline.db'}"
    assert main(["demo", "--database", url, "--messages", "120", "--json", "--chart", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summarizer"].startswith("OfflineSummarizer") and report["summaries"] >= 1
    assert report["summarizer_failures"] == 0


def test_the_demo_output_files_are_ignored_by_git() -> None:
    names = ["contextledger-demo.db", "contextledger-demo.views.db", "contextledger-demo.db-wal",
             "contextledger-demo.db-shm", "contextledger-demo.views.db-wal", "contextledger-demo.html"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=REPO,
                          capture_output=True, text=True)
    assert done.stdout.split() == names


def test_a_relative_tiktoken_cache_works_from_another_working_directory(tmp_path: Path) -> None:
    # The encodings ship with the package; a cache folder of tiktoken's is still honoured.
    cache = tmp_path / "cache"
    cache.mkdir()
    for shipped in SHIPPED.values():
        shutil.copyfile(SHIPPED_DIR / shipped.file_name, cache / cache_file_name(shipped.url))
    elsewhere = tmp_path / "run" / "here"
    elsewhere.mkdir(parents=True)
    relative = os.path.relpath(cache, elsewhere)
    done = subprocess.run(
        cli("demo", "--database", "sqlite:///d.db", "--messages", "30", "--json", "--chart", "-"),
        cwd=elsewhere, env=cli_env(TIKTOKEN_CACHE_DIR=relative), capture_output=True, text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verify"] == "OK"


def test_the_settings_make_a_relative_tiktoken_cache_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "../cache")
    cl.Settings.from_env()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path.parent / "cache")


# ------------------------------------------------------------------- Ctrl-C


def _cli_main(args: list[str], env: dict[str, str], cwd: str, out: str, err: Connection) -> None:
    """The command line's ``main`` in this (forked) process: its stdout the file
    ``out``, its stderr the write end of the pipe ``err`` (``processes.as_command``)."""
    processes.as_command(env, cwd, out, err)
    processes.exit_with_cli(args)


def interrupt_after_first_progress(argv: list[str], cwd: Path, marker: str) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own, forked from the tests' forkserver
    (tests/support/processes.py: the package already imported, SIGINT's default
    handler restored), sent SIGINT as Ctrl-C would once it reports progress."""
    ctx: Any = processes.process_context()  # typeshed's BaseContext names no Process
    read, write = ctx.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="cl-cli-") as folder:
        out = Path(folder) / "stdout"
        process = ctx.Process(target=_cli_main, args=(argv, cli_env(), str(cwd), str(out), write))
        process.start()
        write.close()
        stderr = os.fdopen(os.dup(read.fileno()), "r", encoding="utf-8")
        read.close()
        try:
            seen = []
            for line in stderr:
                seen.append(line)
                if line.startswith(marker):
                    assert process.pid is not None
                    os.kill(process.pid, signal.SIGINT)
                    break
            rest = stderr.read()
            process.join(120)
        finally:
            process.kill()
            process.join()
            stderr.close()
        code = process.exitcode if process.exitcode is not None else -1
        return subprocess.CompletedProcess(argv, code, out.read_text(), "".join(seen) + rest)


def test_ctrl_c_during_a_demo_exits_130_and_leaves_a_log_that_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'stopped.db'}"
    done = interrupt_after_first_progress(["demo", "--database", url, "--messages", "600"],
                                          tmp_path, "demo [")
    assert done.returncode == 130, done.stderr
    assert done.stderr.rstrip().endswith("contextledger demo: error: interrupted; what was written "
                                         "before stays consistent")
    assert "verify" not in done.stdout
    assert main(["verify", "--database", url]) == 0
    with cl.Ledger.open(url, run_policy=False) as ledger:
        (cid,) = ledger.conversation_ids()
        written = len(ledger.transcript(cid))
    assert 0 < written < 600
    # A tool-call group the interrupt left open is closed; the read models catch up.
    assert main(["close-tool-calls", str(cid), "--database", url]) == 0
    assert main(["list", "--database", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.splitlines()[-1])
    with cl.Ledger.open(url, run_policy=False) as ledger:
        assert rows[0]["messages"] == len(ledger.transcript(cid))


def test_ctrl_c_during_a_rebuild_exits_130_and_a_rebuild_repairs_the_read_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"
    assert main(["demo", "--database", url, "--messages", "200", "--json", "--chart", "-"]) == 0
    capsys.readouterr()
    done = interrupt_after_first_progress(["rebuild", "--database", url], tmp_path, "rebuild ")
    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr.splitlines()[-1]
    assert main(["verify", "--database", url]) == 0
    assert capsys.readouterr().out.startswith("verify OK")
    assert main(["rebuild", "--database", url, "--json"]) == 0
    rebuilt = json.loads(capsys.readouterr().out)["rebuilt"]
    assert set(rebuilt) == {"transcript", "summaries", "token_totals", "conversations"}
    from contextledger.infrastructure.readmodels import SQLReadModels

    with cl.Ledger.open(url, run_policy=False) as ledger:
        (cid,) = ledger.conversation_ids()
        models = SQLReadModels.for_ledger(ledger)
        try:
            assert models.transcript.transcript(cid) == ledger.transcript(cid)
            assert models.token_totals.totals(cid).appended_tokens == ledger.totals(cid).appended_tokens
        finally:
            models.close()


# ------------------------------------------------------------ command modules


def test_every_command_module_registers_itself_and_a_missing_one_breaks_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from contextledger.infrastructure.cli import app

    assert "serve" in app.COMMAND_MODULES
    monkeypatch.setattr(app, "COMMAND_MODULES", (*app.COMMAND_MODULES, "not_installed_here"))
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("init", "list", "close-tool-calls", "replay", "rebuild", "worker", "demo"):
        assert command in out
