"""The FastAPI example under load: AsyncLedger against the synchronous Ledger called
from the endpoint, on SQLite and PostgreSQL. Prints a markdown table.

    .venv/bin/python benchmarks/async_bench.py \\
        [--clients 20] [--turns 4]

Each configuration runs ``examples/fastapi_app.py`` under uvicorn (one worker) on
127.0.0.1 against the local fake OpenAI server (which answers after ``--model-delay``
seconds, like a fast model), with ``--clients`` concurrent HTTP clients doing
``--turns`` turns each on their own conversation. Reported: requests per second,
p50/p95 latency of one turn, and the event loop's lag seen by a probe task. Writes
its section of docs/benchmarks.md (``async_bench``) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

from sections import write_section  # noqa: E402  (benchmarks/sections.py)

from contextledger.testing import FakeOpenAIServer  # noqa: E402


@contextmanager
def store(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/bench.db"
        return
    import psycopg

    conn = psycopg.connect(POSTGRES, autocommit=True)
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{POSTGRES}?schema={schema}"
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


@contextmanager
def app(url: str, mode: str, base_url: str) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.set_inheritable(True)
    env = {**os.environ, "CONTEXTLEDGER_DATABASE_URL": url, "OPENAI_BASE_URL": base_url,
           "OPENAI_API_KEY": "sk-bench", "CONTEXTLEDGER_EXAMPLE_LEDGER": mode}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "examples.fastapi_app:create_app",
         "--fd", str(sock.fileno()), "--no-access-log", "--timeout-keep-alive", "300"],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, pass_fds=(sock.fileno(),),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr or ()], daemon=True).start()
    while "Application startup complete" not in lines.get(timeout=120):
        pass
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        proc.terminate()
        proc.wait(60)
        sock.close()
        errors = []
        while not lines.empty():
            line = lines.get()
            if "Error" in line:
                errors.append(line.strip())
        for line in sorted(set(errors))[:5]:
            print(f"server: {line}", file=sys.stderr)


async def load(base: str, clients: int, turns: int) -> tuple[list[float], int, float, dict[str, float]]:
    latencies: list[float] = []
    failed = 0

    async def client(http: httpx.AsyncClient, n: int) -> None:
        for turn in range(turns):
            started = time.perf_counter()
            try:
                response = await http.post(f"{base}/chat/bench-{n}", json={"message": f"turn {turn} of {n}"})
                ok = response.status_code == 200
            except httpx.TransportError:  # the server dropped the connection
                ok = False
            if not ok:
                nonlocal failed
                failed += 1
                continue
            latencies.append(time.perf_counter() - started)

    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=clients)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http, n) for n in range(clients)))
        elapsed = time.perf_counter() - started
        lag = (await http.get(f"{base}/loop-lag")).json()
    return latencies, failed, elapsed, lag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--model-delay", type=float, default=0.05)
    args = parser.parse_args()
    rows = []
    with FakeOpenAIServer(delay=args.model_delay) as fake:
        for kind in ("sqlite", "postgres"):
            for mode in ("async", "sync"):
                with store(kind) as url, app(url, mode, fake.base_url) as base:
                    latencies, failed, elapsed, lag = asyncio.run(load(base, args.clients, args.turns))
                latencies.sort()
                rows.append((
                    kind, "AsyncLedger" if mode == "async" else "Ledger (sync, in the endpoint)",
                    len(latencies) / elapsed, 1000 * statistics.median(latencies),
                    1000 * latencies[int(0.95 * (len(latencies) - 1))], lag["p99_ms"], lag["max_ms"], failed,
                ))
                print(f"done: {kind} {mode}", file=sys.stderr)
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## AsyncLedger vs the synchronous Ledger in an async endpoint", "",
        f"Written by `benchmarks/async_bench.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:", "",
        f"    .venv/bin/python benchmarks/async_bench.py "
        f"--clients {args.clients} --turns {args.turns} --model-delay {args.model_delay:g}", "",
        f"`examples/fastapi_app.py` under uvicorn (one worker), {args.clients} concurrent HTTP clients x "
        f"{args.turns} turns, each on its own conversation; a turn is one POST that appends the "
        f"user message, calls the local fake OpenAI server (it answers after "
        f"{1000 * args.model_delay:.0f} ms, like a fast model) with the context, and appends the "
        "reply. *Ledger (sync)* calls the synchronous `Ledger` from the `async def` endpoint, "
        "blocking the event loop; *AsyncLedger* awaits the same calls. The loop lag is what a "
        "probe task in the app saw (how late a 10 ms sleep woke). "
        f"{os.cpu_count()} cores, shared: load average {load_avg:.1f} at the end of the run.", "",
        "| store | ledger | requests/s | p50 ms | p95 ms | loop lag p99 ms | loop lag max ms | failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, ledger, rps, p50, p95, lag99, lagmax, failed in rows:
        lines.append(f"| {kind} | {ledger} | {rps:.1f} | {p50:.0f} | {p95:.0f} | {lag99:.1f} | {lagmax:.1f} "
                     f"| {failed} |")
    by = {(r[0], r[1].startswith("Async")): r for r in rows}
    lines.append("")
    for kind in ("sqlite", "postgres"):
        if (kind, True) in by and (kind, False) in by:
            sync, native = by[(kind, False)], by[(kind, True)]
            lines.append(f"- {kind}: p95 with AsyncLedger is {sync[4] / native[4]:.1f}x lower than "
                         f"with the sync Ledger in the loop (p50 {sync[3] / native[3]:.1f}x).")
    lines.append("")
    write_section("async_bench", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
