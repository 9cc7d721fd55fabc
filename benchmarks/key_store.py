"""What keeping the keys apart from the log costs an append (``Settings.key_store``).

    .venv/bin/python benchmarks/key_store.py [--rounds 9] [--appends 200] [--stores sqlite,postgres]
    .venv/bin/python benchmarks/key_store.py --default-only --json   # one line of figures

Two configurations per store, each on a store of its own, measured in one run, in an
order rotated from round to round: the key table in the event store (the default) and
in a key store (another SQLite file, attached to the event store's connections; another
PostgreSQL database on the same server, made by the script and dropped afterwards,
whose key rows each write holds ``FOR KEY SHARE`` across its insert). Each round
appends ``--appends`` messages one call each to a conversation of its own (a subject of
its own, its key made before the timing starts), and records wall and CPU
(``time.process_time``) microseconds per append. No master key: the cost measured is
that of the fence and the key store, not of unwrapping. The figures are per-round
medians, the ratio the median of per-round ratios.

``--default-only --json`` runs the default configuration alone and prints its figures
as one JSON line: run it from two checkouts in turn (``PYTHONPATH=other/src``) to
compare the default path before and after a change.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

import contextledger as cl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sections import write_section

POSTGRES = os.environ.get(
    "CONTEXTLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
).split("?")[0]
CONFIGS = ("keys in the store", "key store")


@contextmanager
def stores(kind: str, work: str) -> Iterator[dict[str, tuple[str, str | None]]]:
    """Each configuration's (event store, key store) URLs on ``kind``."""
    if kind == "sqlite":
        yield {
            CONFIGS[0]: (f"sqlite:///{work}/in.db", None),
            CONFIGS[1]: (f"sqlite:///{work}/apart.db", f"sqlite:///{work}/keys.db"),
        }
        return
    tag = uuid.uuid4().hex[:8]
    schemas, database = [f"bench_ks_{tag}_{n}" for n in range(2)], f"bench_keys_{tag}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        for schema in schemas:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        yield {
            CONFIGS[0]: (f"{POSTGRES}?schema={schemas[0]}", None),
            CONFIGS[1]: (f"{POSTGRES}?schema={schemas[1]}", f"{POSTGRES.rsplit('/', 1)[0]}/{database}"),
        }
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')


def one_round(ledger: cl.Ledger, appends: int) -> tuple[float, float]:
    """Wall and CPU µs per append of ``appends`` messages to a new conversation."""
    cid = ledger.start("You help.", subject=f"s-{uuid.uuid4().hex[:8]}")
    ledger.append(cid, {"role": "user", "content": "warm-up"})
    began, cpu = time.perf_counter(), time.process_time()
    for n in range(appends):
        ledger.append(cid, {"role": "user", "content": f"message {n} of a round, a line of ordinary length"})
    return (time.perf_counter() - began) / appends * 1e6, (time.process_time() - cpu) / appends * 1e6


def measure(
    urls: dict[str, tuple[str, str | None]], rounds: int, appends: int
) -> dict[str, list[tuple[float, float]]]:
    ledgers = {
        name: cl.Ledger.open(
            settings=cl.Settings(database_url=url, run_policy=False, **({"key_store": keys} if keys else {}))
        )
        for name, (url, keys) in urls.items()
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}
    try:
        names = list(urls)
        for name in names:
            one_round(ledgers[name], 20)  # warm
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name].append(one_round(ledgers[name], appends))
    finally:
        for ledger in ledgers.values():
            ledger.close()
    return samples


def median(values: list[tuple[float, float]], i: int) -> float:
    return statistics.median(v[i] for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--default-only", action="store_true", help="the default configuration alone")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave the docs alone")
    args = parser.parse_args()
    load = os.getloadavg()
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}
    with tempfile.TemporaryDirectory() as work:
        for kind in args.stores.split(","):
            with stores(kind, work) as urls:
                if args.default_only:
                    urls = {CONFIGS[0]: urls[CONFIGS[0]]}
                results[kind] = measure(urls, args.rounds, args.appends)
    if args.json:
        figures = {
            kind: {name: [median(s, 0), median(s, 1)] for name, s in by.items()}
            for kind, by in results.items()
        }
        print(json.dumps({"load": load, "figures": figures}))
        return
    lines = [
        f"Written by `benchmarks/key_store.py {' '.join(sys.argv[1:])}`, load average "
        f"{load[0]:.1f} at the start ({os.cpu_count()} cores). {args.rounds} rounds of "
        f"{args.appends} appends, one call each, per configuration, interleaved; per-round medians, "
        "wall (CPU) µs per append.",
        "",
        "| store | keys in the store | key store | key store / in the store (per-round median) |",
        "|---|---|---|---|",
    ]
    for kind, by in results.items():
        base, apart = by[CONFIGS[0]], by[CONFIGS[1]]
        ratios = [a[0] / b[0] for a, b in zip(apart, base, strict=True)]
        cpu = [a[1] / b[1] for a, b in zip(apart, base, strict=True) if b[1] > 0]
        store = "SQLite file" if kind == "sqlite" else "PostgreSQL"
        lines.append(
            f"| {store} | {median(base, 0):,.0f} ({median(base, 1):,.0f}) "
            f"| {median(apart, 0):,.0f} ({median(apart, 1):,.0f}) "
            f"| {statistics.median(ratios):.2f}x ({statistics.median(cpu):.2f}x) |"
        )
    lines += [
        "",
        "SQLite: the fence's statement reads the attached key file's table (one more database in the "
        "statement: its lock and its pages). PostgreSQL: two more round trips per write, to the key "
        "database (`BEGIN` with the locking `SELECT`, then `COMMIT`) around the insert.",
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_section("key-store", ["## Keys apart from the log (benchmarks/key_store.py)", "", *lines])


if __name__ == "__main__":
    main()
