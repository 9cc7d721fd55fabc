"""The *profile* section of benchmarks/write_path.py: where one writer's append spends its
time under cProfile (domain command, encoding, recorder, snapshots) and how many statements
it sends, on a SQLite file and on PostgreSQL (the ledger's recorder and eventsourcing's).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from write_path_common import POLICY, message, open_ledger, pg_url


def section_profile(lines: list[str], tmp: Path, schema: str, n: int) -> None:
    lines += [
        "### Where an append's time goes (one writer, profiled)",
        "",
        f"{n} appends of a ~330-byte message to one conversation under cProfile (which inflates "
        "Python time, so read shares, not absolute figures); the policy thread runs. *domain* is "
        "the command on the aggregate (checks, token count, digest chain, events); *encoding* the "
        "mapper (pydantic dump, JSON); *recorder* the store's insert, its commit and, on "
        "PostgreSQL, the wait for the server (round trips, locks, the commit's fsync); "
        "*snapshot* a snapshot every 50 versions. *statements* counts what the store is sent per "
        "append (SQLite: executes and commits, BEGIN included; PostgreSQL: cursor executes, "
        "statements sent through libpq directly, the pool's pre-ping, BEGIN and COMMIT of "
        "explicit transactions). Round trips, read from the code: the ledger's recorder sends "
        "one prepared INSERT in autocommit on its save connection (1 round trip); "
        "eventsourcing's sends the pre-ping, then BEGIN, SET LOCAL, LOCK TABLE, NOTIFY and "
        "INSERT pipelined up to one sync, then COMMIT (3 round trips, the table lock held from the "
        "second to the end of the third).",
        "",
        "| store | recorder | µs per append (profiled) | domain | encoding | recorder "
        "| of which commit (SQLite) / server wait (PostgreSQL) | snapshot | other "
        "| statements / append |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cases = [
        ("SQLite file", f"sqlite:///{tmp / 'profile.db'}", False),
        ("PostgreSQL", pg_url(schema), True),
        ("PostgreSQL", pg_url(schema + "_lib"), "library"),
    ]
    for label, url, kind in cases:
        library = kind == "library"
        ledger = open_ledger(url, library=library)
        try:
            cid = ledger.start("s", policy=POLICY)
            for i in range(60):
                ledger.append(cid, message(i))
            ledger.wait_idle()
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for i in range(n):
                ledger.append(cid, message(i))
            prof.disable()
            total = time.perf_counter() - t0
            stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]

            def cum(pred: Callable[[str, int, str], bool], stats: Any = stats) -> tuple[float, int]:
                t, c = 0.0, 0
                for (file, line, name), (_cc, nc, _tt, ct, _callers) in stats.items():
                    if pred(file, line, name):
                        t += ct
                        c += nc
                return t, c

            prof_total, _ = cum(
                lambda f, ln, nm: nm == "append" and f.endswith("application/facade/ledger.py")
            )
            domain, _ = cum(lambda f, ln, nm: nm == "_append_to")
            encoding, _ = cum(lambda f, ln, nm: nm == "to_stored_event")
            recorder_t = max(
                (
                    ct
                    for (f, ln, nm), (cc, nc, tt, ct, cl) in stats.items()
                    if nm == "insert_events"
                    and f.endswith(
                        (
                            "infrastructure/persistence/pgrecorder.py",
                            "infrastructure/persistence/sqlite_recorder.py",
                            "eventsourcing/postgres.py",
                            "eventsourcing/sqlite.py",
                        )
                    )
                ),
                default=0.0,
            )
            put, _ = cum(lambda f, ln, nm: nm == "put" and f.endswith("eventsourcing/persistence.py"))
            record, _ = cum(lambda f, ln, nm: nm == "_record" and f.endswith("eventsourcing/application.py"))
            take, _ = cum(lambda f, ln, nm: nm == "take" and f.endswith("domain/conversation.py"))
            snapshot = max(0.0, put - record) + take
            if "sqlite" in url:
                commit, ncommits = cum(lambda f, ln, nm: "commit" in nm and "sqlite3" in nm)
                _, nexecutes = cum(lambda f, ln, nm: "execute" in nm and "sqlite3" in nm)
                nstmts = nexecutes + ncommits
            else:
                # Time the client waits for the server; statements it sends: cursor executes,
                # the pool's pre-ping, BEGIN and COMMIT of explicit transactions.
                commit, _ = cum(lambda f, ln, nm: nm == "wait" and f.endswith("psycopg/connection.py"))
                _, executes = cum(lambda f, ln, nm: nm == "execute" and f.endswith("psycopg/cursor.py"))
                # The save connection's statements: one per ``_write_on`` (a lone event goes
                # through libpq, which the profiler does not see; a batch through a cursor).
                _, direct = cum(lambda f, ln, nm: nm == "_write_on")
                for (f, _ln, nm), (_cc, _nc, _tt, _ct, callers) in stats.items():
                    if nm == "execute" and f.endswith("psycopg/cursor.py"):  # counted as direct
                        executes -= sum(v[1] for (_, _, who), v in callers.items() if who == "_write_on")
                _, pings = cum(lambda f, ln, nm: nm == "check_connection")
                _, transactions = cum(
                    lambda f, ln, nm: nm == "__enter__" and f.endswith("psycopg/transaction.py")
                )
                nstmts = executes + direct + pings + 2 * transactions
            other = prof_total - domain - encoding - recorder_t - snapshot

            def share(x: float, total: float = prof_total) -> str:
                return f"{100 * x / total:.0f}%"

            name = (
                "eventsourcing's (pre-ping)"
                if library
                else ("PostgresConversationRecorder" if "postgres" in url else "SQLiteConversationRecorder")
            )
            lines.append(
                f"| {label} | {name} | {1e6 * total / n:.0f} | {share(domain)} | "
                f"{share(encoding)} | "
                f"{share(recorder_t)} | {share(commit)} | {share(snapshot)} | {share(other)} | "
                f"{nstmts / n:.1f} |"
            )
            print(lines[-1], flush=True)
        finally:
            ledger.close()
    lines.append("")
