"""What encryption at rest costs the ledger: no cipher, one store key, per-subject keys.

    .venv/bin/python benchmarks/encryption.py \\
        [--runs 7] [--conversations 6] [--cold 40] [--contexts 200] [--stores sqlite,postgres]

Configurations, each on its own store (a SQLite file; a schema of its own in
PostgreSQL's database ``test``), all measured in one run:

- *none*: no encryption at all: no ``cipher_key`` and ``key_scope="store"`` (with the
  default ``key_scope="subject"`` a store without a cipher key still encrypts every
  event under an unwrapped per-subject data key: not a baseline);
- *store key*: ``cipher_key`` with ``key_scope="store"`` (every record under the one key,
  OpenSSL AES-GCM);
- *per-subject*: ``cipher_key`` with the default ``key_scope="subject"`` (a data key per
  conversation, wrapped in the store's key table);
- *pycryptodome*: eventsourcing's ``AESCipher`` as ``CIPHER_TOPIC`` under the one key
  (what stores were written with before the OpenSSL cipher).

Workload: tau-bench airline conversations (``../shared/corpora/tools``; a system prompt,
then user, assistant, tool-call and tool messages), each started and appended one
message per call. Each store first gets ``--cold`` conversations (not timed); then
``--runs`` rounds, in each of which every configuration, in an order rotated from round
to round, does in turn:

- *append*: ``--conversations`` more conversations, ``start`` and every ``append``
  timed, µs per message (the start counts as one: it makes the subject's key), and the
  starts alone, ms per conversation;
- *context()*: ``--contexts`` calls over the ledger's conversations, warm, µs per call;
- *cold load*: a new ``Ledger`` on the same store (empty caches: conversations, keys),
  then ``context()`` of ``--cold`` conversations, ms per conversation (the open is not
  counted);
- *rebuild*: all four read models in one pass (what ``contextledger rebuild`` runs),
  events of the log per second.

The table shows the medians over the rounds, and the ratios of per-subject keys to no
encryption and to the store key, whose targets are: append and ``context()`` at most 1.3x
the unencrypted path, cold load at most 1.1x. Writes its section of docs/benchmarks.md
(``encryption``) and prints it.

``--first`` measures a conversation's first write against its later ones instead: in each
round every configuration, in turn, starts ``--conversations`` conversations and appends
five messages to each; each call timed on its own (wall and CPU). With per-subject keys
the first write (``start``) makes the subject's key: its row is written with the
``Started`` record, in its transaction on SQLite and in its statement on PostgreSQL
(``infrastructure/keys/new_keys.py``, ``infrastructure/persistence/pgkeyrows.py``); the store
key's start, which makes no key, shows what a start costs beside an append anyway. It
writes its own section (``first-write``); target: first at most 1.3x a later append.

``--fence`` measures the write fence instead (``infrastructure/keys/key_fence.py``): per-subject
keys with the fence (each insert checks, and on PostgreSQL key-share-locks, the key rows its
records name) against the same configuration with the recorder's fence taken off, the
*append* step only, in rounds alternating which goes first; it writes its own section
(``write-fence``).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import contextledger as cl
from contextledger.infrastructure.readmodel_names import READ_MODEL_NAMES
from contextledger.infrastructure.readmodels import SQLReadModels

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_model, load_text, package_versions, postgres_version
from sections import write_section

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


def first_report(
    results: dict[str, dict[Config, dict[str, list[float]]]],
    args: argparse.Namespace,
    command: str,
    load_start: tuple[float, ...],
    seconds: float,
) -> list[str]:
    lines = [
        f"Written by `benchmarks/encryption.py --first` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(load_start),
        "",
        "A conversation's first write against its later appends. Each configuration on its own "
        f"store; {args.runs} rounds, the configurations taking turns at going first, in each of which "
        f"every configuration starts {args.conversations} conversations (a system prompt) and appends "
        "five ~330-byte messages to each, every call timed on its own; per round the median first "
        "write (the `start`) and the median later append, then the medians over the rounds (µs; in "
        "brackets, the calling thread's CPU time). *ratio*: the median of the per-round ratios. With "
        "per-subject keys the first write makes the conversation's data key: its row is inserted with "
        "the `Started` record, in its transaction on SQLite and in its very statement on PostgreSQL "
        "(one commit; `infrastructure/keys/new_keys.py`, `infrastructure/persistence/pgkeyrows.py`). "
        "With the store key no key is made: its "
        "ratio is what a start costs beside an append anyway. *none* is a store opened without a "
        "cipher key, whose per-subject keys are kept unwrapped. Target: with per-subject keys, the "
        "first write at most 1.3x a later append.",
        "",
        "| store | configuration | first write µs | later append µs | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for store, by in results.items():
        for config, samples in by.items():
            walls = [f / la for f, la in zip(samples["first"], samples["later"], strict=True)]
            cpus = [f / la for f, la in zip(samples["first cpu"], samples["later cpu"], strict=True)]
            m = {k: statistics.median(v) for k, v in samples.items()}
            lines.append(
                f"| {store} | {config.name} | {m['first']:,.0f} ({m['first cpu']:,.0f}) "
                f"| {m['later']:,.0f} ({m['later cpu']:,.0f}) "
                f"| {statistics.median(walls):.2f} ({statistics.median(cpus):.2f}) |"
            )
    lines += ["", f"Run time: {seconds:.0f} s."]
    return lines


def machine(load_start: tuple[float, ...]) -> list[str]:
    packages = package_versions(("eventsourcing", "cryptography", "pycryptodome", "psycopg"))
    return [
        f"- machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} cores; "
        f"load average at the start: {load_text(load_start)}, "
        f"at the end: {load_text(os.getloadavg())} (the machine is shared)",
        f"- Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"PostgreSQL {postgres_version(POSTGRES)}; {packages}",
    ]


def median(contender: Contender, measure: str) -> float:
    return statistics.median(contender.samples[measure])


def ratio(top: Contender, bottom: Contender, measure: str) -> str:
    """The median of the per-round ratios ``top`` / ``bottom`` (time per unit: a rate's
    ratio is inverted)."""
    pairs = zip(top.samples[measure], bottom.samples[measure], strict=True)
    ratios = [y / x if measure.startswith("rebuild") else x / y for x, y in pairs]
    return f"{statistics.median(ratios):.2f}"


#: Per-subject keys against no encryption: the most each measure may cost.
TARGETS = {"append": 1.3, "context": 1.3, "cold": 1.1}
LABELS = {"append": "append", "context": "context()", "cold": "cold load"}


#: Where the time goes, read with cProfile and CPU time beside this script's runs.
NOTES = [
    "Where the time goes (cProfile and CPU time on the same workload, SQLite file):",
    "",
    "- The wall clock here is largely waiting, for a core (the load average was several times the "
    "2 cores) and for the store's commits: the process's CPU time was under half the wall time of "
    "context(), and a sixth to a tenth of an append's; the wall ratios moved by up to 0.45 between "
    "runs of this script, the CPU-time ratios less: they are the steadier reading.",
    "- *append*: per event, the mapper adds AES-GCM under the conversation's data key, about 3 µs "
    "(`benchmarks/cipher_cost.py`: encode + decode of a message event 29 µs without a cipher, 26 "
    "with the store key, 31 with a subject key), and the key, cached after its first use, is one "
    "dict lookup: appends alone showed no difference between the store key and per-subject keys "
    "beyond the noise (±15%). What per-subject keys add is in the *start*: a new data key is made "
    "and wrapped under the master key, and its row is inserted with the `Started` record, in the "
    "same transaction (SQLite) or statement (PostgreSQL): no lookup in the key table, no commit of "
    "its own.",
    "- *context()* on a warm ledger decrypts no stored event: no cipher is on its path.",
    "- *cold load*: every event is decrypted once, and each conversation's key is unwrapped once; "
    "its row comes with the statement that reads the conversation's events (a query of its own only "
    "for a conversation loaded from a snapshot, which is decrypted first); the rest of the load "
    "(fold, validation) is the same work in all four.",
    "- *rebuild*: besides decrypting every event, the read models seal what they store of it "
    "(message and summary text, conversation keys) when the store has a key: one encryption per "
    "value.",
    "- eventsourcing's pycryptodome `AESCipher` costs about 235 µs per encrypt + decrypt of 330 "
    "bytes against 3 µs for the OpenSSL cipher (`cipher_cost.py`): about twice the CPU of a cold "
    "load or a rebuild, and a third more on append.",
]


def verdicts(results: dict[str, list[Contender]]) -> list[str]:
    """One line per store: each target, met or not, on the wall clock and on CPU time."""
    lines = []
    for store, contenders in results.items():
        by = {c.config: c for c in contenders}
        parts = []
        for m, limit in TARGETS.items():
            wall, cpu = (
                float(ratio(by[SUBJECT], by[NONE], m)),
                float(ratio(by[SUBJECT], by[NONE], f"{m} cpu")),
            )
            met = "met" if max(wall, cpu) <= limit else ("met on CPU time" if cpu <= limit else "missed")
            parts.append(f"{LABELS[m]} {wall:.2f}x (CPU {cpu:.2f}x) against at most {limit:g}x: {met}")
        old = float(ratio(by[PYCRYPTODOME], by[STORE], "cold cpu"))
        lines.append(
            f"- {store}, per-subject keys against no encryption: {'; '.join(parts)}. "
            f"eventsourcing's pycryptodome cipher costs {old:.2f}x the OpenSSL one's CPU time "
            "on a cold load."
        )
    return lines


def report(
    results: dict[str, list[Contender]],
    args: argparse.Namespace,
    command: str,
    load_start: tuple[float, ...],
    seconds: float,
) -> list[str]:
    lines = [
        f"Written by `benchmarks/encryption.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(load_start),
        "",
        "Four configurations, each on its own store (a SQLite file; PostgreSQL, a schema each): no "
        'encryption at all (no `cipher_key`, `key_scope="store"`: no key table, every record in '
        'clear); a cipher key with `key_scope="store"` (one key, OpenSSL AES-GCM); the default '
        '`key_scope="subject"` (a data key per conversation, wrapped in the store\'s key table); and '
        "eventsourcing's pycryptodome `AESCipher` under the one key (`CIPHER_TOPIC`, how stores were "
        "encrypted before; the read models' sealed values still use OpenSSL there). "
        f"Workload: tau-bench airline conversations from the corpora (tool calls and results included). "
        f"Each store first gets {args.cold} conversations, untimed; then {args.runs} rounds, the "
        "configurations' order rotated from round to round, each configuration in turn doing: "
        f"*append*, {args.conversations} more conversations started and appended one message per call "
        "(µs per message, the start counted as one message; with per-subject keys the start makes the "
        "conversation's key, written in its own transaction: the next column shows the starts alone); "
        f"*context()*, {args.contexts} calls over the ledger's conversations, warm "
        f"(µs per call); *cold load*, a new `Ledger` on the store (empty caches: conversations and keys) "
        f"then `context()` of {args.cold} conversations (ms per conversation, the open not counted); "
        "*rebuild*, the four read models in one pass as `contextledger rebuild` runs them (events of "
        "the log per second; the read models' text is sealed too when there is a key). Medians over "
        "the rounds; in brackets, the same measured in this process's CPU time (user + system), which "
        "the other work on a shared machine moves less than the wall clock.",
        "",
        "| store | configuration | append µs/message | of which start ms/conversation "
        "| context() µs/call | cold load ms/conversation | rebuild events/s | events in the log |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for store, contenders in results.items():
        for c in contenders:
            lines.append(
                f"| {store} | {c.config.name} | {median(c, 'append'):,.0f} ({median(c, 'append cpu'):,.0f}) "
                f"| {median(c, 'start'):.2f} ({median(c, 'start cpu'):.2f}) "
                f"| {median(c, 'context'):,.1f} ({median(c, 'context cpu'):,.1f}) "
                f"| {median(c, 'cold'):.2f} ({median(c, 'cold cpu'):.2f}) "
                f"| {median(c, 'rebuild'):,.0f} ({median(c, 'rebuild cpu'):,.0f}) "
                f"| {int(max(c.samples['events'])):,} |"
            )
    lines += [
        "",
        "Ratios (medians of the per-round ratios, each against the baseline measured in the same round; "
        "rebuild as time per event, so above 1 is slower everywhere). Targets for per-subject keys "
        "against no encryption: append and context() at most 1.3x, cold load at most 1.1x.",
        "",
        "| store | ratio | append | start | context() | cold load | rebuild (time per event) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for store, contenders in results.items():
        by = {c.config: c for c in contenders}
        for label, top, bottom in (
            ("per-subject / none", SUBJECT, NONE),
            ("per-subject / store key", SUBJECT, STORE),
            ("store key / none", STORE, NONE),
            ("pycryptodome / store key (OpenSSL)", PYCRYPTODOME, STORE),
        ):
            cells = []
            for m in ("append", "start", "context", "cold", "rebuild"):
                cells.append(f"{ratio(by[top], by[bottom], m)} ({ratio(by[top], by[bottom], f'{m} cpu')})")
            lines.append(f"| {store} | {label} | {' | '.join(cells)} |")
    lines += ["", *verdicts(results), "", *NOTES, "", f"Run time: {seconds:.0f} s."]
    return lines


def fence_report(
    results: dict[str, list[Contender]],
    args: argparse.Namespace,
    command: str,
    load_start: tuple[float, ...],
    seconds: float,
) -> list[str]:
    lines = [
        f"Written by `benchmarks/encryption.py --fence` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(load_start),
        "",
        "What the write fence costs (`infrastructure/keys/key_fence.py`: each insert of a record under data "
        "keys checks in the same statement that the key rows it names still hold their wrapped keys, "
        "on PostgreSQL taking them `FOR KEY SHARE`). Per-subject keys with the fence against the same "
        "configuration with the recorder's fence taken off, each on its own store; the workload and "
        f"the *append* step of the encryption section: {args.cold} conversations first, untimed, then "
        f"{args.runs} rounds of {args.conversations} conversations started and appended one message "
        "per call, the two taking turns at going first. Medians over the rounds, µs per message (the "
        "start counted as one); in brackets, this process's CPU time.",
        "",
        "*later appends*: the same without the starts (a start makes the conversation's key: "
        "fenced, its row rides in the transaction of the first record, which the unfenced "
        "recorder, with no fence to check it, does not do: the starts favour the fenced side there).",
        "",
        "| store | append µs/message, fenced | unfenced | fenced / unfenced (per-round median) "
        "| later appends µs, fenced | unfenced | fenced / unfenced |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for store, contenders in results.items():
        by = {c.config: c for c in contenders}
        fenced, bare = by[SUBJECT], by[UNFENCED]
        lines.append(
            f"| {store} | {median(fenced, 'append'):,.0f} ({median(fenced, 'append cpu'):,.0f}) "
            f"| {median(bare, 'append'):,.0f} ({median(bare, 'append cpu'):,.0f}) "
            f"| {ratio(fenced, bare, 'append')} ({ratio(fenced, bare, 'append cpu')}) "
            f"| {median(fenced, 'later'):,.0f} ({median(fenced, 'later cpu'):,.0f}) "
            f"| {median(bare, 'later'):,.0f} ({median(bare, 'later cpu'):,.0f}) "
            f"| {ratio(fenced, bare, 'later')} ({ratio(fenced, bare, 'later cpu')}) |"
        )
    lines += ["", f"Run time: {seconds:.0f} s."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--conversations", type=int, default=6, help="conversations appended per round")
    parser.add_argument("--cold", type=int, default=40, help="conversations loaded cold (and filled first)")
    parser.add_argument("--contexts", type=int, default=200, help="warm context() calls per round")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave the docs alone")
    parser.add_argument(
        "--fence", action="store_true", help="the write fence against none, on append (its own section)"
    )
    parser.add_argument(
        "--first",
        action="store_true",
        help="a conversation's first write against later appends (own section)",
    )
    args = parser.parse_args()
    configs = (SUBJECT, UNFENCED) if args.fence else (SUBJECT, STORE, NONE) if args.first else CONFIGS
    load_start, began = os.getloadavg(), time.perf_counter()
    results: dict[str, list[Contender]] = {}
    firsts: dict[str, dict[Config, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory() as work:
        for store in args.stores.split(","):
            print(store, file=sys.stderr)
            if store == "sqlite":
                urls = {c: f"sqlite:///{work}/{i}.db" for i, c in enumerate(configs)}
                if args.first:
                    firsts["SQLite file"] = measure_first(urls, args)
                else:
                    results["SQLite file"] = measure(store, urls, args)
                continue
            schemas = {c: f"bench_cipher_{uuid.uuid4().hex[:8]}" for c in configs}
            with psycopg.connect(POSTGRES, autocommit=True) as admin:
                for schema in schemas.values():
                    admin.execute(f'CREATE SCHEMA "{schema}"')
            try:
                urls = {c: f"{POSTGRES}?schema={s}" for c, s in schemas.items()}
                if args.first:
                    firsts["PostgreSQL"] = measure_first(urls, args)
                else:
                    results["PostgreSQL"] = measure(store, urls, args)
            finally:
                with psycopg.connect(POSTGRES, autocommit=True) as admin:
                    for schema in schemas.values():
                        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    command = ".venv/bin/python benchmarks/encryption.py "
    command += " ".join(sys.argv[1:])
    if args.first:
        lines = first_report(firsts, args, command.strip(), load_start, time.perf_counter() - began)
        title, section = "## A conversation's first write (benchmarks/encryption.py --first)", "first-write"
    elif args.fence:
        lines = fence_report(results, args, command.strip(), load_start, time.perf_counter() - began)
        title, section = "## The write fence of erasure (benchmarks/encryption.py --fence)", "write-fence"
    else:
        lines = report(results, args, command.strip(), load_start, time.perf_counter() - began)
        title, section = "## Encryption at rest: per-subject keys (benchmarks/encryption.py)", "encryption"
    print("\n".join(lines))
    if not args.no_write:
        write_section(section, [title, "", *lines])


if __name__ == "__main__":
    main()
