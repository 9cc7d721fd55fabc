"""Where the read models live: their tables, and the engines they are written through.

Tables (prefix ``cl_``):

- ``cl_transcript``: conversation_id, position, version, origin_id, role, message
  (JSON), tokens, timestamp, digest, client_message_id, and the marks of edits
  (retracted, its version, reason and conversation; the version an edit replaced or
  was replaced by; a fork's inherited rows carry their source in ``origin_id``)
- ``cl_summaries``: conversation_id, version, origin_id, range, text, tokens, model,
  provenance, and whether it still stands (``valid``, invalidated at which version,
  why, by which conversation); a fork's inherited rows carry their log in ``origin_id``;
  a provider's compaction its format (``native``) and its items or blocks (``payload``)
- ``cl_token_totals``: counters per conversation (global totals are their sum, a
  fork's shared history counted once)
- ``cl_conversations``: id, model, key, started_at, updated_at, last_version,
  counters, fork origin, last system prompt change

A table whose columns or primary key differ from these (a database made by an
earlier release) is dropped and rebuilt from the log when the read models are opened
(see ``SQLView.upgrade``).
- ``cl_tracking``: (projection, application_name) -> last notification id applied

With a cipher key, ``cl_transcript.message``, ``cl_summaries.text`` and
``cl_summaries.payload`` are encrypted
(``sealing``), and so are the application's names: conversation keys and client
message ids, each with a keyed lookup digest beside it (``key_lookup``,
``client_message_lookup``); the other columns hold no message or summary text.

Where they live: on PostgreSQL, in the events' own database and schema. On SQLite,
in a separate file next to the event store (``ledger.db`` -> ``ledger.views.db``), so
the runner's writes never contend with appends for SQLite's one writer lock. For a
``memory://`` ledger they live in an in-memory SQLite database. The database comes
from ``Database.parse`` (the one place URLs are read).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
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
    TypeDecorator,
    Uuid,
    create_engine,
    event,
)
from sqlalchemy.engine import URL
from sqlalchemy.pool import StaticPool

from contextledger.domain.values.errors import ConfigurationError
from contextledger.infrastructure.persistence.database import Database
from contextledger.infrastructure.persistence.sqlite_files import check_sqlite_file, read_only_uri
from contextledger.infrastructure.readmodels.sealing import ContentCodec, SealedJSON, SealedText

__all__ = ["COUNTERS", "PREFIX", "UTCDateTime", "build_tables", "engine_for", "reason", "sqlite_engine"]

PREFIX = "cl_"

#: The counters of ``cl_token_totals`` (besides ``base_tokens``).
COUNTERS = (
    "messages",
    "appended_tokens",
    "summaries",
    "summarizer_calls",
    "summarizer_failures",
    "summarizer_input_tokens",
    "summarizer_output_tokens",
    "provider_prompt_tokens",
    "provider_completion_tokens",
    "estimated_prompt_tokens",
    "usage_records",
    #: Of ``provider_prompt_tokens``, what the replies reported read from and written
    #: to the provider's prompt cache.
    "cache_read_tokens",
    "cache_creation_tokens",
    #: Model calls a standing summary served (hits) and those made while a range
    #: waited for a new one (misses): ``UsageRecorded.reduction``.
    "reduction_hits",
    "reduction_misses",
    "retracted_messages",
    "edited_messages",
    "summaries_invalidated",
    #: Tokens of the current messages minus ``appended_tokens`` (retractions, edits).
    "live_tokens_delta",
    #: What a fork shares with its source (left out of the global sums).
    "inherited_messages",
    "inherited_tokens",
    "inherited_retracted",
    "inherited_edited",
    "inherited_summaries",
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


def build_tables(metadata: MetaData, codec: ContentCodec | None = None) -> dict[str, Table]:
    """Every read-model table, by short name, in ``metadata``; content columns sealed
    with ``codec`` (see ``sealing``)."""
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
            Column("version", Integer, primary_key=True),
            Column("role", String(16), nullable=False),
            Column("message", SealedJSON(codec), nullable=False),
            Column("tokens", Integer, nullable=False),
            Column("timestamp", UTCDateTime, nullable=False),
            Column("digest", String(64), nullable=False),
            Column("client_message_id", SealedText(codec)),
            #: ``ContentCodec.lookup(client_message_id)`` with a cipher key (``sealing``).
            Column("client_message_lookup", String(64)),
            #: Marks (see docs/operations.md): who retracted or replaced the row, and
            #: where a fork's shared history comes from (the row's own id if not inherited).
            Column("origin_id", Uuid, primary_key=True),
            Column("retracted", Boolean, nullable=False, default=False),
            Column("retracted_version", Integer),
            Column("retracted_reason", SealedText(codec)),
            Column("retracted_in", Uuid),
            Column("edited_from_version", Integer),
            Column("superseded_by_version", Integer),
            Column("superseded_in", Uuid),
        ),
        "summaries": Table(
            f"{p}summaries",
            metadata,
            Column("conversation_id", Uuid, primary_key=True),
            Column("version", Integer, primary_key=True),
            Column("from_position", Integer, nullable=False),
            Column("through_position", Integer, nullable=False),
            Column("covers_from", Integer, nullable=False),
            Column("text", SealedText(codec), nullable=False),
            Column("tokens", Integer, nullable=False),
            Column("model", String(200), nullable=False),
            Column("prompt_version", String(200), nullable=False),
            Column("input_tokens", Integer),
            Column("output_tokens", Integer),
            Column("latency_ms", Float, nullable=False),
            Column("policy_version", Integer, nullable=False),
            Column("timestamp", UTCDateTime, nullable=False),
            Column("source_digest", String(64), nullable=False),
            Column("valid", Boolean, nullable=False, default=True),
            Column("invalidated_version", Integer),
            Column("invalidated_reason", SealedText(codec)),
            #: The conversation whose SummaryInvalidated took it back.
            Column("invalidated_in", Uuid),
            #: The log that holds the summary (a fork's inherited rows: not its own id).
            Column("origin_id", Uuid, primary_key=True),
            #: A provider's compaction: its format (``"responses"``, ``"anthropic"``) and
            #: its items or blocks as they came (None for contextledger's own summaries).
            Column("native", String(32)),
            Column("payload", SealedJSON(codec)),
        ),
        "token_totals": Table(
            f"{p}token_totals",
            metadata,
            Column("conversation_id", Uuid, primary_key=True),
            #: System prompt and reply priming: full history = base + appended.
            Column("base_tokens", Integer, nullable=False, default=0),
            #: The system prompt's share of ``base_tokens`` (a change replaces it).
            Column("system_tokens", Integer, nullable=False, default=0),
            Column("tools_tokens", Integer, nullable=False, default=0),
            Column("key", SealedText(codec)),
            Column("key_lookup", String(64)),
            *(Column(name, BigInteger, nullable=False, default=0) for name in COUNTERS),
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
            Column("key", SealedText(codec)),
            Column("key_lookup", String(64)),
            Column("forked_from", Uuid),
            Column("forked_at_version", Integer),
            Column("system_prompt_version", Integer),
            Index(f"{p}conversations_started_at", "started_at"),
            Index(f"{p}conversations_key_lookup", "key_lookup"),
        ),
    }


def engine_for(
    database: Database,
    *,
    connect_timeout: float = 5.0,
    statement_timeout: float = 30.0,
    read_only: bool = False,
) -> Engine:
    """The engine of ``database``'s read models (see the module doc): PostgreSQL
    connections with libpq ``connect_timeout`` and a session ``statement_timeout``,
    SQLite with a busy timeout of ``statement_timeout``. ``read_only``: nothing is
    created (a SQLite file is opened ``mode=ro`` and must exist; a PostgreSQL session
    is ``default_transaction_read_only``)."""
    if database.kind != "postgresql":
        return sqlite_engine(database.views_path, busy_timeout=statement_timeout, read_only=read_only)
    guard = " -c default_transaction_read_only=on" if read_only else ""
    return create_engine(
        database.sqlalchemy_url(),
        pool_size=2,
        max_overflow=4,
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": max(2, int(float(database.option("connect_timeout", str(connect_timeout))))),
            "options": f"-c statement_timeout={int(statement_timeout * 1000)}{guard}",
        },
    )


def sqlite_engine(path: Path | None, *, busy_timeout: float = 30.0, read_only: bool = False) -> Engine:
    """A SQLite engine on ``path`` (None: in memory) whose writes begin IMMEDIATE
    (``read_only``: the file opened ``mode=ro``, never created)."""
    if path is None:
        engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        if not path.parent.is_dir():
            raise ConfigurationError(f"the folder of the SQLite file does not exist: {path.parent}")
        check_sqlite_file(path, must_exist=read_only, url=f"sqlite:///{path}")
        engine = create_engine(
            f"sqlite:///{read_only_uri(path)}&uri=true"
            if read_only
            else URL.create("sqlite", database=str(path)),
            connect_args={"check_same_thread": False, "timeout": busy_timeout},
        )

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN, so DDL is transactional too.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if path is not None and not read_only:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # 64 MiB of page cache (SQLite: 2 MiB) for the views: a rebuild or catch-up
        # inserts into indexes far larger than the default, page by page.
        cursor.execute("PRAGMA cache_size=-65536")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get("cl_read", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def reason(exc: BaseException) -> str:
    """What a database error says, in one line, for a ``StoreError``."""
    orig = getattr(exc, "orig", None)
    text_ = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(orig or exc).__name__}: {text_[0] if text_ else ''}"
