"""Where the tests' own processes (writers, racers) come from: a forkserver that has
imported the package once.

A ``spawn`` process starts a new interpreter that imports the package, SQLAlchemy and
the database drivers again before it runs a line of the test: about a second of CPU
each, five times per erasure race. A ``forkserver`` process is forked from a server
process that imported them once (``PRELOAD``) and is single-threaded (unlike a pytest
worker, whose threads make a plain ``fork`` unsafe). The server starts with the first
process a test asks for and lives as long as the pytest process; every process it
forks is a new one, with nothing of another test's in it: only the modules are shared.

A forked process gets the environment the server started with, not the test's: a
test passes what its processes need as arguments, never through ``os.environ``.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

#: Imported once by the forkserver (what every test process would import first).
PRELOAD = [
    "contextledger",
    "contextledger.application",
    "contextledger.infrastructure.persistence",
    "contextledger.infrastructure.readmodels",
    "contextledger.infrastructure.cli.app",
    "sqlalchemy",
    "psycopg",
    "psycopg_pool",
    "pytest",
    "tests.support.preloaded_encodings",
]


def process_context() -> BaseContext:
    """The multiprocessing context of the tests' processes (a preloaded forkserver)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def as_command(env: Mapping[str, str], cwd: str | os.PathLike[str], out: Any, err: Any) -> None:
    """Make this (forked) process what a command started in ``cwd`` would be: ``env``
    its whole environment, its stdout and stderr (the file descriptors) ``out`` and
    ``err``, each a file's path or a pipe's write end (closed here once taken)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, target in ((1, out), (2, err)):
        if isinstance(target, str | os.PathLike):
            with open(target, "wb") as file:
                os.dup2(file.fileno(), fd)
        else:
            os.dup2(target.fileno(), fd)
            target.close()


def exit_with_cli(args: list[str]) -> None:
    """Run the command line's ``main`` with ``args`` in this (forked) process and exit
    with its status, stdout and stderr flushed."""
    sys.argv = ["contextledger", *args]
    from contextledger.infrastructure.cli.app import main

    code = 1
    try:
        code = main(args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def run_all(procs: Sequence[Any], timeout: float) -> list[int | None]:
    """Start every process, wait up to ``timeout`` seconds for each, kill those still
    running; their exit codes."""
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    return [proc.exitcode for proc in procs]


def _cli_main(args: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """The command line's ``main`` in this (forked) process (``as_command``)."""
    as_command(env, cwd, out, err)
    exit_with_cli(args)


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m contextledger.infrastructure.cli ARGS`` in a process of its own, forked
    from the forkserver (the package already imported): what ``subprocess.run`` with
    ``capture_output=True, text=True`` returns. ``env``: the process's whole environment
    (default: this process's)."""
    environment = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="cl-cli-") as folder:
        out, err = str(Path(folder) / "stdout"), str(Path(folder) / "stderr")
        ctx: Any = process_context()  # typeshed's BaseContext names no Process
        process = ctx.Process(
            target=_cli_main, args=(list(args), environment, str(cwd or Path.cwd()), out, err)
        )
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["contextledger", *args], timeout)
        return subprocess.CompletedProcess(
            ["contextledger", *args],
            process.exitcode if process.exitcode is not None else -1,
            Path(out).read_text(),
            Path(err).read_text(),
        )


def stop_forkserver() -> None:
    """Stop the forkserver if this process started one, and wait for it: it would
    otherwise outlive the session by a moment, and its CPU time (and its processes')
    would count for nobody's ``time``."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is not None and hasattr(server, "_stop"):
        server._stop()
