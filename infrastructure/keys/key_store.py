"""The key table apart from the event store: ``Settings.key_store`` (docs/privacy.md).

With ``key_store`` set, the two key tables (``key_tables``) live in another database
of the event store's kind, and the event store holds no key: a backup of it holds
records whose keys it does not hold, and an erasure is one row changed in a small
database.

- **SQLite**: another file. Every connection of the event store ``ATTACH``-es it as
  schema ``cl_keys`` (``attach_sqlite``), so the write fence (``key_fence``) stays one
  statement: the ``INSERT`` of a record reads ``cl_keys.stored_subject_keys``. A
  statement takes its databases' locks in their order, the event store's (``main``)
  first: the insert holds the event store's write lock before it reads the key
  table, and keeps it to its commit. An erasure destroys a key in a ``BEGIN
  IMMEDIATE`` transaction on an event-store connection, which takes the write locks
  of both files (``AttachedSQLiteKeyTable``): a write either commits before it or
  starts after it and sees the tombstone. The tombstone is written to the key file
  alone (one file, so atomic in WAL); the erasure's record (``ContentErased``)
  follows in the event store, as without a key store: a crash between them leaves a
  tombstone without its record, which ``erase`` run again completes.
- **PostgreSQL**: another database (one statement cannot span two). A write holds
  the key rows it names ``FOR KEY SHARE`` in a transaction on the key database
  across the event insert, and commits that transaction after the insert has
  committed (``HeldKeys``); erasure takes the subject's row ``FOR UPDATE`` there
  first (``PostgresKeyTable``). Either the write's insert commits before the erasure
  can take the row, or the erasure commits first and the write finds the row
  without its key and inserts nothing. Two more round trips per write, to the key
  database (``BEGIN`` and the locking ``SELECT`` sent as one, then ``COMMIT``).

Each side knows the other: the key store holds its identity (a random id) in
``<prefix>_key_store``, and the event store holds, in a table of the same name, the id
and the location of the key store it uses (``link``). Opening a store linked to a key
store without ``key_store``, or with another key store, is ``ConfigurationError``:
nothing is made in the wrong place. A store that keeps data keys itself cannot be
given a key store (its keys are not moved).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import psycopg
from eventsourcing.persistence import OperationalError, PersistenceError
from psycopg import generators, pq

from contextledger.domain.values.errors import ConfigurationError, StoreError
from contextledger.infrastructure.keys.key_tables import KeyTable, PostgresKeyTable, SQLiteKeyTable

__all__ = [
    "KEY_STORE",
    "SCHEMA",
    "AttachedSQLiteKeyTable",
    "HeldKeys",
    "KeyDatabaseTable",
    "attach_sqlite",
    "check_unlinked",
    "link",
    "postgres_datastore",
]

#: The environment key of the key store's URL (masked), set with ``Settings.key_store``.
KEY_STORE = "CL_KEY_STORE"
#: The schema name the key file is attached under in SQLite.
SCHEMA = "cl_keys"
_ROLE_KEYS = "key store"
_ROLE_USES = "uses"


def attach_sqlite(datastore: Any, path: str, *, read_only: bool) -> None:
    """Make every new connection of ``datastore``'s pool attach the key file ``path``
    as ``cl_keys`` (in WAL mode, as the event store is; read-only: ``mode=ro``)."""
    pool = datastore.pool
    make = pool._create_connection
    target = f"file:{quote(path)}?mode=ro" if read_only else f"file:{quote(path)}"
    state = {"wal": read_only}

    def create() -> Any:
        conn = make()
        raw = conn._sqlite_conn
        raw.execute(f"ATTACH DATABASE ? AS {SCHEMA}", (target,))
        if not state["wal"]:
            mode = raw.execute(f"PRAGMA {SCHEMA}.journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                raw.execute(f"PRAGMA {SCHEMA}.journal_mode=WAL").fetchone()
            state["wal"] = True
        return conn

    pool._create_connection = create


class AttachedSQLiteKeyTable(SQLiteKeyTable):
    """The key table in the key file attached to the event store's connections
    (``cl_keys``). Writes run ``BEGIN IMMEDIATE``: the event store's write lock and the
    key file's, so no insert of a record runs between a key's check and its change."""

    def __init__(self, datastore: Any, where: str) -> None:
        super().__init__(datastore, prefix=f"{SCHEMA}.stored")
        self.where = where
        self.bare = "stored_subject_keys"

    def exists(self) -> bool:
        def work(cursor: Any) -> bool:
            cursor.execute(
                f"SELECT 1 FROM {SCHEMA}.sqlite_master WHERE type = 'table' AND name = ?", (self.bare,)
            )
            return cursor.fetchone() is not None

        return bool(self._run(work, commit=False, reading=True))

    @contextmanager
    def _cursor(self, *, commit: bool) -> Iterator[Any]:
        if not commit:
            with self.datastore.transaction(commit=False) as cursor:
                yield cursor
            return
        with self.datastore.get_connection(commit=True) as conn:
            cursor = conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")  # every attached database's write lock
            try:
                yield cursor
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def _before_tombstone(self, cursor: Any, subject: str) -> None:
        cursor.execute(f"PRAGMA {SCHEMA}.secure_delete = ON")

    def _after_tombstone(self) -> None:
        try:
            with self.datastore.get_connection(commit=True) as conn:
                cursor = conn.cursor()
                cursor.execute(f"PRAGMA {SCHEMA}.wal_checkpoint(TRUNCATE)")
                cursor.fetchall()
        except Exception:  # a reader holds the WAL: SQLite checkpoints it later
            pass


def postgres_datastore(env: Any, *, pool_size: int = 3) -> Any:
    """The eventsourcing datastore of the key database named by ``env``'s
    ``CL_KEY_STORE_*`` keys (``Database.persistence_env``), its sessions configured
    as the event store's (connect and statement timeouts)."""
    from eventsourcing.postgres import PostgresDatastore

    datastore = PostgresDatastore(
        env.get("CL_KEY_STORE_DBNAME") or "",
        env.get("CL_KEY_STORE_HOST") or "127.0.0.1",
        env.get("CL_KEY_STORE_PORT") or "5432",
        env.get("CL_KEY_STORE_USER") or "postgres",
        env.get("CL_KEY_STORE_PASSWORD") or "",
        connect_timeout=float(env.get("POSTGRES_CONNECT_TIMEOUT") or 5),
        idle_in_transaction_session_timeout=30,
        pool_size=pool_size,
        max_overflow=4,
        schema=env.get("CL_KEY_STORE_SCHEMA") or "",
    )
    kwargs = datastore.pool.kwargs
    assert isinstance(kwargs, dict)
    connect = env.get("CL_PG_CONNECT_TIMEOUT")
    if connect:
        kwargs["connect_timeout"] = max(2, int(float(connect)))
    statement = env.get("CL_PG_STATEMENT_TIMEOUT_MS")
    if statement:
        kwargs["options"] = f"-c statement_timeout={int(float(statement))}"
    return datastore


