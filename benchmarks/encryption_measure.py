"""The measuring side of benchmarks/encryption.py: the configurations compared (no cipher,
one store key, per-subject keys, eventsourcing's pycryptodome cipher, per-subject keys
without the write fence), the tau-bench workload, and the rounds that time append,
``context()``, cold load and rebuild (``measure``) or a conversation's first write against
its later appends (``measure_first``).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import contextledger as cl
from contextledger.infrastructure.readmodel_names import READ_MODEL_NAMES
from contextledger.infrastructure.readmodels import SQLReadModels

POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
CORPORA = Path(
    os.environ.get("CONTEXTLEDGER_CORPORA")
    or Path(__file__).resolve().parents[1] / ".." / "shared" / "corpora"
)
CORPUS = CORPORA / "tools" / "taubench_airline_gpt4o.jsonl"
KEY = base64.b64encode(os.urandom(32)).decode()


@dataclass(frozen=True, eq=False)
class Config:
    name: str
    cipher_key: str | None = None
    key_scope: str = "subject"
    #: Over the store's eventsourcing environment (eventsourcing's own cipher).
    env: dict[str, str] = field(default_factory=dict)
    #: False: the recorder's write fence is taken off (``--fence``'s baseline).
    fenced: bool = True

    def settings(self, url: str) -> cl.Settings:
        options: dict[str, Any] = {"database_url": url, "run_policy": False, "key_scope": self.key_scope}
        if self.cipher_key is not None:
            options["cipher_key"] = self.cipher_key
        return cl.Settings(**options)

    def open(self, url: str) -> cl.Ledger:
        ledger = cl.Ledger(self.settings(url), env=self.env or None)
        if not self.fenced:
            ledger.recorder.fence = None  # type: ignore[attr-defined]
        return ledger


NONE = Config("none", key_scope="store")
STORE = Config("store key", KEY, "store")
SUBJECT = Config("per-subject keys", KEY, "subject")
PYCRYPTODOME = Config(
    "pycryptodome, store key", KEY, "store", {"CIPHER_TOPIC": "eventsourcing.cipher:AESCipher"}
)
CONFIGS = (NONE, STORE, SUBJECT, PYCRYPTODOME)
UNFENCED = Config("per-subject keys, no write fence", KEY, "subject", fenced=False)


def conversations() -> Iterator[list[dict[str, Any]]]:
    """The corpus's conversations, over and over (a fresh copy each time)."""
    with CORPUS.open(encoding="utf-8") as f:
        corpus = [json.loads(line)["messages"] for line in f if line.strip()]
    for messages in itertools.cycle(corpus):
        yield json.loads(json.dumps(messages))


