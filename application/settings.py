"""One typed settings object; the only place that reads environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from contextledger.domain.errors import ConfigurationError
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

__all__ = ["DEFAULT_SQLITE_FILE", "Settings", "persistence_env"]

DEFAULT_SQLITE_FILE = "contextledger.db"

#: Adapters are named by topic, as eventsourcing names its own persistence modules,
#: so the application layer never imports the infrastructure layer.
MAPPER_TOPIC = "contextledger.infrastructure.mapper:PydanticMapper"
TRANSCODER_TOPIC = "contextledger.infrastructure.mapper:JSONBytesTranscoder"
TOKEN_COUNTER_TOPIC = "contextledger.infrastructure.tokens:TiktokenCounter"
OPENAI_SUMMARIZER_TOPIC = "contextledger.infrastructure.openai_summarizer:OpenAISummarizer"
OFFLINE_SUMMARIZER_TOPIC = "contextledger.infrastructure.offline_summarizer:OfflineSummarizer"


class Settings(BaseModel):
    """Every setting of contextledger. ``Settings.from_env()`` reads the environment.

    Environment variables: ``CONTEXTLEDGER_DATABASE_URL``, ``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``, ``CONTEXTLEDGER_SUMMARIZER_MODEL``,
    ``CONTEXTLEDGER_SUMMARIZER_TIMEOUT``, ``CONTEXTLEDGER_MAX_CONCURRENT_SUMMARIES``,
    ``CONTEXTLEDGER_CIPHER_KEY``, ``CONTEXTLEDGER_COMPRESS``,
    ``CONTEXTLEDGER_POLL_INTERVAL``, ``CONTEXTLEDGER_SNAPSHOT_INTERVAL``,
    ``CONTEXTLEDGER_FALLBACK_AFTER_ATTEMPTS``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = f"sqlite:///{DEFAULT_SQLITE_FILE}"
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
    #: How often followers of a SQLite store poll the log (SQLite cannot notify).
    poll_interval: float = Field(default=0.05, gt=0)
    snapshot_interval: int = Field(default=50, ge=2)
    #: 32-byte base64 AES key (eventsourcing's cipher); None: no encryption at rest.
    cipher_key: SecretStr | None = None
    compress: bool = False
    #: Run the summarization policy inside this process (False: a worker does it).
    run_policy: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        mapping = {
            "CONTEXTLEDGER_DATABASE_URL": "database_url",
            "OPENAI_API_KEY": "openai_api_key",
            "OPENAI_BASE_URL": "openai_base_url",
            "CONTEXTLEDGER_SUMMARIZER_MODEL": "summarizer_model",
            "CONTEXTLEDGER_SUMMARIZER_TIMEOUT": "summarizer_timeout",
            "CONTEXTLEDGER_MAX_CONCURRENT_SUMMARIES": "max_concurrent_summaries",
            "CONTEXTLEDGER_CIPHER_KEY": "cipher_key",
            "CONTEXTLEDGER_COMPRESS": "compress",
            "CONTEXTLEDGER_POLL_INTERVAL": "poll_interval",
            "CONTEXTLEDGER_SNAPSHOT_INTERVAL": "snapshot_interval",
            "CONTEXTLEDGER_FALLBACK_AFTER_ATTEMPTS": "fallback_after_attempts",
        }
        for key, field in mapping.items():
            if env.get(key):
                values[field] = None if env[key].lower() == "none" else env[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigurationError(
                f"invalid setting {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from None


def persistence_env(settings: Settings) -> dict[str, str]:
    """Translate ``settings.database_url`` (and cipher, compression) to eventsourcing's env."""
    url = settings.database_url
    parts = urlsplit(url)
    env: dict[str, str] = {
        "MAPPER_TOPIC": MAPPER_TOPIC,
        "TRANSCODER_TOPIC": TRANSCODER_TOPIC,
        "IS_SNAPSHOTTING_ENABLED": "y",
    }
    scheme = parts.scheme.split("+")[0]
    if scheme == "memory":
        env["PERSISTENCE_MODULE"] = "eventsourcing.popo"
    elif scheme == "sqlite":
        path = unquote(url.split("://", 1)[1])
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ConfigurationError("a sqlite URL needs a file: sqlite:///path/to/file.db", url=url)
        if path != ":memory:":
            folder = Path(path).expanduser().resolve().parent
            if not folder.is_dir():
                raise ConfigurationError(f"the folder of the SQLite file does not exist: {folder}", url=url)
        env.update(
            PERSISTENCE_MODULE="eventsourcing.sqlite",
            SQLITE_DBNAME=path if path == ":memory:" else str(Path(path).expanduser()),
            SQLITE_LOCK_TIMEOUT="30",
        )
    elif scheme in ("postgresql", "postgres"):
        dbname = parts.path.lstrip("/")
        if not dbname:
            raise ConfigurationError("a postgresql URL needs a database name", url=_redact(url))
        query = parse_qs(parts.query)
        env.update(
            PERSISTENCE_MODULE="eventsourcing.postgres",
            POSTGRES_DBNAME=unquote(dbname),
            POSTGRES_HOST=parts.hostname or "127.0.0.1",
            POSTGRES_PORT=str(parts.port or 5432),
            POSTGRES_USER=unquote(parts.username or "postgres"),
            POSTGRES_PASSWORD=unquote(parts.password or ""),
            POSTGRES_POOL_SIZE=query.get("pool_size", ["4"])[0],
            POSTGRES_MAX_OVERFLOW=query.get("max_overflow", ["8"])[0],
            POSTGRES_CONNECT_TIMEOUT=query.get("connect_timeout", ["10"])[0],
            POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT="30",
            # Check a pooled connection before use, so a database restart costs a
            # reconnect instead of a failed command.
            POSTGRES_PRE_PING="y",
        )
        if "schema" in query:
            env["POSTGRES_SCHEMA"] = query["schema"][0]
    else:
        raise ConfigurationError(
            "unsupported database URL: use memory://, sqlite:///path.db or "
            "postgresql://user@host:5432/db",
            url=_redact(url),
        )
    if settings.compress:
        env["COMPRESSOR_TOPIC"] = "eventsourcing.compressor:ZlibCompressor"
    if settings.cipher_key is not None:
        env["CIPHER_TOPIC"] = "eventsourcing.cipher:AESCipher"
        env["CIPHER_KEY"] = settings.cipher_key.get_secret_value()
    return env


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
