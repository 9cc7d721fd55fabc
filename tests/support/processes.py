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
from multiprocessing.context import BaseContext

#: Imported once by the forkserver (what every test process would import first).
PRELOAD = [
    "contextledger",
    "contextledger.application",
    "contextledger.infrastructure.persistence",
    "contextledger.infrastructure.readmodels",
    "sqlalchemy",
    "psycopg",
    "psycopg_pool",
    "pytest",
]


def process_context() -> BaseContext:
    """The multiprocessing context of the tests' processes (a preloaded forkserver)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def stop_forkserver() -> None:
    """Stop the forkserver if this process started one, and wait for it: it would
    otherwise outlive the session by a moment, and its CPU time (and its processes')
    would count for nobody's ``time``."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is not None and hasattr(server, "_stop"):
        server._stop()