def append_one(ledger: cl.Ledger, messages: list[dict[str, Any]]) -> tuple[uuid.UUID, int, float, float]:
    """Start a conversation with the messages' system prompt and append the rest one by
    one; returns its id, the messages written (the start counts as one) and the start's
    wall and CPU seconds."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    rest = messages[1:] if system is not None else messages
    began, cpu = time.perf_counter(), time.process_time()
    cid = ledger.start(system)
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    for message in rest:
        ledger.append(cid, message)
    return cid, len(rest) + 1, wall, cpu


@dataclass
class Contender:
    """One configuration on one store: its ledger, its conversations, its samples."""

    config: Config
    url: str
    ledger: cl.Ledger
    cids: list[uuid.UUID] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)

    def sample(self, measure: str, value: float, cpu: float | None = None) -> None:
        self.samples.setdefault(measure, []).append(value)
        if cpu is not None:
            self.samples.setdefault(f"{measure} cpu", []).append(cpu)

    def append(self, batch: list[list[dict[str, Any]]]) -> None:
        written, began, cpu = 0, time.perf_counter(), time.process_time()
        starts, starts_cpu = 0.0, 0.0
        for messages in batch:
            cid, n, wall, cpu_start = append_one(self.ledger, messages)
            self.cids.append(cid)
            written += n
            starts, starts_cpu = starts + wall, starts_cpu + cpu_start
        self.sample("start", starts / len(batch) * 1e3, starts_cpu / len(batch) * 1e3)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        self.sample("append", wall / written * 1e6, cpu / written * 1e6)
        later = max(written - len(batch), 1)  # the appends after the starts
        self.sample("later", (wall - starts) / later * 1e6, (cpu - starts_cpu) / later * 1e6)

    def context(self, calls: int) -> None:
        cids, ledger = self.cids, self.ledger
        began, cpu = time.perf_counter(), time.process_time()
        for i in range(calls):
            ledger.context(cids[i % len(cids)])
        self.sample(
            "context", (time.perf_counter() - began) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6
        )

    def cold(self, count: int) -> None:
        with self.config.open(self.url) as fresh:
            began, cpu = time.perf_counter(), time.process_time()
            for cid in self.cids[:count]:
                fresh.context(cid)
            self.sample(
                "cold", (time.perf_counter() - began) / count * 1e3, (time.process_time() - cpu) / count * 1e3
            )

    def rebuild(self) -> None:
        head = self.ledger.recorder.max_notification_id() or 0
        models = SQLReadModels.for_ledger(self.ledger)
        try:
            runner = models.runner(self.ledger, close_with_runner=False)
            began, cpu = time.perf_counter(), time.process_time()
            runner.rebuild_many(READ_MODEL_NAMES)
            self.sample("rebuild", head / (time.perf_counter() - began), head / (time.process_time() - cpu))
        finally:
            models.close()
        self.sample("events", head)


def measure(store: str, urls: dict[Config, str], args: argparse.Namespace) -> list[Contender]:
    source = conversations()
    contenders = [Contender(c, urls[c], c.open(urls[c])) for c in urls]
    try:
        fill = [next(source) for _ in range(args.cold)]
        for contender in contenders:  # the same conversations in every store, not timed
            contender.append(fill)
            contender.samples.clear()
        for round_ in range(args.runs):
            batch = [next(source) for _ in range(args.conversations)]
            order = contenders[round_ % len(contenders) :] + contenders[: round_ % len(contenders)]
            for step in ("append",) if args.fence else ("append", "context", "cold", "rebuild"):
                for contender in order:
                    if step == "append":
                        contender.append(batch)
                    elif step == "context":
                        contender.context(args.contexts)
                    elif step == "cold":
                        contender.cold(args.cold)
                    else:
                        contender.rebuild()
            print(f"  {store}: round {round_ + 1} of {args.runs} done", file=sys.stderr)
    finally:
        for contender in contenders:
            contender.ledger.close()
    return contenders


FIRST_MESSAGE = {
    "role": "user",
    "content": "The customer asked about the order status and the delivery window for the parcel; "
    "the assistant looked it up and answered with the tracking details. " * 2,
}


def measure_first(urls: dict[Config, str], args: argparse.Namespace) -> dict[Config, dict[str, list[float]]]:
    """Per configuration, per round: the median first write and later append (wall, CPU)."""
    ledgers = {c: c.open(url) for c, url in urls.items()}
    samples: dict[Config, dict[str, list[float]]] = {c: {} for c in urls}
    try:
        for ledger in ledgers.values():  # warm: statements, caches, the master key's check
            cid = ledger.start("You are a helpful assistant.")
            ledger.append(cid, FIRST_MESSAGE)
        configs = list(urls)
        for round_ in range(args.runs):
            order = configs[round_ % len(configs) :] + configs[: round_ % len(configs)]
            for config in order:
                ledger, calls = ledgers[config], {"first": [], "later": [], "first cpu": [], "later cpu": []}
                for _ in range(args.conversations):
                    began, cpu = time.perf_counter(), time.thread_time()
                    cid = ledger.start("You are a helpful assistant.")
                    calls["first"].append(time.perf_counter() - began)
                    calls["first cpu"].append(time.thread_time() - cpu)
                    for _ in range(5):
                        began, cpu = time.perf_counter(), time.thread_time()
                        ledger.append(cid, FIRST_MESSAGE)
                        calls["later"].append(time.perf_counter() - began)
                        calls["later cpu"].append(time.thread_time() - cpu)
                for measure, values in calls.items():
                    samples[config].setdefault(measure, []).append(statistics.median(values) * 1e6)
            print(f"  round {round_ + 1} of {args.runs} done", file=sys.stderr)
    finally:
        for ledger in ledgers.values():
            ledger.close()
    return samples
