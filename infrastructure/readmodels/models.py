"""The four built-in read models on one engine, and attaching them to a ledger."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, MetaData, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from contextledger.application.projections import (
    ConversationsProjection,
    ReadModelProjection,
    ReadModelRunner,
    SummariesProjection,
    TokenTotalsProjection,
    TranscriptProjection,
)
from contextledger.domain.values.errors import ReadOnlyError, StoreError
from contextledger.infrastructure.keys.subject_mapper import SubjectMapper, subject_keys_of
from contextledger.infrastructure.persistence.database import Database, mask_url
from contextledger.infrastructure.persistence.sqlite_files import ReadOnlyLeftovers
from contextledger.infrastructure.readmodel_names import READ_MODEL_NAMES
from contextledger.infrastructure.readmodels.conversations import SQLConversationsView
from contextledger.infrastructure.readmodels.host import SharedTransaction
from contextledger.infrastructure.readmodels.sealing import ContentCodec, codec_for_key
from contextledger.infrastructure.readmodels.storage import build_tables, engine_for, reason
from contextledger.infrastructure.readmodels.summaries import SQLSummariesView
from contextledger.infrastructure.readmodels.token_totals import SQLTokenTotalsView
from contextledger.infrastructure.readmodels.transcript import SQLTranscriptView
from contextledger.infrastructure.readmodels.view import SQLView

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger

__all__ = ["READ_MODEL_NAMES", "SQLReadModels", "attach_read_models", "views_path"]


def views_path(database_url: str) -> Path | None:
    """Where the read models of a SQLite event store live (None: not a SQLite file)."""
    return Database.parse(database_url).views_path


class SQLReadModels:
    """The four built-in read models, their tables and their views, on one engine.

    ``SQLReadModels.for_ledger(ledger)`` puts them where the ledger's store is;
    ``runner(ledger)`` follows the ledger's log with them.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        schema: str | None = None,
        codec: ContentCodec | None = None,
        create: bool = True,
    ) -> None:
        self.engine = engine
        self.schema = schema
        #: A read-only SQLite file's ``-wal``/``-shm`` to remove on closing (``for_url``).
        self.leftovers: ReadOnlyLeftovers | None = None
        self.metadata = MetaData(schema=schema)
        #: Seals the content columns (None: stored in plaintext).
        self.codec = codec
        self.tables = build_tables(self.metadata, codec)
        self.is_sqlite = engine.dialect.name == "sqlite"
        #: SQLite has one writer: serialize this process's transactions on it.
        self._lock: threading.RLock | None = threading.RLock() if self.is_sqlite else None
        #: The batch transaction open now (``batch()``), shared by every view.
        self._shared: SharedTransaction | None = None
        self.transcript = SQLTranscriptView(self)
        self.summaries = SQLSummariesView(self)
        self.token_totals = SQLTokenTotalsView(self)
        self.conversations = SQLConversationsView(self)
        if create:  # False: only read what is there (``has_tables`` says whether it is)
            self.create_tables()

    def __repr__(self) -> str:
        return f"SQLReadModels(url={mask_url(self.engine.url.render_as_string(hide_password=False))!r})"

    # -- construction -----------------------------------------------------------

    @classmethod
    def for_url(
        cls,
        database_url: str,
        *,
        cipher_key: str | None = None,
        connect_timeout: float = 5.0,
        statement_timeout: float = 30.0,
        create: bool = True,
        read_only: bool = False,
    ) -> SQLReadModels:
        """Read models for the event store at ``database_url`` (see the module doc),
        their content encrypted with ``cipher_key`` (the event store's key); without
        ``create``, nothing is created; ``read_only``: nothing is created or written
        (a SQLite file of them must exist: ``SchemaMissingError``)."""
        return cls._open(
            database_url,
            codec_for_key(cipher_key),
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            create=create,
            read_only=read_only,
        )

    @classmethod
    def _open(
        cls,
        database_url: str,
        codec: ContentCodec | None,
        *,
        connect_timeout: float,
        statement_timeout: float,
        create: bool,
        read_only: bool,
    ) -> SQLReadModels:
        database = Database.parse(database_url)
        engine = engine_for(
            database,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            read_only=read_only,
        )
        models = cls(engine, schema=database.schema, codec=codec, create=create and not read_only)
        if read_only and database.views_path is not None:
            models.leftovers = ReadOnlyLeftovers(database.views_path)
        return models

    @classmethod
    def for_ledger(cls, ledger: Ledger, *, create: bool = True) -> SQLReadModels:
        """Read models for ``ledger``'s store, with its settings' timeouts, encrypted
        with its cipher key if it has one: when its records go under per-subject keys,
        each value under the keys of the subjects whose content it holds (``sealing``);
        a read-only ledger's are opened read-only."""
        s = ledger.settings
        cipher_key = None if s.cipher_key is None else s.cipher_key.get_secret_value()
        mapper = getattr(ledger, "mapper", None)
        keys = subject_keys_of(ledger)
        per_subject = keys is not None and isinstance(mapper, SubjectMapper) and mapper.per_subject
        codec = codec_for_key(
            cipher_key,
            keys=keys if per_subject else None,
            inherited=mapper.lineage.inherited if per_subject and isinstance(mapper, SubjectMapper) else None,
        )
        return cls._open(
            s.database_url,
            codec,
            connect_timeout=s.connect_timeout,
            statement_timeout=s.statement_timeout,
            create=create,
            read_only=s.read_only,
        )

    def projections(self) -> list[ReadModelProjection]:
        """The built-in projections, each bound to its view."""
        return [
            TranscriptProjection(self.transcript),
            SummariesProjection(self.summaries),
            TokenTotalsProjection(self.token_totals),
            ConversationsProjection(self.conversations),
        ]

    def runner(self, ledger: Ledger, *, close_with_runner: bool = True, **options: Any) -> ReadModelRunner:
        """A runner of the built-in projections over ``ledger``'s log. By default,
        stopping the runner closes these read models' connections."""
        return ReadModelRunner(
            ledger,
            self.projections(),
            on_close=self.close if close_with_runner else None,
            **options,
        )

    @property
    def views(self) -> dict[str, SQLView]:
        return {
            "transcript": self.transcript,
            "summaries": self.summaries,
            "token_totals": self.token_totals,
            "conversations": self.conversations,
        }

    def close(self) -> None:
        self.engine.dispose()
        if self.leftovers is not None:
            self.leftovers.tidy()

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """One write transaction (SQLite: ``BEGIN IMMEDIATE``)."""
        with self._serialized(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def batch(self) -> Iterator[SharedTransaction]:
        """One write transaction shared by every view that joins it in this thread
        (``SQLView.batch``): the first caller opens it and commits it when its block
        ends (or rolls it all back, rows and tracking, if the block raises); callers
        inside that block join it. Callbacks in ``on_commit`` run after the commit."""
        current = self._shared
        if current is not None and current.thread == threading.get_ident():
            yield current
            return
        shared: SharedTransaction | None = None
        try:
            with self.begin() as conn:
                shared = SharedTransaction(conn, threading.get_ident())
                self._shared = shared
                try:
                    yield shared
                finally:
                    self._shared = None
        except SQLAlchemyError as exc:
            raise StoreError(f"read models: {reason(exc)}") from exc
        for callback in shared.on_commit:
            callback()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One read transaction."""
        with self._serialized(), self.engine.connect() as conn:
            conn = conn.execution_options(cl_read=True)
            with conn.begin():
                yield conn

    @contextmanager
    def _serialized(self) -> Iterator[None]:
        if self._lock is None:
            yield
        else:
            with self._lock:
                yield

    def create_tables(self) -> None:
        """Create missing tables (concurrent creators wait for each other); a view
        whose tables an earlier release made is rebuilt (``SQLView.upgrade``)."""
        try:
            with self.begin() as conn:
                if not self.is_sqlite:
                    key = zlib.crc32(f"contextledger-readmodels/{self.schema}".encode())
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
                self.metadata.create_all(conn, checkfirst=True)
                for view in self.views.values():
                    view.upgrade(conn)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot create the read-model tables: {reason(exc)}") from exc

    def has_tables(self) -> bool:
        """Whether every read-model table is there (reads the catalog only)."""
        try:
            found = inspect(self.engine)
            return all(found.has_table(t.name, schema=self.schema) for t in self.tables.values())
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the read models' catalog: {reason(exc)}") from exc

    def drop_tables(self) -> None:
        """Drop every read-model table, tracking included."""
        try:
            with self.begin() as conn:
                self.metadata.drop_all(conn, checkfirst=True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot drop the read-model tables: {reason(exc)}") from exc


def attach_read_models(ledger: Ledger) -> SQLReadModels:
    """Put the built-in read models next to ``ledger``'s store and keep them up to
    date in a background thread (stopped and closed with the ledger). With several
    stores, each store's read models are kept beside it by a runner of its own log;
    the first store's are returned (``SQLReadModels.for_ledger(ledger.shards[j])``
    opens store ``j``'s). A read-only ledger: ``ReadOnlyError``, before anything is
    created (the runner writes)."""
    if ledger.settings.read_only:
        raise ReadOnlyError(
            "attach_read_models() keeps read models up to date, which writes, and the ledger "
            "is open read-only: open it without read_only=True, or read existing read models "
            "with SQLReadModels.for_ledger",
            operation="attach_read_models",
        )
    models = SQLReadModels.for_ledger(ledger)
    _attach(ledger, models)
    for shard in ledger.shards[1:]:
        _attach(shard, SQLReadModels.for_ledger(shard))
    return models


def _attach(ledger: Ledger, models: SQLReadModels) -> None:
    """Attach a runner of ``models``; if it refuses to start (``ReadModelAheadError``),
    close the read models' connections before the error goes on."""
    runner = models.runner(ledger)
    try:
        ledger.attach(runner)
    except BaseException:
        runner.stop()  # closes ``models`` with it
        raise
    ledger.audit.heads = models.conversations  # verify checks the log's end against them
