"""The built-in read models on SQLAlchemy tables, for SQLite and PostgreSQL.

Tables (prefix ``cl_``):

- ``cl_transcript``: conversation_id, position, version, role, message (JSON),
  tokens, timestamp, digest, client_message_id
- ``cl_summaries``: conversation_id, version, range, text, tokens, model and
  provenance
- ``cl_token_totals``: counters per conversation (global totals are their sum)
- ``cl_conversations``: id, model, started_at, updated_at, last_version, counters
- ``cl_tracking``: (projection, application_name) -> last notification id applied

Where they live: on PostgreSQL, in the events' own database and schema. On SQLite,
in a separate file next to the event store (``ledger.db`` -> ``ledger.views.db``), so
the runner's writes never contend with appends for SQLite's one writer lock. For a
``memory://`` ledger they live in an in-memory SQLite database.

Every view change is written with its tracking row in one transaction that first
locks the row (``SELECT ... FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on
SQLite): an event whose notification id is not above the tracked one changes
nothing, so processes that race over the same log apply each event exactly once. A
view that finds its tracking row *below* what it had seen knows that someone rebuilt
the read model and raises ``TrackingRewoundError``; the runner then resumes from
there, cooperating with the rebuild instead of skipping over it.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

from eventsourcing.persistence import Tracking, TrackingRecorder
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    DateTime,
    Dialect,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    Uuid,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from contextledger.application.projections import (
    ConversationRecord,
    ConversationsProjection,
    ReadModelProjection,
    ReadModelRunner,
    SummariesProjection,
    TokenTotalsProjection,
    TokenTotalsRecord,
    TrackingRewoundError,
    TranscriptProjection,
)
from contextledger.application.results import SummaryInfo, TranscriptEntry
from contextledger.domain.errors import ConfigurationError, StoreError
from contextledger.infrastructure.database import Database

if TYPE_CHECKING:
    from contextledger.application.ledger import Ledger

__all__ = [
    "READ_MODEL_NAMES",
    "SQLConversationsView",
    "SQLReadModels",
    "SQLSummariesView",
    "SQLTokenTotalsView",
    "SQLTranscriptView",
    "SQLView",
    "attach_read_models",
    "views_path",
]

PREFIX = "cl_"
READ_MODEL_NAMES = ("transcript", "summaries", "token_totals", "conversations")

_COUNTERS = (
    "messages",
    "appended_tokens",
    "summaries",
    "summarizer_calls",
    "summarizer_failures",
    "summarizer_input_tokens",
    "summarizer_output_tokens",
    "provider_prompt_tokens",
    "provider_completion_tokens",
)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _tables(metadata: MetaData) -> dict[str, Table]:
    p = PREFIX
    return {
        "tracking": Table(
            f"{p}tracking",
            metadata,
            Column("projection", String(64), primary_key=True),
            Column("application_name", String(64), primary_key=True),
            Column("notification_id", BigInteger, nullable=False),
        ),
        "transcript": Table(
            f"{p}transcript",
            metadata,
            Column("conversation_id", Uuid, primary_key=True),
            Column("position", Integer, primary_key=True),
            Column("version", Integer, nullable=False),
            Column("role", String(16), nullable=False),
            Column("message", JSON, nullable=False),
            Column("tokens", Integer, nullable=False),
            Column("timestamp", UTCDateTime, nullable=False),
            Column("digest", String(64), nullable=False),
            Column("client_message_id", String(200)),
        ),
        "summaries": Table(
            f"{p}summaries",
            metadata,
            Column("conversation_id", Uuid, primary_key=True),
            Column("version", Integer, primary_key=True),
            Column("from_position", Integer, nullable=False),
            Column("through_position", Integer, nullable=False),
            Column("covers_from", Integer, nullable=False),
            Column("text", Text, nullable=False),
            Column("tokens", Integer, nullable=False),
            Column("model", String(200), nullable=False),
            Column("prompt_version", String(200), nullable=False),
            Column("input_tokens", Integer),
            Column("output_tokens", Integer),
            Column("latency_ms", Float, nullable=False),
            Column("policy_version", Integer, nullable=False),
            Column("timestamp", UTCDateTime, nullable=False),
            Column("source_digest", String(64), nullable=False),
        ),
        "token_totals": Table(
            f"{p}token_totals",
            metadata,
            Column("conversation_id", Uuid, primary_key=True),
            #: System prompt and reply priming: full history = base + appended.
            Column("base_tokens", Integer, nullable=False, default=0),
            *(Column(name, BigInteger, nullable=False, default=0) for name in _COUNTERS),
        ),
        "conversations": Table(
            f"{p}conversations",
            metadata,
            Column("conversation_id", Uuid, primary_key=True),
            Column("model", String(200), nullable=False),
            Column("started_at", UTCDateTime, nullable=False),
            Column("updated_at", UTCDateTime, nullable=False),
            Column("last_version", Integer, nullable=False),
            Column("messages", Integer, nullable=False, default=0),
            Column("summaries", Integer, nullable=False, default=0),
            Column("policy_version", Integer, nullable=False, default=1),
            Index(f"{p}conversations_started_at", "started_at"),
        ),
    }


def views_path(database_url: str) -> Path | None:
    """Where the read models of a SQLite event store live (None: not a SQLite file)."""
    return Database.parse(database_url).views_path


class SQLReadModels:
    """The four built-in read models, their tables and their views, on one engine.

    ``SQLReadModels.for_ledger(ledger)`` puts them where the ledger's store is;
    ``runner(ledger)`` follows the ledger's log with them.
    """

    def __init__(self, engine: Engine, *, schema: str | None = None) -> None:
        self.engine = engine
        self.schema = schema
        self.metadata = MetaData(schema=schema)
        self.tables = _tables(self.metadata)
        self.is_sqlite = engine.dialect.name == "sqlite"
        #: SQLite has one writer: serialize this process's transactions on it.
        self._lock: threading.RLock | None = threading.RLock() if self.is_sqlite else None
        self.transcript = SQLTranscriptView(self)
        self.summaries = SQLSummariesView(self)
        self.token_totals = SQLTokenTotalsView(self)
        self.conversations = SQLConversationsView(self)
        self.create_tables()

    def __repr__(self) -> str:
        return f"SQLReadModels(url={self.engine.url.render_as_string(hide_password=True)!r})"

    # -- construction -----------------------------------------------------------

    @classmethod
    def for_url(cls, database_url: str) -> SQLReadModels:
        """Read models for the event store at ``database_url`` (see the module doc)."""
        database = Database.parse(database_url)
        if database.kind != "postgresql":
            return cls(_sqlite_engine(database.views_path))
        engine = create_engine(
            database.sqlalchemy_url(),
            pool_size=2,
            max_overflow=4,
            pool_pre_ping=True,
            connect_args={"connect_timeout": int(database.option("connect_timeout", "10"))},
        )
        return cls(engine, schema=database.schema)

    @classmethod
    def for_ledger(cls, ledger: Ledger) -> SQLReadModels:
        return cls.for_url(ledger.settings.database_url)

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

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """One write transaction (SQLite: ``BEGIN IMMEDIATE``)."""
        with self._serialized(), self.engine.begin() as conn:
            yield conn

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
        """Create missing tables (concurrent creators wait for each other)."""
        try:
            with self.begin() as conn:
                if not self.is_sqlite:
                    key = zlib.crc32(f"contextledger-readmodels/{self.schema}".encode())
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
                self.metadata.create_all(conn, checkfirst=True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot create the read-model tables: {_reason(exc)}") from exc

    def drop_tables(self) -> None:
        """Drop every read-model table, tracking included."""
        try:
            with self.begin() as conn:
                self.metadata.drop_all(conn, checkfirst=True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot drop the read-model tables: {_reason(exc)}") from exc


def attach_read_models(ledger: Ledger) -> SQLReadModels:
    """Put the built-in read models next to ``ledger``'s store and keep them up to
    date in a background thread (stopped and closed with the ledger)."""
    models = SQLReadModels.for_ledger(ledger)
    ledger.attach(models.runner(ledger))
    return models


def _sqlite_engine(path: Path | None) -> Engine:
    if path is None:
        engine = create_engine(
            "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    else:
        if not path.parent.is_dir():
            raise ConfigurationError(f"the folder of the SQLite file does not exist: {path.parent}")
        engine = create_engine(
            URL.create("sqlite", database=str(path)),
            connect_args={"check_same_thread": False, "timeout": 30},
        )

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN, so DDL is transactional too.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if path is not None:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get("cl_read", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text_ = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(orig or exc).__name__}: {text_[0] if text_ else ''}"


# ------------------------------------------------------------------------ views


class SQLView(TrackingRecorder):
    """A view on SQL tables: each change is written with its tracking row, atomically."""

    name: ClassVar[str] = ""
    table_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, models: SQLReadModels) -> None:
        self.models = models
        self._tracking = models.tables["tracking"]
        #: Per application: the last notification id this view applied or saw applied.
        self._seen: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def tables(self) -> list[Table]:
        return [self.models.tables[n] for n in self.table_names]

    # -- the TrackingRecorder interface --------------------------------------------

    def insert_tracking(self, tracking: Tracking) -> None:
        self._write(tracking, None)

    def max_tracking_id(self, application_name: str) -> int | None:
        t = self._tracking
        try:
            with self.models.read() as conn:
                value = conn.execute(
                    select(t.c.notification_id).where(
                        t.c.projection == self.name, t.c.application_name == application_name
                    )
                ).scalar()
        except SQLAlchemyError as exc:
            raise StoreError(f"read model {self.name}: {_reason(exc)}") from exc
        return int(value) if value else None

    def reset(self) -> None:
        """Drop and recreate this view's tables and set its tracking back to zero, in
        one transaction that first locks its tracking rows."""
        t = self._tracking
        try:
            with self.models.begin() as conn:
                conn.execute(
                    select(t.c.notification_id).where(t.c.projection == self.name).with_for_update()
                )
                for table in reversed(self.tables):
                    table.drop(conn, checkfirst=True)
                for table in self.tables:
                    table.create(conn, checkfirst=True)
                conn.execute(update(t).where(t.c.projection == self.name).values(notification_id=0))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot reset read model {self.name}: {_reason(exc)}") from exc
        self._seen.clear()

    # -- the one write path -----------------------------------------------------------

    def _write(self, tracking: Tracking, change: Callable[[Connection], None] | None) -> bool:
        """Apply ``change`` and move the tracking row to ``tracking``, in one transaction;
        False (and nothing written) if the event was applied already."""
        app, nid = tracking.application_name, tracking.notification_id
        t = self._tracking
        try:
            with self.models.begin() as conn:
                tracked = self._lock_tracking(conn, app)
                seen = self._seen.get(app)
                if seen is not None and tracked < seen:
                    self._seen[app] = tracked
                    raise TrackingRewoundError(
                        f"read model {self.name} was reset (tracked {tracked}, seen {seen})",
                        projection=self.name,
                        tracked=tracked,
                    )
                if nid <= tracked:
                    self._seen[app] = max(seen or 0, nid)
                    return False
                if change is not None:
                    change(conn)
                conn.execute(
                    update(t)
                    .where(t.c.projection == self.name, t.c.application_name == app)
                    .values(notification_id=nid)
                )
        except SQLAlchemyError as exc:
            raise StoreError(f"read model {self.name}: {_reason(exc)}") from exc
        self._seen[app] = nid
        return True

    def _lock_tracking(self, conn: Connection, app: str) -> int:
        t = self._tracking
        query = (
            select(t.c.notification_id)
            .where(t.c.projection == self.name, t.c.application_name == app)
            .with_for_update()
        )
        value = conn.execute(query).scalar()
        if value is None:
            dialect_insert = sqlite.insert if self.models.is_sqlite else postgresql.insert
            conn.execute(
                dialect_insert(t)
                .values(projection=self.name, application_name=app, notification_id=0)
                .on_conflict_do_nothing()
            )
            value = conn.execute(query).scalar()
        return int(value or 0)

    def _select(self, query: Any) -> list[Any]:
        try:
            with self.models.read() as conn:
                return list(conn.execute(query))
        except SQLAlchemyError as exc:
            raise StoreError(f"read model {self.name}: {_reason(exc)}") from exc


class SQLTranscriptView(SQLView):
    """``cl_transcript``: every message ever appended."""

    name = "transcript"
    table_names = ("transcript",)

    def add_message(
        self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking
    ) -> None:
        table = self.models.tables["transcript"]

        def change(conn: Connection) -> None:
            self._insert_message(conn, table, entry, conversation_id)

        self._write(tracking, change)

    def _insert_message(
        self, conn: Connection, table: Table, entry: TranscriptEntry, conversation_id: UUID
    ) -> None:
        conn.execute(
            insert(table).values(
                conversation_id=conversation_id,
                position=entry.position,
                version=entry.version,
                role=entry.message["role"],
                message=entry.message,
                tokens=entry.tokens,
                timestamp=entry.timestamp,
                digest=entry.digest,
                client_message_id=entry.client_message_id,
            )
        )

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        t = self.models.tables["transcript"]
        rows = self._select(
            select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.position)
        )
        return [
            TranscriptEntry(
                position=r.position,
                version=r.version,
                tokens=r.tokens,
                message=r.message,
                timestamp=r.timestamp,
                digest=r.digest,
                client_message_id=r.client_message_id,
            )
            for r in rows
        ]

    def count(self) -> int:
        """Messages held for all conversations."""
        t = self.models.tables["transcript"]
        return int(self._select(select(func.count()).select_from(t))[0][0])


class SQLSummariesView(SQLView):
    """``cl_summaries``: every summary with its range and provenance."""

    name = "summaries"
    table_names = ("summaries",)

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None:
        table = self.models.tables["summaries"]

        def change(conn: Connection) -> None:
            conn.execute(
                insert(table).values(
                    conversation_id=conversation_id,
                    version=summary.version,
                    from_position=summary.from_position,
                    through_position=summary.through_position,
                    covers_from=summary.covers_from,
                    text=summary.text,
                    tokens=summary.tokens,
                    model=summary.model,
                    prompt_version=summary.prompt_version,
                    input_tokens=summary.input_tokens,
                    output_tokens=summary.output_tokens,
                    latency_ms=summary.latency_ms,
                    policy_version=summary.policy_version,
                    timestamp=summary.timestamp,
                    source_digest=summary.source_digest,
                )
            )

        self._write(tracking, change)

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        t = self.models.tables["summaries"]
        rows = self._select(
            select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.version)
        )
        return [
            SummaryInfo(
                from_position=r.from_position,
                through_position=r.through_position,
                covers_from=r.covers_from,
                text=r.text,
                tokens=r.tokens,
                model=r.model,
                prompt_version=r.prompt_version,
                input_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
                latency_ms=r.latency_ms,
                policy_version=r.policy_version,
                version=r.version,
                timestamp=r.timestamp,
                source_digest=r.source_digest,
            )
            for r in rows
        ]


class SQLTokenTotalsView(SQLView):
    """``cl_token_totals``: counters per conversation; ``global_totals()`` sums them."""

    name = "token_totals"
    table_names = ("token_totals",)

    def start_totals(self, conversation_id: UUID, *, base_tokens: int, tracking: Tracking) -> None:
        table = self.models.tables["token_totals"]

        def change(conn: Connection) -> None:
            conn.execute(
                insert(table).values(
                    conversation_id=conversation_id,
                    base_tokens=base_tokens,
                    **dict.fromkeys(_COUNTERS, 0),
                )
            )

        self._write(tracking, change)

    def add_to_totals(self, conversation_id: UUID, *, tracking: Tracking, **increments: int) -> None:
        unknown = set(increments) - set(_COUNTERS)
        if unknown:
            raise ValueError(f"unknown token counters: {sorted(unknown)}")
        table = self.models.tables["token_totals"]
        deltas = {k: int(v) for k, v in increments.items() if v}

        def change(conn: Connection) -> None:
            if not deltas:
                return
            result = conn.execute(
                update(table)
                .where(table.c.conversation_id == conversation_id)
                .values({table.c[k]: table.c[k] + v for k, v in deltas.items()})
            )
            if result.rowcount == 0:  # a row the log never started (defensive)
                conn.execute(
                    insert(table).values(
                        conversation_id=conversation_id,
                        base_tokens=0,
                        **{**dict.fromkeys(_COUNTERS, 0), **deltas},
                    )
                )

        self._write(tracking, change)

    def totals(self, conversation_id: UUID) -> TokenTotalsRecord | None:
        t = self.models.tables["token_totals"]
        rows = self._select(select(t).where(t.c.conversation_id == conversation_id))
        if not rows:
            return None
        r = rows[0]
        return TokenTotalsRecord(
            conversation_id=r.conversation_id,
            conversations=1,
            full_history_tokens=r.base_tokens + r.appended_tokens,
            **{name: int(getattr(r, name)) for name in _COUNTERS},
        )

    def global_totals(self) -> TokenTotalsRecord:
        t = self.models.tables["token_totals"]
        columns: list[Any] = [func.count()]
        columns.append(func.coalesce(func.sum(t.c.base_tokens), 0))
        columns += [func.coalesce(func.sum(t.c[name]), 0) for name in _COUNTERS]
        row = self._select(select(*columns))[0]
        sums = {name: int(row[i + 2]) for i, name in enumerate(_COUNTERS)}
        return TokenTotalsRecord(
            conversation_id=None,
            conversations=int(row[0]),
            full_history_tokens=int(row[1]) + sums["appended_tokens"],
            **sums,
        )


class SQLConversationsView(SQLView):
    """``cl_conversations``: the list of conversations."""

    name = "conversations"
    table_names = ("conversations",)

    def add_conversation(
        self, conversation_id: UUID, *, model: str, started_at: datetime, tracking: Tracking
    ) -> None:
        table = self.models.tables["conversations"]

        def change(conn: Connection) -> None:
            conn.execute(
                insert(table).values(
                    conversation_id=conversation_id,
                    model=model,
                    started_at=started_at,
                    updated_at=started_at,
                    last_version=1,
                    messages=0,
                    summaries=0,
                    policy_version=1,
                )
            )

        self._write(tracking, change)

    def update_conversation(
        self,
        conversation_id: UUID,
        *,
        version: int,
        at: datetime,
        tracking: Tracking,
        messages: int = 0,
        summaries: int = 0,
        policy_version: int | None = None,
    ) -> None:
        table = self.models.tables["conversations"]
        values: dict[Any, Any] = {table.c.last_version: version, table.c.updated_at: at}
        if messages:
            values[table.c.messages] = table.c.messages + messages
        if summaries:
            values[table.c.summaries] = table.c.summaries + summaries
        if policy_version is not None:
            values[table.c.policy_version] = policy_version

        def change(conn: Connection) -> None:
            conn.execute(
                update(table).where(table.c.conversation_id == conversation_id).values(values)
            )

        self._write(tracking, change)

    def conversations(self) -> list[ConversationRecord]:
        t = self.models.tables["conversations"]
        rows = self._select(select(t).order_by(t.c.started_at, t.c.conversation_id))
        return [
            ConversationRecord(
                conversation_id=r.conversation_id,
                model=r.model,
                started_at=r.started_at,
                updated_at=r.updated_at,
                last_version=r.last_version,
                messages=r.messages,
                summaries=r.summaries,
                policy_version=r.policy_version,
            )
            for r in rows
        ]
