"""A store's event and snapshot rows edited behind the ledger's back, as someone with
access to the database could: SQLite with ``sqlite3``, PostgreSQL with ``psycopg``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit
from uuid import UUID

import psycopg

from contextledger import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult

APPENDED = "contextledger.conversation.MessageAppended"
SUMMARY = "contextledger.conversation.SummaryCreated"
STARTED = "contextledger.conversation.Started"

#: (version, topic, state) of a stored event or snapshot.
Row = tuple[int, str, bytes]


class RawStore:
    """The rows of one conversation in a SQLite file or a PostgreSQL schema."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite:///")
        if self.sqlite:
            self.path = url.removeprefix("sqlite:///")
            self.tables = {"events": "stored_events", "snapshots": "stored_snapshots"}
        else:
            parts = urlsplit(url)
            schema = parse_qs(parts.query)["schema"][0]
            self.dsn = url.split("?")[0]
            self.tables = {
                "events": f'"{schema}".contextledger_events',
                "snapshots": f'"{schema}".contextledger_snapshots',
            }

    def _run(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if self.sqlite:
            with closing(sqlite3.connect(self.path)) as db, db:
                return db.execute(sql.replace("%s", "?"), params).fetchall()
        with psycopg.connect(self.dsn, autocommit=True) as pg:
            cursor = pg.execute(sql.encode(), params)
            return cursor.fetchall() if cursor.description else []

    def _id(self, cid: UUID) -> Any:
        return cid.hex if self.sqlite else cid

    def rows(self, kind: str, cid: UUID) -> list[Row]:
        """(version, topic, state) of the conversation's events or snapshots, in order."""
        found = self._run(
            f"SELECT originator_version, topic, state FROM {self.tables[kind]} "
            "WHERE originator_id = %s ORDER BY originator_version",
            (self._id(cid),),
        )
        return [(int(v), str(t), bytes(s)) for v, t, s in found]

    def version_of(self, cid: UUID, topic: str, nth: int = 0) -> int:
        """The version of the conversation's ``nth`` event of ``topic``."""
        return [v for v, t, _ in self.rows("events", cid) if t == topic][nth]

    def set_state(self, kind: str, cid: UUID, version: int, state: bytes) -> None:
        self._run(
            f"UPDATE {self.tables[kind]} SET state = %s WHERE originator_id = %s AND originator_version = %s",
            (state, self._id(cid), version),
        )

    def edit(self, kind: str, cid: UUID, version: int, change: Callable[[dict[str, Any]], None]) -> None:
        """Change the JSON state of one row in place (``change`` edits the dict)."""
        (state,) = [s for v, _, s in self.rows(kind, cid) if v == version]
        data = json.loads(state)
        change(data)
        self.set_state(kind, cid, version, json.dumps(data).encode())

    def set_topic(self, cid: UUID, version: int, topic: str) -> None:
        self._run(
            f"UPDATE {self.tables['events']} SET topic = %s WHERE originator_id = %s AND originator_version = %s",
            (topic, self._id(cid), version),
        )

    def delete(self, kind: str, cid: UUID, *versions: int) -> None:
        for version in versions:
            self._run(
                f"DELETE FROM {self.tables[kind]} WHERE originator_id = %s AND originator_version = %s",
                (self._id(cid), version),
            )


class Echo:
    """A deterministic summarizer: the messages it was given, joined."""

    model = "echo"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        text = "Said: " + " ".join(str(m.content) for m in request.messages)
        return SummaryResult(text=text, model=self.model, prompt_version="e1")


@dataclass
class Store:
    """A store with a conversation to damage and one to leave alone."""

    url: str
    raw: RawStore
    damaged: UUID
    fine: UUID

    def open(self) -> Ledger:
        return Ledger.open(self.url, summarizer=Echo(), run_policy=False, settings=SETTINGS)


#: Records in clear (``key_scope="store"`` without a master key), so that tests can
#: edit them as JSON; a store under per-subject keys is edited by encrypting the change
#: again, which verify catches alike (tests/e2e/test_cli.py).
SETTINGS = Settings(snapshot_interval=4, key_scope="store")


def chat(ledger: Ledger, turns: int) -> UUID:
    cid = ledger.start("You are A.", policy=ReductionPolicy(trigger_messages=6, keep_messages=2))
    for i in range(turns):
        ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
        ledger.wait_idle()
    return cid


def build_store(url: str) -> Store:
    """Two conversations on ``url``, each with summaries and snapshots, verified clean."""
    with Ledger.open(url, summarizer=Echo(), settings=SETTINGS) as ledger:
        damaged, fine = chat(ledger, 14), chat(ledger, 10)
        assert ledger.verify().ok
    return Store(url, RawStore(url), damaged, fine)
