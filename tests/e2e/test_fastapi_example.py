"""The FastAPI example under uvicorn, with 50 concurrent HTTP clients against the local
fake OpenAI server, on SQLite and PostgreSQL: no turn is lost, every context is valid
by OpenAI's rules, and the event loop's lag (measured by a probe task) is printed."""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import sys
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextledger.application import Ledger
from contextledger.testing import FakeOpenAIServer
from contextledger.testing import assert_valid_openai_context as assert_valid
from tests.support import processes

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 50
TURNS = 3


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    return sqlite_url if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))


def _uvicorn_main(args: list[str], env: dict[str, str], sock: socket.socket, err: Connection) -> None:
    """``python -m uvicorn ARGS --fd FD`` in this (forked) process: uvicorn's own
    command line, in the checkout, ``env`` its whole environment, serving on ``sock``
    (``FD`` is its descriptor here), its stderr the write end of the pipe ``err``."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(REPO)
    os.dup2(err.fileno(), 2)
    err.close()
    import uvicorn

    sys.argv = ["uvicorn", *args, "--fd", str(sock.fileno())]
    uvicorn.main(sys.argv[1:])


@pytest.fixture
def app_server(database_url: str) -> Iterator[tuple[str, Any]]:
    """uvicorn running the example on a socket bound here (no port race), ready when
    it says so on stderr. uvicorn's command line runs in a process forked from the
    tests' forkserver (tests/support/processes.py: the package and its drivers already
    imported), not a new interpreter; the example reads its settings from that
    process's environment as it starts."""
    with FakeOpenAIServer() as fake:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        env = {**os.environ, "CONTEXTLEDGER_DATABASE_URL": database_url, "OPENAI_BASE_URL": fake.base_url,
               "OPENAI_API_KEY": "sk-test", "CONTEXTLEDGER_EXAMPLE_LEDGER": "async"}
        args = ["--factory", "examples.fastapi_app:create_app", "--log-level", "info", "--no-access-log",
                "--timeout-keep-alive", "300"]
        ctx: Any = processes.process_context()  # typeshed's BaseContext names no Process
        read, write = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_uvicorn_main, args=(args, env, sock, write))
        proc.start()
        write.close()
        stderr = os.fdopen(os.dup(read.fileno()), "r", encoding="utf-8")
        read.close()
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True).start()
        seen: list[str] = []
        try:
            while not any("Application startup complete" in line for line in seen):
                seen.append(lines.get(timeout=120))
            yield f"http://127.0.0.1:{port}", fake
        finally:
            proc.terminate()
            proc.join(60)
            sock.close()
            while not lines.empty():
                seen.append(lines.get())
            print("".join(seen[-80:]))  # the server's log, shown when a test fails


async def _client(http: Any, base: str, n: int) -> list[dict[str, Any]]:
    answers = []
    for turn in range(TURNS):
        response = await http.post(f"{base}/chat/client-{n}", json={"message": f"client {n} turn {turn}"})
        response.raise_for_status()
        answers.append(response.json())
    return answers


async def _run_clients(base: str) -> tuple[list[list[dict[str, Any]]], dict[str, float]]:
    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        results = await asyncio.gather(*(_client(http, base, n) for n in range(CLIENTS)))
        lag = (await http.get(f"{base}/loop-lag")).json()
    return list(results), lag


def test_fifty_concurrent_clients_lose_nothing_and_every_context_is_valid(
    app_server: tuple[str, Any], database_url: str
) -> None:
    base, fake = app_server
    results, lag = asyncio.run(_run_clients(base))
    print(f"\nevent loop lag over {int(lag['samples'])} probes: p50 {lag['p50_ms']:.2f} ms, "
          f"p99 {lag['p99_ms']:.2f} ms, max {lag['max_ms']:.2f} ms ({database_url.split(':')[0]})")
    assert [[a["position"] for a in r] for r in results] == [[1, 3, 5]] * CLIENTS
    assert len([r for r in fake.requests if "client " in str(r.body)]) >= CLIENTS * TURNS
    with Ledger.open(database_url, run_policy=False) as ledger:
        for n in range(CLIENTS):
            transcript = ledger.transcript(f"client-{n}")
            users = [e.message["content"] for e in transcript if e.message["role"] == "user"]
            assert users == [f"client {n} turn {t}" for t in range(TURNS)]
            assert [e.message["role"] for e in transcript] == ["user", "assistant"] * TURNS
            assert_valid(ledger.context(f"client-{n}"))  # type: ignore[arg-type]
            assert ledger.totals(f"client-{n}").usage_records == TURNS