class KeyDatabaseTable(PostgresKeyTable):
    """The key table in a PostgreSQL key database (``postgres_datastore``); its
    writes are fenced by ``HeldKeys``."""

    _held: HeldKeys | None = None

    def _run(self, work: Callable[[Any], Any], *, commit: bool, reading: bool = False) -> Any:
        try:
            return super()._run(work, commit=commit, reading=reading)
        except StoreError as exc:
            if exc.cause == "key_table":
                raise
            raise StoreError(
                f"the key store {self.where} cannot be used: {self._why()}",
                url=self.where,
                cause=exc.cause,
            ) from exc

    def _why(self) -> str:
        """What the server says to a connection to the key database (the pool's own
        failure is only a timeout)."""
        kwargs = dict(self.datastore.pool.kwargs)
        kwargs.pop("row_factory", None)
        kwargs["connect_timeout"] = min(int(kwargs.get("connect_timeout") or 5), 5)
        try:
            psycopg.connect(**kwargs).close()
        except psycopg.Error as exc:
            said = str(exc).strip().splitlines()
            return said[-1] if said else type(exc).__name__
        return "the server did not answer in time"

    def held(self) -> HeldKeys:
        """The write fence over this table (one per table, made on first use)."""
        if self._held is None:
            self._held = HeldKeys(self)
        return self._held

    def close(self) -> None:
        if self._held is not None:
            self._held.close()
        self.datastore.close()

    def _create_statements(self) -> list[str]:
        schema = self.datastore.schema or "public"
        quoted = '"' + schema.replace('"', '""') + '"'
        made = [] if schema == "public" else [f"CREATE SCHEMA IF NOT EXISTS {quoted}"]
        return [*made, *super()._create_statements()]


