"""The reporting side of benchmarks/encryption.py: the sections' text made from the
measured samples (the encryption table and its ratios, the first-write and write-fence
tables), the machine's description, the targets and the verdict on each, and the notes on
where the time goes.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
from datetime import UTC, datetime

from encryption_measure import NONE, POSTGRES, PYCRYPTODOME, STORE, SUBJECT, UNFENCED, Config, Contender
from machine_info import cpu_model, load_text, package_versions, postgres_version


def first_report(
    results: dict[str, dict[Config, dict[str, list[float]]]],
    args: argparse.Namespace,
    command: str,
    load_start: tuple[float, ...],
    seconds: float,
) -> list[str]:
    lines = [
        *_header("benchmarks/encryption.py --first", command, load_start),
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


def _header(script: str, command: str, load_start: tuple[float, ...]) -> list[str]:
    """A section's first lines: what wrote it and when, the command, the machine."""
    return [
        f"Written by `{script}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    {command}",
        "",
        *machine(load_start),
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
    "- The wall clock here includes waiting for the store's commits (and, on a loaded machine, for "
    "a core; the load is in the machine line above): in one profiled run under load the process's "
    "CPU time was under half the wall time of context() and a sixth to a tenth of an append's, and "
    "the wall ratios moved by up to 0.45 between runs of this script, the CPU-time ratios less: "
    "they are the steadier reading.",
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
        *_header("benchmarks/encryption.py", command, load_start),
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
        *_header("benchmarks/encryption.py --fence", command, load_start),
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
