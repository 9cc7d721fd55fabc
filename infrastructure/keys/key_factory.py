"""The key table an event store's mapper and recorder get: ``SubjectKeysFactory``.

``SubjectKeysFactory`` is mixed into the store factories (SQLite, PostgreSQL, memory),
first among their bases. The ``SubjectMapper`` it builds gets the store's key table --
in the event store (created with its event tables), or, with ``Settings.key_store``
(``CL_KEY_STORE`` in the environment), in the key store (``key_store``) -- and the
store's application recorder gets the write fence of that table (``key_fence``).
Without a key store, a store linked to one is refused before anything is made in it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from eventsourcing.persistence import ApplicationRecorder, Mapper, Transcoder

from contextledger.domain.values.errors import ConfigurationError, ContextLedgerError
from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.keys.key_modes import (
    keys_are_unwrapped,
    keys_are_wrapped,
    keys_unwrapped_error,
    mark,
)
from contextledger.infrastructure.keys.key_store import (
    KEY_STORE,
    AttachedSQLiteKeyTable,
    KeyDatabaseTable,
    attach_sqlite,
    check_unlinked,
    link,
    postgres_datastore,
)
from contextledger.infrastructure.keys.key_tables import KeyRow, KeyTable, PostgresKeyTable, SQLiteKeyTable
from contextledger.infrastructure.keys.memory_key_table import MemoryKeyTable
from contextledger.infrastructure.keys.subject_keys import CHECK_SUBJECT, SubjectKeys, Tombstone
from contextledger.infrastructure.keys.subject_mapper import KEY_SCOPE, SubjectMapper, key_ids_of

__all__ = ["SubjectKeysFactory"]


def _no_key(where: str) -> ConfigurationError:
    """What opening an encrypted store without its master key is."""
    return ConfigurationError(
        f"the store {where} is encrypted: open it with its master key (Settings.cipher_key, "
        "CONTEXTLEDGER_CIPHER_KEY)",
        setting="cipher_key",
        url=where,
    )


def _exists(table: KeyTable) -> bool:
    """Whether the key table is there (a memory store's always is)."""
    return not isinstance(table, SQLiteKeyTable | PostgresKeyTable) or table.exists()


def _holds_keys(table: KeyTable) -> bool:
    """Whether the event store's own key table holds a data key or a tombstone."""
    if not isinstance(table, SQLiteKeyTable | PostgresKeyTable):
        return False  # (a missing table reads as no row)

    def work(cursor: Any) -> bool:
        cursor.execute(table._sql(f"SELECT 1 FROM {table.keys} WHERE subject <> ? LIMIT 1"), (CHECK_SUBJECT,))
        return cursor.fetchone() is not None

    return bool(table._run(work, commit=False, reading=True))


class SubjectKeysFactory:
    """Mixed into an eventsourcing infrastructure factory (first among its bases): the
    ``SubjectMapper`` it builds gets the store's key table (see the module doc)."""

    #: The key table of the key store, once opened (None: the keys are in the store).
    _key_store_table: KeyTable | None = None

    def __init__(self, env: Any) -> None:
        parent: Any = super()
        parent.__init__(env)
        given = self.env.get(KEY_STORE)
        if not given:
            return
        from eventsourcing.postgres import PostgresDatastore
        from eventsourcing.sqlite import SQLiteDatastore

        datastore = getattr(self, "datastore", None)
        if isinstance(datastore, SQLiteDatastore):
            read_only = bool(getattr(self, "must_exist", False))  # the read-only factory
            attach_sqlite(datastore, self.env.get("CL_KEY_STORE_PATH") or "", read_only=read_only)
            self._key_store_table = AttachedSQLiteKeyTable(datastore, given)
        elif isinstance(datastore, PostgresDatastore):
            prefix = (self.env.name.lower() if self.env is not None else "") or "stored"
            remote = KeyDatabaseTable(postgres_datastore(self.env), prefix=prefix)
            remote.where = given
            self._key_store_table = remote
        else:
            raise ConfigurationError(
                "a key store is kept beside a SQLite or PostgreSQL store only", setting="key_store"
            )

    env: Any

    def close(self) -> None:
        parent: Any = super()
        parent.close()
        table = self._key_store_table
        if isinstance(table, KeyDatabaseTable):
            table.close()

    def own_key_table(self) -> KeyTable:
        """The key table in the event store itself (with a key store: where none may be)."""
        from eventsourcing.postgres import PostgresDatastore
        from eventsourcing.sqlite import SQLiteDatastore

        datastore = getattr(self, "datastore", None)
        env: Any = getattr(self, "env", None)
        said = env.get if env is not None else (lambda name: None)
        table: KeyTable
        if isinstance(datastore, SQLiteDatastore):
            # ``main.``: with a key file attached, a bare name could find its table.
            attached = self._key_store_table is not None
            table = SQLiteKeyTable(datastore, prefix="main.stored" if attached else "stored")
            table.where = f"sqlite:///{said('CL_SQLITE_PATH') or said('SQLITE_DBNAME') or ''}"
        elif isinstance(datastore, PostgresDatastore):
            prefix = (env.name.lower() if env is not None else "") or "stored"
            table = PostgresKeyTable(datastore, prefix=prefix)
            table.where = (
                f"postgresql://{said('POSTGRES_USER') or ''}@{said('POSTGRES_HOST') or ''}:"
                f"{said('POSTGRES_PORT') or ''}/{said('POSTGRES_DBNAME') or ''}?schema={datastore.schema}"
            )
        else:
            table = MemoryKeyTable()
        return table

    def key_table(self) -> KeyTable:
        """The key table of this factory's store: the key store's, if it has one."""
        return self._key_store_table or self.own_key_table()

    def _check_key_store(self, creating: bool) -> None:
        """The link between the event store and its key store (``key_store.link``), or
        that there is none when no key store is given."""
        own = self.own_key_table()
        if not isinstance(own, SQLiteKeyTable | PostgresKeyTable):
            return
        if self._key_store_table is None:
            check_unlinked(own)
            return
        link(own, self._key_store_table, creating=creating, has_keys=lambda: _holds_keys(own))

    def mapper(self, transcoder: Transcoder | None = None, mapper_class: Any = None) -> Mapper[Any]:
        parent: Any = super()
        mapper: Mapper[Any] = parent.mapper(transcoder, mapper_class)
        env: Any = getattr(self, "env")  # noqa: B009 - set by the factory this is mixed into
        scope = env.get(KEY_SCOPE) or "subject"
        if scope not in ("subject", "store"):
            raise ConfigurationError(
                f"key_scope must be 'subject' or 'store', not {scope!r}", setting="key_scope"
            )
        creates = getattr(self, "env_create_table", None)
        creating = creates is None or creates()
        self._check_key_store(creating)
        if getattr(mapper, "cipher", None) is None:
            # Without a master key: data keys kept unwrapped (``key_modes``), if any.
            table = self.key_table()
            existing = isinstance(table, SQLiteKeyTable | PostgresKeyTable) and table.exists()
            if existing and keys_are_wrapped(table):
                raise _no_key(table.where)
            if not isinstance(mapper, SubjectMapper) or not (existing or (creating and scope == "subject")):
                return mapper
            keys = SubjectKeys(table, None)
            if creating:
                table.create_tables()
                mark(keys)
            mapper.use_keys(keys, per_subject=scope == "subject")
            return mapper
        if not isinstance(mapper, SubjectMapper):
            return mapper
        table = self.key_table()
        keys = SubjectKeys(table, env.get("CIPHER_KEY"))
        if creating:
            table.create_tables()
            if keys_are_unwrapped(table):
                raise keys_unwrapped_error(table.where)
            mark(keys)
        elif _exists(table) and keys_are_unwrapped(table):
            raise keys_unwrapped_error(table.where)
        mapper.use_keys(keys, per_subject=scope == "subject")
        return mapper

    def event_store(self, mapper: Any = None, recorder: Any = None) -> Any:
        """An event store; the subject mapper learns the store's event recorder (the
        first application recorder it is used with), for ``Lineage``; the recorder gets
        the write fence of the store's key table (``key_fence``), and so does the
        snapshots' recorder where it reads with the key table (PostgreSQL's)."""
        if (
            isinstance(mapper, SubjectMapper)
            and mapper.recorder is None
            and isinstance(recorder, ApplicationRecorder)
        ):
            mapper.recorder = recorder
        keys = mapper.keys if isinstance(mapper, SubjectMapper) else None
        if keys is not None and hasattr(recorder, "fence"):  # the snapshots' too, for their reads
            recorder.fence = _fence_of(keys)
        parent: Any = super()
        return parent.event_store(mapper=mapper, recorder=recorder)


def _fence_of(keys: SubjectKeys) -> KeyFence:
    """The write fence of the key table ``keys`` keeps (``key_fence``): in a key
    database of its own (PostgreSQL ``key_store``), its rows held across the write."""
    table = keys.table

    def live(key_id: bytes) -> bool:
        row = table.by_id(key_id)
        return row is not None and row.wrapped_key is not None and row.erased_at is None

    hold = table.held().hold if isinstance(table, KeyDatabaseTable) else None
    fresh = None
    # In the events' own database, new keys ride with their first records; a key file
    # attached beside it commits apart from the events (WAL), and a key database of its
    # own apart from the event database, so not there.
    if type(table) is SQLiteKeyTable or type(table) is PostgresKeyTable:
        keys.new_keys.insert, fresh = table.new_key_insert, keys
    return KeyFence(
        getattr(table, "keys", ""),
        key_ids_of,
        keys.refused_write,
        live,
        hold,
        fresh,
        getattr(table, "subjects", ""),
        lambda row: _learn(keys, row),
    )


def _learn(keys: SubjectKeys, row: KeyRow) -> None:
    """Cache ``row``, read with the records that name it, as a read by its id would
    (unwrapped, or a tombstone); a row that read would refuse (another master key, a
    damaged row) is left to it, for the record that names it."""
    hit = keys._by_id.get(row.key_id)
    if hit is not None and (isinstance(hit[0], Tombstone) or hit[1] > time.monotonic()):
        return
    if row.wrapped_key is not None and row.master_id != keys.master_id:
        return
    with contextlib.suppress(ContextLedgerError):
        keys._entry(row)