class HeldKeys:
    """The PostgreSQL write fence over a key database (see the module doc): ``hold``
    the key rows a write names ``FOR KEY SHARE`` in a transaction on the key database
    while the write runs; the write runs only if all of them hold a key. The
    transaction runs on one connection of the key database's pool, kept for it (a
    recorder's writes come one at a time), through libpq directly: ``BEGIN`` and the
    locking ``SELECT`` in one message, ``COMMIT`` in another."""

    def __init__(self, table: KeyDatabaseTable) -> None:
        self.table = table
        self._lock = threading.Lock()
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            datastore = self.table.datastore
            datastore.pool.open(True, datastore.pool_open_timeout or 30.0)
            self._conn = datastore.pool.getconn()
        return self._conn

    def _run(self, conn: Any, query: bytes) -> Any:
        """The last result of ``query`` (simple protocol: several statements); psycopg's
        errors as eventsourcing's, as the recorder's are (a lost connection is retried)."""
        try:
            conn.pgconn.send_query(query)
            results = conn.wait(generators.execute(conn.pgconn))
            for res in results:
                if res.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
                    raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
        except psycopg.OperationalError as exc:
            raise OperationalError(str(exc)) from exc
        except psycopg.Error as exc:
            raise PersistenceError(str(exc)) from exc
        return results[-1]

    @contextmanager
    def hold(self, key_ids: Sequence[bytes]) -> Iterator[bool]:
        """Yield whether every key of ``key_ids`` is live, its row locked until the
        block ends (committed after the block, rolled back if it raises)."""
        unique = list(dict.fromkeys(key_ids))
        ids = ", ".join(f"'\\x{k.hex()}'::bytea" for k in unique)
        query = (
            f"BEGIN; SELECT count(*) FROM (SELECT 1 FROM {self.table.keys} WHERE key_id IN "
            f"({ids}) AND wrapped_key IS NOT NULL FOR KEY SHARE) AS live"
        ).encode()
        with self._lock:
            conn = self._connection()
            try:
                res = self._run(conn, query)
                yield int(res.get_value(0, 0) or b"0") == len(unique)
            except BaseException:
                self._release(conn)
                raise
            self._run(conn, b"COMMIT")

    def _release(self, conn: Any) -> None:
        """Roll the key transaction back; a connection that cannot goes back to the pool
        (which replaces it) and the next write takes another."""
        try:
            self._run(conn, b"ROLLBACK")
        except (PersistenceError, OSError):
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                self.table.datastore.pool.putconn(conn)


# -- the link between the two stores -----------------------------------------------


def _table_named(table: Any, name: str) -> str:
    """The name of the link table beside ``table``'s key table."""
    keys: str = table.keys
    return keys.replace("_subject_keys", f"_{name}")


def _there(table: Any, cursor: Any, name: str) -> bool:
    """Whether the table ``name`` (as the statements name it) exists."""
    if isinstance(table, SQLiteKeyTable):
        schema, _, bare = name.rpartition(".")
        cursor.execute(
            f"SELECT 1 FROM {schema or 'main'}.sqlite_master WHERE type = 'table' AND name = ?", (bare,)
        )
    else:
        cursor.execute("SELECT 1 WHERE to_regclass(%s) IS NOT NULL", (name,))
    return cursor.fetchone() is not None


