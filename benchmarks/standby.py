"""Writers on a PostgreSQL primary with and without audits on its hot standby, the
standby's replay lag meanwhile, and the time a failover takes.

    .venv/bin/python benchmarks/standby.py [--runs 3] [--seconds 4]

Starts servers of its own (tests/support/own_postgres.py): a primary and an
asynchronous ``pg_basebackup -R`` standby. 4 writer threads append, one message per
call, to conversations of their own through one ledger on the primary, for
``--seconds``; in the rounds "with audits" a read-only ledger on the standby verifies
the whole log and reads every transcript in a loop meanwhile. Rounds alternate
(alone, with audits, ...) and the medians are reported, with the ratio of appends/s.
The lag is sampled every 0.1 s (WAL bytes received and not replayed; the primary's
current position against the standby's replayed one). Then a synchronous standby
is made, the primary killed (``kill -9``) under the writers and the standby
promoted: the time from the kill to the promotion's end, and to the first append
acknowledged through a multi-host URL.

Everything runs on one machine: both servers, the writers and the audits share its
cores, so these numbers say what a standby costs the primary here, not on separate
hosts. Writes only its own section of docs/benchmarks.md (between the ``standby``
markers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from sections import write_section  # benchmarks/sections.py (run as a script)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contextledger.application import Ledger, Settings  # noqa: E402
from contextledger.domain.values.errors import StoreError  # noqa: E402
from tests.support.own_postgres import OwnPostgres  # noqa: E402

WRITERS = 4


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url, run_policy=False, connect_timeout=2, write_deadline=5, statement_timeout=30
    )


def _lag(primary: OwnPostgres) -> int:
    """Bytes of the primary's WAL its standby has not replayed yet (the primary's view)."""
    rows = primary.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication"
    )
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _round(
    ledger: Ledger,
    cids: list[UUID],
    seconds: float,
    audit_url: str | None,
    primary: OwnPostgres,
    standby: OwnPostgres,
) -> dict[str, float]:
    stop = threading.Event()
    counts = [0] * len(cids)
    audits = [0]
    lags: list[int] = []

    def write(k: int) -> None:
        while not stop.is_set():
            ledger.append(cids[k], {"role": "user", "content": f"message {counts[k]} of writer {k}"})
            counts[k] += 1

    def audit() -> None:  # other processes, as audits are: verify and replay --all, in turn
        assert audit_url is not None
        while not stop.is_set():
            for command in ("verify", "replay"):
                extra = ["--all"] if command == "replay" else []
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "contextledger.infrastructure.cli",
                        "--database",
                        audit_url,
                        command,
                        *extra,
                    ],
                    check=True,
                    capture_output=True,
                    cwd=REPO,
                )
            audits[0] += 1

    def sample() -> None:
        while not stop.is_set():
            lags.append(_lag(primary))
            time.sleep(0.1)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(len(cids))]
    threads.append(threading.Thread(target=sample))
    if audit_url is not None:
        threads.append(threading.Thread(target=audit))
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    return {
        "appends_per_s": sum(counts) / elapsed,
        "audit_passes": audits[0],
        "lag_median": statistics.median(lags) if lags else 0.0,
        "lag_max": max(lags, default=0),
    }


def _failover(primary: OwnPostgres) -> dict[str, float]:
    standby = OwnPostgres.standby_of(primary, synchronous=True)
    try:
        primary.create_database("failover")
        standby.replayed(primary)
        url = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/failover"
            "?target_session_attrs=read-write"
        )
        with Ledger.open(settings=_settings(url)) as ledger:
            cid = ledger.start("You answer questions.")
            for i in range(20):
                ledger.append(cid, {"role": "user", "content": f"before {i}"})
            killed = time.monotonic()
            primary.kill()
            standby.promote()
            promoted = time.monotonic()
            while True:
                try:
                    ledger.append(cid, {"role": "user", "content": "after"}, client_message_id="after")
                    break
                except StoreError:
                    time.sleep(0.02)
            back = time.monotonic()
        return {"promote_s": promoted - killed, "first_append_s": back - killed}
    finally:
        standby.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--no-write", action="store_true", help="print the section only")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    primary = OwnPostgres()
    standby: OwnPostgres | None = None
    results: dict[str, list[dict[str, float]]] = {"alone": [], "with audits": []}
    try:
        primary.start()
        standby = OwnPostgres.standby_of(primary)
        url = primary.create_database("bench")
        standby.replayed(primary)
        with Ledger.open(settings=_settings(url)) as ledger:
            cids = [ledger.start("You answer questions.") for _ in range(WRITERS)]
            audited = ledger.start("You answer questions.")
            for i in range(300):
                ledger.append(audited, {"role": "user", "content": f"audited message {i}"})
            standby.replayed(primary)
            for _ in range(args.runs):
                results["alone"].append(_round(ledger, cids, args.seconds, None, primary, standby))
                results["with audits"].append(
                    _round(ledger, cids, args.seconds, standby.database_url("bench"), primary, standby)
                )
        standby.close()
        standby = None
        failover = _failover(primary)
    finally:
        if standby is not None:
            standby.close()
        primary.close()

    def median(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[kind])

    alone, audits = median("alone", "appends_per_s"), median("with audits", "appends_per_s")
    lines = [
        "## Hot standby: writers with audits on the standby, its lag, a failover",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `benchmarks/standby.py --runs {args.runs} "
        f"--seconds {args.seconds:g}` on this machine ({os.cpu_count()} cores, "
        f"load average {load} at the start): a primary and a standby of their own on one machine, "
        "4 writer threads in one process, the audits `contextledger verify` and `replay --all` on the "
        "standby, one after the other in processes of their own, rounds alternating; medians of the "
        "rounds. Both servers, the writers and the audits share "
        "the machine's cores: on separate hosts the standby's audits would not take the primary's.",
        "",
        "| round | appends/s on the primary | audit passes (verify, replay --all) "
        "| standby lag, median | max |",
        "|---|---|---|---|---|",
    ]
    for kind in ("alone", "with audits"):
        lines.append(
            f"| {kind} | {median(kind, 'appends_per_s'):,.0f} | {median(kind, 'audit_passes'):.0f} | "
            f"{median(kind, 'lag_median') / 1024:,.1f} KiB | {median(kind, 'lag_max') / 1024:,.1f} KiB |"
        )
    lines += [
        "",
        f"Writers with audits running on the standby: {audits / alone:.2f}x the appends/s of writers alone.",
        "",
        f"Failover (synchronous standby, `kill -9` of the primary, `pg_ctl promote`): promoted "
        f"{failover['promote_s']:.2f} s after the kill; the first append through the multi-host URL "
        f"acknowledged {failover['first_append_s']:.2f} s after the kill.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("standby", text.split("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
