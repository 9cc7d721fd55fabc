"""How long the viewer's conversation list takes for a few hundred conversations.

    .venv/bin/python benchmarks/viewer_list.py [N] [M]

Builds a SQLite store of N conversations (default 300) of M messages each (default
40), then times, in process, the first request of the list (every conversation is
loaded once, from its latest snapshot), a repeat request (nothing new in the log),
and a request after one more message was appended (one conversation reloaded).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import contextledger as cl
from contextledger.infrastructure.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def main() -> None:
    conversations = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    messages = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'ledger.db'}"
        began = time.perf_counter()
        with cl.Ledger.open(url, run_policy=False) as ledger:
            ids = [ledger.start("You help.") for _ in range(conversations)]
            for cid in ids:
                ledger.extend(cid, [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 8}
                    for i in range(messages)
                ])
        print(f"built {conversations} conversations x {messages} messages "
              f"in {time.perf_counter() - began:.1f} s")
        with cl.Ledger.open(url, run_policy=False) as ledger, TestClient(create_app(ledger)) as client:
            began = time.perf_counter()
            first = client.get("/conversations.json")
            cold = time.perf_counter() - began
            assert first.json()["total"] == conversations
            warm = []
            for _ in range(10):
                began = time.perf_counter()
                client.get("/conversations")
                warm.append(time.perf_counter() - began)
            with cl.Ledger.open(url, run_policy=False) as writer:
                writer.append(ids[0], {"role": "user", "content": "one more"})
            began = time.perf_counter()
            after = client.get("/conversations.json").json()
            grown = time.perf_counter() - began
            assert after["conversations"][0]["id"] == str(ids[0])
    print(f"first list request (loads every conversation): {cold * 1000:.0f} ms")
    print(f"repeat request, HTML page (median of 10):       {statistics.median(warm) * 1000:.0f} ms")
    print(f"after one new message elsewhere:                {grown * 1000:.0f} ms")


if __name__ == "__main__":
    main()