def _read(table: Any, role: str) -> tuple[str, str] | None:
    """The (id, location) row ``role`` of the link table beside ``table``, if any."""
    name = _table_named(table, "key_store")

    def work(cursor: Any) -> tuple[str, str] | None:
        if not _there(table, cursor, name):  # asked first: no failed statement in the log
            return None
        cursor.execute(table._sql(f"SELECT key_store_id, location FROM {name} WHERE role = ?"), (role,))
        row = cursor.fetchone()
        if row is None:
            return None
        values = list(row.values()) if isinstance(row, dict) else list(row)
        return str(values[0]), str(values[1])

    found: tuple[str, str] | None = table._run(work, commit=False, reading=True)
    return found


def _write(table: Any, role: str, key_store_id: str, location: str) -> tuple[str, str]:
    """Record ``role`` unless it is there; the row as stored."""
    name = _table_named(table, "key_store")
    text = "TEXT" if isinstance(table, SQLiteKeyTable) else "text"

    def work(cursor: Any) -> None:
        table._creating(cursor)
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {name} (role {text} PRIMARY KEY, key_store_id {text} "
            f"NOT NULL, location {text} NOT NULL)"
        )
        cursor.execute(
            table._sql(
                f"INSERT INTO {name} (role, key_store_id, location) VALUES (?, ?, ?) "
                "ON CONFLICT (role) DO NOTHING"
            ),
            (role, key_store_id, location),
        )

    table._run(work, commit=True)
    found = _read(table, role)
    assert found is not None
    return found


def check_unlinked(own: KeyTable) -> None:
    """Opening without ``key_store``: ``ConfigurationError`` if the event store (its
    own key table ``own``) is linked to a key store, before anything is made in it."""
    found = _read(own, _ROLE_USES)
    if found is not None:
        raise ConfigurationError(
            f"the store {own.where} keeps its data keys in the key store {found[1]}, not in "
            "itself: open it with that key store (Settings.key_store, CONTEXTLEDGER_KEY_STORE, "
            "--key-store); nothing was changed",
            setting="key_store",
            url=own.where,
        )


def link(own: KeyTable, keys: KeyTable, *, creating: bool, has_keys: Callable[[], bool]) -> None:
    """Opening with ``key_store``: check (and on first use record) that the event
    store, whose own key table is ``own``, uses the key store whose key table is
    ``keys``. ``ConfigurationError`` if it uses another one, or keeps data keys itself
    (``has_keys``), or (``creating`` False) either side is not set up yet."""
    uses = _read(own, _ROLE_USES)
    identity = _read(keys, _ROLE_KEYS)
    if identity is None and creating and uses is None:  # a new key store
        identity = _write(keys, _ROLE_KEYS, os.urandom(16).hex(), keys.where)
    if identity is None and uses is not None:
        raise ConfigurationError(
            f"the store {own.where} keeps its data keys in the key store {uses[1]}; "
            f"{keys.where} holds no key table: open it with its own key store",
            setting="key_store",
            url=keys.where,
        )
    if identity is None:
        raise ConfigurationError(
            f"the key store {keys.where} holds no key table (create it by opening the store "
            "read-write with it once)",
            setting="key_store",
            url=keys.where,
        )
    if uses is None:
        if has_keys():
            raise ConfigurationError(
                f"the store {own.where} keeps its data keys itself: it cannot be given a key "
                f"store ({keys.where}); open it without key_store",
                setting="key_store",
                url=keys.where,
            )
        if not creating:
            raise ConfigurationError(
                f"the store {own.where} does not use the key store {keys.where} yet: open it "
                "read-write with it once",
                setting="key_store",
                url=keys.where,
            )
        uses = _write(own, _ROLE_USES, identity[0], keys.where)
    if uses[0] != identity[0]:
        raise ConfigurationError(
            f"the store {own.where} keeps its data keys in the key store {uses[1]}, not in "
            f"{keys.where} (another key store): open it with its own; nothing was changed",
            setting="key_store",
            url=keys.where,
        )
