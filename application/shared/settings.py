"""One typed settings object; the only place that reads environment variables."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from contextledger.domain.values.errors import ConfigurationError
from contextledger.domain.values.validation import check_unicode_fields

__all__ = [
    "DEFAULT_SQLITE_FILE",
    "Settings",
    "absolute_tiktoken_cache_dir",
    "resolve_adapter",
    "split_stores",
]

DEFAULT_SQLITE_FILE = "contextledger.db"

#: Adapters are named by topic, as eventsourcing names its own persistence modules,
#: so the application layer never imports the infrastructure layer.
STORE_ENV_TOPIC = "contextledger.infrastructure.persistence.database:persistence_env"
TOKEN_COUNTER_TOPIC = "contextledger.infrastructure.counting.estimates:counter_for_model"
ANTHROPIC_COUNTER_TOPIC = "contextledger.infrastructure.counting.anthropic_counter:counting_factory"
OPENAI_SUMMARIZER_TOPIC = "contextledger.infrastructure.summarizers.openai_summarizer:OpenAISummarizer"
OFFLINE_SUMMARIZER_TOPIC = "contextledger.infrastructure.summarizers.offline_summarizer:OfflineSummarizer"


def resolve_adapter(topic: str) -> Any:
    """An adapter named by topic (the application never imports infrastructure)."""
    from eventsourcing.utils import TopicError, resolve_topic

    try:
        return resolve_topic(topic)
    except TopicError as exc:
        raise ConfigurationError(f"cannot load the adapter {topic!r}: {exc}") from exc


class Settings(BaseModel):
    """Every setting of contextledger. ``Settings.from_env()`` reads the environment.

    Environment variables: ``CONTEXTLEDGER_DATABASE_URL``, ``CONTEXTLEDGER_STORES``, ``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``, ``CONTEXTLEDGER_SUMMARIZER_MODEL``,
    ``CONTEXTLEDGER_SUMMARIZER_TIMEOUT``, ``CONTEXTLEDGER_MAX_CONCURRENT_SUMMARIES``,
    ``CONTEXTLEDGER_CIPHER_KEY``, ``CONTEXTLEDGER_KEY_SCOPE``, ``CONTEXTLEDGER_KEY_STORE``,
    ``CONTEXTLEDGER_COMPRESS``,
    ``CONTEXTLEDGER_POLL_INTERVAL``, ``CONTEXTLEDGER_SNAPSHOT_INTERVAL``,
    ``CONTEXTLEDGER_FALLBACK_AFTER_ATTEMPTS``, ``CONTEXTLEDGER_RETRY_TOTAL_SECONDS``,
    ``CONTEXTLEDGER_TRACING``, ``CONTEXTLEDGER_WRITE_DEADLINE``,
    ``CONTEXTLEDGER_CONNECT_TIMEOUT``, ``CONTEXTLEDGER_STATEMENT_TIMEOUT``,
    ``CONTEXTLEDGER_MAX_MESSAGE_BYTES``, ``CONTEXTLEDGER_MAX_MESSAGE_TOKENS``,
    ``CONTEXTLEDGER_MAX_TOOLS_BYTES``, ``CONTEXTLEDGER_RETENTION_IDLE_DAYS``,
    ``CONTEXTLEDGER_ANTHROPIC_COUNT_TOKENS``, ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``,
    ``CONTEXTLEDGER_COUNT_TOKENS_TIMEOUT``, ``CONTEXTLEDGER_CHECK_DIGESTS``,
    ``CONTEXTLEDGER_NATIVE_READABLE``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = f"sqlite:///{DEFAULT_SQLITE_FILE}"
    #: Several stores (shards): conversations are spread over them by a stable hash of
    #: their id (``docs/scale.md``). Empty: the one store ``database_url``. The list only
    #: ever grows at its end; ``database_url`` is then its first store.
    stores: tuple[str, ...] = ()
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    summarizer_model: str = "gpt-4o-mini"
    summarizer_timeout: float = Field(default=60.0, gt=0)
    #: Summaries in flight at once (different conversations); one per conversation.
    max_concurrent_summaries: int = Field(default=4, ge=1, le=256)
    #: Backoff for failed summaries: base * 2**(attempt-1), capped.
    retry_base_seconds: float = Field(default=0.5, ge=0)
    retry_max_seconds: float = Field(default=60.0, ge=0)
    #: After this many failed attempts at one range, the offline summarizer makes its
    #: summary, so a provider that keeps failing never stalls a conversation (None: never).
    fallback_after_attempts: int | None = Field(default=5, ge=1)
    #: After a range has failed for this long (seconds from its first failure), the
    #: offline summarizer makes its summary at the next attempt (None: no time limit).
    #: Non-retryable failures (401/403, invalid requests) hand over at once.
    retry_total_seconds: float | None = Field(default=300.0, gt=0)
    #: How often followers of a SQLite store poll the log (SQLite cannot notify).
    poll_interval: float = Field(default=0.05, gt=0)
    snapshot_interval: int = Field(default=50, ge=2)
    #: 32-byte base64 AES key (the master key); None: no encryption at rest.
    cipher_key: SecretStr | None = None
    #: What new events and snapshots are encrypted under: ``subject``,
    #: a random data key per data subject (a conversation's own, or the one it names),
    #: kept in the store's key table wrapped by the cipher key (unwrapped without one:
    #: erasure, not encryption at rest), so that erasing a subject destroys one key;
    #: ``store``, the cipher key itself (in clear without one). Either reads both.
    key_scope: Literal["subject", "store"] = "subject"
    #: Where the key table lives (``docs/privacy.md``, "Keys apart from the log"): None,
    #: in the event store itself; else a URL of another SQLite file (beside a SQLite
    #: store) or PostgreSQL database (beside a PostgreSQL store), so that a backup of
    #: the event store holds no key and an erasure is one deletion in a small database.
    key_store: str | None = None
    compress: bool = False
    #: How long one write (append, edit, summary record ...) may wait for the
    #: conversation's other writers and retry optimistic-concurrency conflicts before
    #: ``ConcurrencyError`` (with ``attempts`` and ``seconds``); while the store is away,
    #: the outage's ``StoreError`` instead.
    write_deadline: float = Field(default=5.0, gt=0, le=3600)
    #: How long ``close()`` waits for the calls in flight to finish before it
    #: returns (new calls are refused at once with ``LedgerClosedError``); a call
    #: still running then keeps the store open until it ends.
    close_timeout: float = Field(default=10.0, ge=0, le=3600)
    #: Seconds to establish a PostgreSQL connection (libpq ``connect_timeout``,
    #: whole seconds, at least 2) and the longest wait for a pooled connection; a URL's
    #: ``?connect_timeout=`` wins. While the server is away, a call ends within
    #: ``connect_timeout + write_deadline`` (and 2 s of slack) with ``StoreError``.
    connect_timeout: float = Field(default=5.0, gt=0, le=3600)
    #: Longest statement: PostgreSQL ``statement_timeout``; SQLite's busy timeout
    #: (how long a write waits for another process's lock, and for another thread's
    #: write in this process). Then ``StoreError``
    #: with ``cause`` ``statement_timeout`` or ``busy``.
    statement_timeout: float = Field(default=30.0, gt=0, le=86400)
    #: Largest message accepted, in UTF-8 bytes of its JSON and in tokens
    #: (``InvalidMessageError`` naming the limit).
    max_message_bytes: int = Field(default=1_000_000, ge=1024)
    max_message_tokens: int = Field(default=100_000, ge=16)
    #: Largest set of tool definitions accepted (``start(tools=...)``,
    #: ``change_tools``), in UTF-8 bytes of their JSON, checked before tokens are counted.
    max_tools_bytes: int = Field(default=1_000_000, ge=1024)
    #: Run the summarization policy inside this process (False: a worker does it).
    run_policy: bool = True
    #: Open the store read-only: create nothing, run no policy, refuse every write
    #: (``ReadOnlyError``); a missing schema or table is ``SchemaMissingError``.
    read_only: bool = False
    #: Retention: the worker erases the conversations idle (no event) for this many
    #: days, a data subject once all its conversations are (``docs/privacy.md``;
    #: needs ``key_scope`` "subject"). None: kept until erased by hand.
    retention_idle_days: int | None = Field(default=None, ge=1, le=365_000)
    #: OpenTelemetry spans for append, context, summarize and rebuild (the ``otel`` extra).
    tracing: bool = False
    #: Count Claude conversations' messages with Anthropic's token-counting endpoint
    #: (``messages/count_tokens``, the ``anthropic`` extra; needs ``anthropic_api_key``),
    #: each message once, the estimate standing in whenever a call fails or times out
    #: (after ``count_tokens_timeout`` seconds). False: Claude counts are estimates.
    anthropic_count_tokens: bool = False
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    count_tokens_timeout: float = Field(default=5.0, gt=0, le=600)
    #: Whether ``context()`` and ``working_memory()`` check the stored log's digests
    #: (every message's chain link and every summary's source) before they answer:
    #: ``off``; ``load``, when this process loads the conversation from the store (not
    #: from its cache); ``read``, on every read. A mismatch raises ``LogDamagedError``
    #: naming the version (``docs/benchmarks.md`` measures what each level costs).
    check_digests: Literal["off", "load", "read"] = "off"
    #: When the readable summary of an opaque OpenAI compaction (what every format but
    #: the Responses one sends in its place) is made by the conversation's summarizer:
    #: ``eager``, before the append that brings the compaction returns (the append
    #: waits for the summarizer; no read ever does); ``on_demand``, at the first read
    #: in another format (``context()``, ``working_memory()``), recorded then
    #: (``NativeSummaryReadable``) so every later read at any version gives the same
    #: text; a conversation read only in the Responses format never pays for it.
    native_readable: Literal["eager", "on_demand"] = "eager"

    def __init__(self, **data: Any) -> None:
        stores = data.get("stores")
        if isinstance(stores, str):
            data["stores"] = split_stores(stores)
        try:
            super().__init__(**data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"]))
            text = first["msg"].removeprefix("Value error, ")
            raise ConfigurationError(
                f"invalid setting {where}: {text}" if where else f"invalid settings: {text}",
                setting=where or None,
            ) from exc

    @model_validator(mode="after")
    def _first_store(self) -> Settings:
        check_unicode_fields(self)
        if self.stores:
            if any(not isinstance(u, str) or not u.strip() for u in self.stores):
                raise ValueError("every store must be a non-empty URL")
            if len(set(self.stores)) != len(self.stores):
                raise ValueError("a store is listed twice")
            if "database_url" in self.model_fields_set and self.database_url != self.stores[0]:
                raise ValueError("database_url must be the first of stores (or not given)")
            object.__setattr__(self, "database_url", self.stores[0])
        if self.anthropic_count_tokens and self.anthropic_api_key is None:
            raise ValueError("anthropic_count_tokens needs anthropic_api_key (ANTHROPIC_API_KEY)")
        if self.read_only and self.run_policy:
            if "run_policy" in self.model_fields_set:
                raise ValueError("a read-only ledger runs no summarization policy (run_policy)")
            object.__setattr__(self, "run_policy", False)
        return self

    @property
    def store_urls(self) -> tuple[str, ...]:
        """The URLs of every store, the first one first (one: not sharded)."""
        return self.stores or (self.database_url,)

    def for_store(self, url: str) -> Settings:
        """These settings on the one store ``url`` (a shard's own settings)."""
        return self.model_copy(update={"database_url": url, "stores": ()})

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if name == "stores":
                value = tuple(masked_url(u) for u in value)
            shown = name in ("database_url", "key_store") and value is not None
            yield name, (masked_url(value) if shown else value)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        if environ is None:
            absolute_tiktoken_cache_dir()
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        mapping = {
            "CONTEXTLEDGER_DATABASE_URL": "database_url",
            "CONTEXTLEDGER_STORES": "stores",
            "OPENAI_API_KEY": "openai_api_key",
            "OPENAI_BASE_URL": "openai_base_url",
            "CONTEXTLEDGER_SUMMARIZER_MODEL": "summarizer_model",
            "CONTEXTLEDGER_SUMMARIZER_TIMEOUT": "summarizer_timeout",
            "CONTEXTLEDGER_MAX_CONCURRENT_SUMMARIES": "max_concurrent_summaries",
            "CONTEXTLEDGER_CIPHER_KEY": "cipher_key",
            "CONTEXTLEDGER_KEY_SCOPE": "key_scope",
            "CONTEXTLEDGER_KEY_STORE": "key_store",
            "CONTEXTLEDGER_COMPRESS": "compress",
            "CONTEXTLEDGER_POLL_INTERVAL": "poll_interval",
            "CONTEXTLEDGER_SNAPSHOT_INTERVAL": "snapshot_interval",
            "CONTEXTLEDGER_FALLBACK_AFTER_ATTEMPTS": "fallback_after_attempts",
            "CONTEXTLEDGER_RETRY_TOTAL_SECONDS": "retry_total_seconds",
            "CONTEXTLEDGER_TRACING": "tracing",
            "CONTEXTLEDGER_WRITE_DEADLINE": "write_deadline",
            "CONTEXTLEDGER_CLOSE_TIMEOUT": "close_timeout",
            "CONTEXTLEDGER_CONNECT_TIMEOUT": "connect_timeout",
            "CONTEXTLEDGER_STATEMENT_TIMEOUT": "statement_timeout",
            "CONTEXTLEDGER_MAX_MESSAGE_BYTES": "max_message_bytes",
            "CONTEXTLEDGER_MAX_MESSAGE_TOKENS": "max_message_tokens",
            "CONTEXTLEDGER_MAX_TOOLS_BYTES": "max_tools_bytes",
            "CONTEXTLEDGER_RETENTION_IDLE_DAYS": "retention_idle_days",
            "CONTEXTLEDGER_ANTHROPIC_COUNT_TOKENS": "anthropic_count_tokens",
            "ANTHROPIC_API_KEY": "anthropic_api_key",
            "ANTHROPIC_BASE_URL": "anthropic_base_url",
            "CONTEXTLEDGER_COUNT_TOKENS_TIMEOUT": "count_tokens_timeout",
            "CONTEXTLEDGER_CHECK_DIGESTS": "check_digests",
            "CONTEXTLEDGER_NATIVE_READABLE": "native_readable",
        }
        for key, field in mapping.items():
            if env.get(key):
                values[field] = None if env[key].lower() == "none" else env[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def split_stores(text: str) -> tuple[str, ...]:
    """The store URLs of ``CONTEXTLEDGER_STORES``: separated by commas or whitespace."""
    return tuple(part for part in re.split(r"[\s,]+", text) if part)


def absolute_tiktoken_cache_dir() -> str | None:
    """Make a relative ``TIKTOKEN_CACHE_DIR`` absolute, against the working directory
    of now (start-up), so that it still names the same folder for tiktoken after a
    change of directory and for child processes started elsewhere. Returns the value."""
    value = os.environ.get("TIKTOKEN_CACHE_DIR")
    if value and not os.path.isabs(value):
        value = os.path.abspath(os.path.expanduser(value))
        os.environ["TIKTOKEN_CACHE_DIR"] = value
    return value


#: The user-info part of a URL: up to the *last* ``@`` before the path, so a password
#: holding ``@`` is masked whole.
_USERINFO = re.compile(r"^([a-z0-9+.-]+://)([^/?#]*)@", re.IGNORECASE)
#: Query parameters that carry secrets (``?password=...``, ``&sslpassword=...``).
_SECRET_PARAM = re.compile(
    r"([?&](?:password|passwd|pass|sslpassword|secret|token|key|api_key)=)[^&#]*", re.IGNORECASE
)


def masked_url(url: Any) -> Any:
    """A URL with its password (in the user info or a query parameter) shown as
    ``***``, for reprs, logs and messages. The one masker of the library."""
    if not isinstance(url, str):
        return url
    match = _USERINFO.match(url)
    if match and ":" in match.group(2):
        user = match.group(2).split(":", 1)[0]
        url = f"{match.group(1)}{user}:***@{url[match.end() :]}"
    return _SECRET_PARAM.sub(r"\1***", url)
