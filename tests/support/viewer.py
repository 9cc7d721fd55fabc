"""The viewer as a person uses it: a store with demo-like conversations, ``contextledger
serve`` as a real subprocess, and a real headless Chromium (the system's) to drive it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from uuid import UUID

from contextledger import Ledger, Settings
from contextledger.infrastructure.demo import DEMO_POLICY, DEMO_SYSTEM_PROMPT, synthesize_conversation

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: What an attacker would put in a message: shown as text, never run.
SCRIPT_MESSAGE = (
    "<script>window.__pwned = 1; alert('pwned')</script>"
    "<img src=x onerror=\"window.__pwned = 2; alert('img')\"> & so on"
)


#: The application key of one of the small conversations.
KEY = "chat-7"


@dataclass(frozen=True)
class Store:
    url: str
    path: Path
    demo: UUID
    hostile: UUID
    others: tuple[UUID, ...]

    @property
    def served_url(self) -> str:
        """The store's URL relative to its folder, where ``serve`` runs: the pages
        (and the screenshots in the docs) show ``sqlite:///ledger.db``, never the
        temporary folder of the machine that ran the tests."""
        return f"sqlite:///{self.path.name}"


def offline_env() -> dict[str, str]:
    """The environment of a child process: no API key, no ledger settings."""
    return {k: v for k, v in os.environ.items()
            if k != "OPENAI_API_KEY" and not k.startswith("CONTEXTLEDGER_")}


#: Records in clear (key_scope="store", no master key), so that ``tamper`` can edit
#: their JSON as someone editing the database by hand would; every open of the store
#: uses it, so that no key table is made in it.
IN_CLEAR = Settings(key_scope="store")


def build_store(path: Path, *, messages: int = 200) -> Store:
    """A SQLite store: a demo-like support conversation (tool calls, placeholders,
    summaries by the offline summarizer), one with a hostile message, two small ones
    (the first started with the key ``KEY``)."""
    url = f"sqlite:///{path}"
    with Ledger.open(url, settings=IN_CLEAR) as ledger:
        others = []
        for topic, key in (("billing question", KEY), ("dns question", None)):
            cid = ledger.start("You are terse.", policy=DEMO_POLICY, key=key)
            ledger.append(cid, {"role": "user", "content": f"A short {topic}."})
            ledger.append(cid, {"role": "assistant", "content": "A short answer."})
            others.append(cid)
        hostile = ledger.start("You are careful.", policy=DEMO_POLICY)
        ledger.append(hostile, {"role": "user", "content": SCRIPT_MESSAGE})
        ledger.append(hostile, {"role": "assistant", "content": "I will not run that."})
        demo = ledger.start(DEMO_SYSTEM_PROMPT, policy=DEMO_POLICY)
        for message in synthesize_conversation(seed=11, messages=messages):
            ledger.append(demo, message)
        assert ledger.wait_idle(60)
        assert ledger.summaries(demo), "the demo conversation should have summaries"
    return Store(url=url, path=path, demo=demo, hostile=hostile, others=tuple(others))


def tamper(path: Path, cid: UUID, position: int) -> int:
    """Change the content of the message at ``position`` in the stored JSON bytes, as
    someone editing the database by hand would; returns the event's version."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT originator_version, state FROM stored_events WHERE originator_id = ? "
            "AND topic = 'contextledger.conversation.MessageAppended'",
            (cid.hex,),
        ).fetchall()
        for version, state in rows:
            text = bytes(state).decode("utf-8")
            if f'"position":{position},' in text:
                changed = text.replace('"content":"', '"content":"(edited) ', 1)
                assert changed != text
                conn.execute(
                    "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = ?",
                    (changed.encode("utf-8"), cid.hex, version),
                )
                return int(version)
    raise AssertionError(f"no message at position {position}")


@contextmanager
def serve(url: str, *, cwd: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """``contextledger serve`` on a free port of ``host``; yields its base URL.

    The command announces its URL on stderr only once its socket is bound, so the
    first request after that line is accepted."""
    process = subprocess.Popen(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "serve",
         "--database", url, "--host", host, "--port", "0"],
        cwd=cwd, env=offline_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        if " at http://" not in line:
            process.kill()
            _, rest = process.communicate(timeout=30)
            raise AssertionError(f"serve did not start: {line}{rest}")
        base = line.split(" at ", 1)[1].split()[0].rstrip("/")
        yield base
    finally:
        process.terminate()
        process.communicate(timeout=30)


def _serve_main(args: list[str], env: dict[str, str], cwd: str, err: Connection) -> None:
    """The command line's ``main`` with ``args`` in this (forked) process: its stdout
    discarded, its stderr the write end of the pipe ``err`` (``processes.as_command``)."""
    from tests.support.processes import as_command, exit_with_cli

    as_command(env, cwd, os.devnull, err)
    exit_with_cli(args)


@contextmanager
def serve_forked(url: str, *, cwd: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """What ``serve`` does, the command running in a process forked from the tests'
    forkserver (tests/support/processes.py: the package already imported) instead of a
    new interpreter: the same ``main``, arguments, environment and folder, its URL
    read from the line it prints on stderr once its socket is bound; stopped by
    SIGTERM as ``serve`` stops it. (The command's start-up as a new interpreter is
    tested where it matters: tests/e2e/test_viewer_limits.py starts it so.)"""
    from tests.support.processes import process_context

    ctx: Any = process_context()  # typeshed's BaseContext names no Process
    read, write = ctx.Pipe(duplex=False)
    args = ["serve", "--database", url, "--host", host, "--port", "0"]
    process = ctx.Process(target=_serve_main, args=(args, offline_env(), str(cwd), write))
    process.start()
    write.close()
    stderr = os.fdopen(os.dup(read.fileno()), "r", encoding="utf-8")
    read.close()
    try:
        line = stderr.readline()
        if " at http://" not in line:
            process.join(30)
            raise AssertionError(f"serve did not start: {line}{stderr.read()}")
        yield line.split(" at ", 1)[1].split()[0].rstrip("/")
    finally:
        process.terminate()
        process.join(30)
        stderr.close()
