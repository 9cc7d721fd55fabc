"""Opening an event store: the file checks of SQLite, and the read-only factories.

``Database.persistence_env`` names one of these factories:

- ``SQLiteStoreFactory`` -- the SQLite store (``SQLiteConversationFactory``) whose file
  is checked before SQLite opens it: a directory, a file that is not a SQLite
  database, a file that cannot be read, or any other error of sqlite3 while the
  tables are made is a ``StoreError`` naming the path (sqlite3's own is chained);
- ``ReadOnlySQLiteFactory`` -- the same file opened ``mode=ro``: a missing file is never
  created (``SchemaMissingError``), no table is created, journal mode is left alone,
  and SQLite itself refuses any write;
- ``ReadOnlyPostgresFactory`` -- no ``CREATE``; the schema and the tables must be there
  (``SchemaMissingError`` names what is not), and every session is
  ``default_transaction_read_only``, so the server refuses any write. A role with
  nothing but ``USAGE`` on the schema and ``SELECT`` on the tables can read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, PersistenceError

from contextledger.domain.values.errors import SchemaMissingError, StoreError
from contextledger.infrastructure.keys.key_factory import SubjectKeysFactory
from contextledger.infrastructure.persistence.pgrecorder import PostgresConversationFactory
from contextledger.infrastructure.persistence.sqlite_files import ReadOnlyLeftovers, check_sqlite_file
from contextledger.infrastructure.persistence.sqlite_recorder import SQLiteConversationFactory

__all__ = [
    "READ_ONLY_POSTGRES_TOPIC",
    "READ_ONLY_SQLITE_TOPIC",
    "SQLITE_PATH",
    "SQLITE_TOPIC",
    "ReadOnlyPostgresFactory",
    "ReadOnlySQLiteFactory",
    "SQLiteStoreFactory",
]

SQLITE_TOPIC = "contextledger.infrastructure.persistence.stores:SQLiteStoreFactory"
READ_ONLY_SQLITE_TOPIC = "contextledger.infrastructure.persistence.stores:ReadOnlySQLiteFactory"
READ_ONLY_POSTGRES_TOPIC = "contextledger.infrastructure.persistence.stores:ReadOnlyPostgresFactory"

#: The environment key naming the SQLite file as the operator gave it (its
#: ``SQLITE_DBNAME`` is a ``file:`` URI when read-only; ``Database.persistence_env``).
SQLITE_PATH = "CL_SQLITE_PATH"


def _sqlite_error(exc: BaseException, path: str, url: str) -> StoreError:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreError(f"cannot open the SQLite database {path}: {text}", url=url)


class SQLiteStoreFactory(SubjectKeysFactory, SQLiteConversationFactory):
    """``SQLiteConversationFactory`` with its file checked first and sqlite3's errors,
    while it opens and makes its tables, raised as ``StoreError`` naming the path; its
    mapper gets the store's data-subject key table (``subject_mapper``)."""

    must_exist = False

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.path = self.env.get(SQLITE_PATH) or ""
        self.url = f"sqlite:///{self.path}"
        if self.path:
            check_sqlite_file(Path(self.path), must_exist=self.must_exist, url=self.url)

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        try:
            recorder = super().aggregate_recorder(purpose)
            self._check_table(getattr(recorder, "events_table_name", f"stored_{purpose}"))
        except (sqlite3.Error, PersistenceError) as exc:
            raise _sqlite_error(exc, self.path, self.url) from exc
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        try:
            recorder = super().application_recorder()
            self._check_table(getattr(recorder, "events_table_name", "stored_events"))
        except (sqlite3.Error, PersistenceError) as exc:
            raise _sqlite_error(exc, self.path, self.url) from exc
        return recorder

    def _check_table(self, table: str) -> None:
        """Nothing to check where the tables were just made."""


class ReadOnlySQLiteFactory(SQLiteStoreFactory):
    """The SQLite store opened ``mode=ro``: nothing created, nothing written."""

    must_exist = True

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        # The library turns a file's journal to WAL on its first connection: a write.
        # A store made by contextledger is in WAL already; a read-only one stays as is.
        self.datastore.pool.is_journal_mode_wal = True
        self.leftovers = ReadOnlyLeftovers(Path(self.path)) if self.path else None

    def close(self) -> None:
        super().close()
        if self.leftovers is not None:
            self.leftovers.tidy()

    def env_create_table(self) -> bool:
        return False

    def _check_table(self, table: str) -> None:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            found = cursor.fetchone()
        if found is None:
            raise SchemaMissingError(
                f"the SQLite file {self.path} has no table {table}: it is not a contextledger "
                "store (check the path, or create the store with `contextledger init`)",
                url=self.url,
                table=table,
                cause="schema_missing",
            )


class ReadOnlyPostgresFactory(PostgresConversationFactory):
    """The PostgreSQL store without ``CREATE``, its sessions read-only."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        kwargs = self.datastore.pool.kwargs
        assert isinstance(kwargs, dict)
        options = str(kwargs.get("options") or "")
        kwargs["options"] = f"{options} -c default_transaction_read_only=on".strip()

    def env_create_table(self) -> bool:
        return False

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        recorder = super().aggregate_recorder(purpose)
        self._check_table(getattr(recorder, "events_table_name", ""))
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        recorder = super().application_recorder()
        self._check_table(getattr(recorder, "events_table_name", ""))
        return recorder

    def _check_table(self, table: str) -> None:
        schema = self.datastore.schema or "public"
        where = self.env.get("POSTGRES_DBNAME") or ""
        url = (
            f"postgresql://{self.env.get('POSTGRES_USER')}@{self.env.get('POSTGRES_HOST')}:"
            f"{self.env.get('POSTGRES_PORT')}/{where}?schema={schema}"
        )  # no password
        try:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(s)s) AS schema, "
                    "EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = %(s)s AND tablename = %(t)s) "
                    "AS tbl",
                    {"s": schema, "t": table},
                )
                row = curs.fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the PostgreSQL catalog: {exc}", url=url) from exc
        assert row is not None
        if not row["schema"]:
            raise SchemaMissingError(
                f"the PostgreSQL database {where!r} has no schema {schema!r} (check ?schema= "
                "in the URL, or create the store with `contextledger init`)",
                url=url,
                schema=schema,
                cause="schema_missing",
            )
        if not row["tbl"]:
            raise SchemaMissingError(
                f"the PostgreSQL database {where!r} has no table {schema}.{table}: it is not a "
                "contextledger store (check the URL, or create the store with `contextledger init`)",
                url=url,
                schema=schema,
                table=table,
                cause="schema_missing",
            )
