"""Database URLs, parsed once into one ``Database`` value.

The event store (eventsourcing's persistence environment), the SQL read models and
the command line all take their database from ``Database.parse(url)``:

- ``memory://`` -- the in-memory store (tests);
- ``sqlite:///path/to/file.db`` -- a SQLite file (its read models in ``file.views.db``);
- ``postgresql://user:password@host:5432/db?schema=s&pool_size=4&connect_timeout=5``.

A ``Database`` never shows its password: ``str()``, ``repr()`` and ``masked`` hide it.

The URL is parsed and rendered as SQLAlchemy's ``make_url`` and
``URL.render_as_string`` do (``DbUrl``, ``parse_url``: the same regular expression,
``parse_qsl`` for the query, a repeated query key as a tuple, user, password and
database unquoted, the port a number), without importing SQLAlchemy: every process
that opens a ledger parses its URL, and SQLAlchemy, needed only by the SQL read
models, cost about a third of a second of CPU at every start (a CLI command, a
worker). ``DbUrl.to_sqlalchemy`` gives SQLAlchemy's own ``URL`` where an engine is made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode

from contextledger.application.shared.settings import masked_url
from contextledger.domain.values.errors import ConfigurationError, StoreError
from contextledger.infrastructure.persistence.sqlite_files import read_only_uri

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from contextledger.application.shared.settings import Settings

__all__ = ["Database", "DbUrl", "UrlSyntaxError", "key_store_env", "mask_url", "parse_url", "persistence_env"]

#: SQLAlchemy 2's pattern (``sqlalchemy.engine.url._parse_url``).
_PATTERN = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)


class UrlSyntaxError(ValueError):
    """The text is not a URL of the ``scheme://[user[:password]@][host][:port][/db][?query]`` form."""


@dataclass(frozen=True)
class DbUrl:
    """The parts of a database URL (the attributes of SQLAlchemy's ``URL`` that the
    ledger reads)."""

    drivername: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    host: str | None = None
    port: int | None = None
    database: str | None = None
    query: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.render_as_string(hide_password=False))

    def get_backend_name(self) -> str:
        """The scheme without its driver (``postgresql`` of ``postgresql+psycopg``)."""
        return self.drivername.split("+", 1)[0]

    def render_as_string(self, hide_password: bool = True) -> str:
        """The URL as text, as SQLAlchemy renders it (password ``***`` unless asked)."""
        s = self.drivername + "://"
        if self.username is not None:
            s += quote(self.username, safe=" +")
            if self.password is not None:
                s += ":" + ("***" if hide_password else quote(str(self.password), safe=" +"))
            s += "@"
        if self.host is not None:
            s += f"[{self.host}]" if ":" in self.host else self.host
        if self.port is not None:
            s += ":" + str(self.port)
        if self.database is not None:
            s += "/" + quote(self.database, safe=" +/")
        if self.query:
            s += "?" + "&".join(
                f"{quote_plus(k)}={quote_plus(element)}"
                for k in sorted(self.query)
                for element in _as_tuple(self.query[k])
            )
        return s

    def update_query_dict(self, updates: Mapping[str, str]) -> DbUrl:
        """This URL with ``updates`` set in its query (replacing what they name)."""
        return replace(self, query={**self.query, **updates})

    def to_sqlalchemy(self) -> URL:
        """SQLAlchemy's ``URL`` of the same parts (imports SQLAlchemy)."""
        from sqlalchemy.engine import URL

        return URL.create(
            self.drivername,
            username=self.username,
            password=self.password,
            host=self.host,
            port=self.port,
            database=self.database,
            query=dict(self.query),
        )


def _as_tuple(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else value


def parse_url(text: str) -> DbUrl:
    """The parts of ``text``; ``UrlSyntaxError`` if it does not have the URL form, and
    ``ValueError`` if its port is not a number (as ``make_url`` raises them)."""
    found = _PATTERN.match(text)
    if found is None:
        raise UrlSyntaxError("Could not parse a database URL from the given text")
    parts = found.groupdict()
    query: dict[str, str | tuple[str, ...]] = {}
    if parts["query"] is not None:
        for key, value in parse_qsl(parts["query"]):
            query[key] = (*_as_tuple(query[key]), value) if key in query else value
    username, password, database = (
        None if parts[name] is None else unquote(parts[name]) for name in ("username", "password", "database")
    )
    return DbUrl(
        drivername=parts["name"],
        username=username,
        password=password,
        host=parts["ipv4host"] or parts["ipv6host"],
        port=None if parts["port"] is None else int(parts["port"]),
        database=database,
        query=query,
    )


Kind = Literal["memory", "sqlite", "postgresql"]

_SCHEMES: dict[str, Kind] = {
    "memory": "memory",
    "sqlite": "sqlite",
    "postgresql": "postgresql",
    "postgres": "postgresql",
}
_SQLITE = {"PERSISTENCE_MODULE": "contextledger.infrastructure.persistence.stores:SQLiteStoreFactory"}
_READ_ONLY_SQLITE = {
    "PERSISTENCE_MODULE": "contextledger.infrastructure.persistence.stores:ReadOnlySQLiteFactory"
}
_SUPPORTED = "use memory://, sqlite:///path.db or postgresql://user@host:5432/db"


def _read_only_uri(path: Path) -> str:
    """The ``file:`` URI that opens ``path`` read-only (never creating it)."""
    return read_only_uri(path)


def mask_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (``Settings``' one masker)."""
    return str(masked_url(url))


#: A libpq multi-host URL's server list: ``scheme://[user@]h1:p1,h2:p2/db...``.
_MULTI_HOST = re.compile(
    r"^(?P<scheme>postgres(?:ql)?(?:\+\w+)?://)(?P<user>[^@/?]*@)?(?P<hosts>[^@/?]*,[^/?]*)(?P<rest>.*)$"
)


def _hosts_in_query(url: str) -> str:
    """A multi-host URL (``h1:p1,h2:p2`` in its authority, which SQLAlchemy cannot
    parse) in the form SQLAlchemy's psycopg dialect takes: ``/db?host=h1:p1&host=h2:p2``."""
    found = _MULTI_HOST.match(url.strip())
    if found is None:
        return url
    hosts = [part for part in found["hosts"].split(",") if part]
    rest = found["rest"]
    path, _, query = rest.partition("?")
    extra = urlencode([("host", h if ":" in h else f"{h}:5432") for h in hosts])
    return f"{found['scheme']}{found['user'] or ''}{path or '/'}?{extra}{'&' + query if query else ''}"


@dataclass(frozen=True)
class Database:
    """Where a ledger keeps its events and read models."""

    kind: Kind
    url: DbUrl = field(repr=False)
    #: The SQLite file (None for an in-memory SQLite database or another kind).
    path: Path | None = None
    #: The PostgreSQL schema (``?schema=``), None for the default.
    schema: str | None = None

    @classmethod
    def parse(cls, url: str) -> Database:
        """Parse ``url``; raise ``ConfigurationError`` (password masked) if unusable."""
        if not isinstance(url, str) or not url.strip():
            raise ConfigurationError(f"the database URL must be a non-empty string; {_SUPPORTED}")
        if url.strip() == "memory://":
            return cls("memory", parse_url("sqlite://"))
        try:
            parsed = parse_url(_hosts_in_query(url))
        except ValueError as exc:
            raise ConfigurationError(
                f"cannot parse the database URL: {_SUPPORTED}", url=mask_url(url)
            ) from exc
        kind = _SCHEMES.get(parsed.get_backend_name())
        if kind is None or kind == "memory":
            raise ConfigurationError(f"unsupported database URL: {_SUPPORTED}", url=mask_url(url))
        if kind == "sqlite":
            raw = parsed.database or ""
            if not raw:
                raise ConfigurationError(
                    "a sqlite URL needs a file: sqlite:///path/to/file.db", url=mask_url(url)
                )
            path = None if raw == ":memory:" else Path(raw).expanduser()
            return cls("sqlite", parsed, path=path)
        if not parsed.database:
            raise ConfigurationError("a postgresql URL needs a database name", url=mask_url(url))
        schema = parsed.query.get("schema")
        found = cls("postgresql", parsed, schema=schema if isinstance(schema, str) else None)
        try:
            found.servers  # noqa: B018 - each host:port of a multi-host URL checked now
        except ValueError:
            raise ConfigurationError(
                f"a port of a multi-host URL is not a number: {_SUPPORTED}", url=mask_url(url)
            ) from None
        return found

    # -- what it shows --------------------------------------------------------------

    @property
    def masked(self) -> str:
        """The URL as given, password hidden."""
        if self.kind == "memory":
            return "memory://"
        return mask_url(self.url.render_as_string(hide_password=False))

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"Database({self.masked!r})"

    # -- SQLite ---------------------------------------------------------------------

    @property
    def views_path(self) -> Path | None:
        """Where the read models of a SQLite file live (None: not a SQLite file)."""
        if self.path is None:
            return None
        p = self.path
        return p.with_name(f"{p.stem}.views{p.suffix or '.db'}")

    def exists(self) -> bool:
        """Whether the store is there already (memory and PostgreSQL: assumed); a path
        the system cannot look up (a name too long, a file where a folder should be)
        is a ``StoreError``, as opening the store there would be."""
        if self.path is None:
            return True
        try:
            return self.path.exists()
        except OSError as exc:
            shown = str(self.path) if len(str(self.path)) <= 80 else f"{str(self.path)[:77]}..."
            raise StoreError(f"cannot open the event store: {exc.strerror or exc} ({shown})") from exc

    # -- PostgreSQL -----------------------------------------------------------------

    def option(self, name: str, default: str) -> str:
        """A query option of the URL (``pool_size``, ``connect_timeout`` ...)."""
        value = self.url.query.get(name, default)
        return value if isinstance(value, str) else value[0]

    @property
    def host(self) -> str:
        return self.url.host or "127.0.0.1"

    @property
    def port(self) -> int:
        return self.url.port or 5432

    def sqlalchemy_url(self) -> URL:
        """The URL SQLAlchemy engines of the read models connect with (psycopg 3)."""
        if self.kind != "postgresql":
            raise ConfigurationError("only a PostgreSQL database has a server URL", url=self.masked)
        servers = self.servers
        if len(servers) == 1 and "host" not in self.url.query:
            return DbUrl(
                "postgresql+psycopg",
                username=self.url.username or "postgres",
                password=self.url.password,
                host=self.host,
                port=self.port,
                database=self.url.database,
            ).to_sqlalchemy()
        query: dict[str, str | tuple[str, ...]] = {"host": tuple(f"{h}:{p}" for h, p in servers)}
        attrs = self.url.query.get("target_session_attrs")
        if attrs:
            query["target_session_attrs"] = attrs if isinstance(attrs, str) else attrs[0]
        return DbUrl(
            "postgresql+psycopg",
            username=self.url.username or "postgres",
            password=self.url.password,
            database=self.url.database,
            query=query,
        ).to_sqlalchemy()

    @property
    def servers(self) -> list[tuple[str, int]]:
        """Every server the URL names, in order: one, or those of a libpq multi-host URL
        (``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``), which
        libpq tries in turn, keeping the first that has the session attributes asked."""
        given = self.url.query.get("host")
        if not given:
            return [(self.host, self.port)]
        found = []
        for item in (given,) if isinstance(given, str) else given:
            host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
            found.append((host, int(port) if port else 5432))
        return found

    @property
    def libpq_hosts(self) -> tuple[str, str]:
        """``host`` and ``port`` as libpq takes them: comma-separated lists."""
        servers = self.servers
        return ",".join(h for h, _ in servers), ",".join(str(p) for _, p in servers)

    @property
    def where(self) -> str:
        """The server(s), for messages: ``host:port[,host:port]``."""
        return ",".join(f"{h}:{p}" for h, p in self.servers)

    # -- the event store --------------------------------------------------------------

    def persistence_env(self, *, read_only: bool = False) -> dict[str, str]:
        """eventsourcing's persistence settings for this database (``read_only``: see
        ``stores``: nothing is created, and the store refuses writes)."""
        if self.kind == "memory":
            return {"PERSISTENCE_MODULE": "contextledger.infrastructure.persistence.recorders:MemoryFactory"}
        if self.kind == "sqlite":
            if self.path is not None:
                folder = self.path.resolve().parent
                if not folder.is_dir():
                    raise ConfigurationError(
                        f"the folder of the SQLite file does not exist: {folder}", url=self.masked
                    )
            if self.path is None:
                return {**_SQLITE, "SQLITE_DBNAME": ":memory:", "SQLITE_LOCK_TIMEOUT": "30"}
            # eventsourcing's factory with a leaner save (the same statements), the file
            # checked first; read-only: opened mode=ro (``stores``).
            return {
                **(_READ_ONLY_SQLITE if read_only else _SQLITE),
                "SQLITE_DBNAME": _read_only_uri(self.path) if read_only else str(self.path),
                "CL_SQLITE_PATH": str(self.path),
                "SQLITE_LOCK_TIMEOUT": "30",
            }
        env = {
            # eventsourcing's factory with a one-round-trip, group-committed recorder.
            "PERSISTENCE_MODULE": (
                "contextledger.infrastructure.persistence.recorders:PostgresConversationFactory"
            ),
            "POSTGRES_DBNAME": self.url.database or "",
            "POSTGRES_HOST": self.libpq_hosts[0],
            "POSTGRES_PORT": self.libpq_hosts[1],
            "POSTGRES_USER": self.url.username or "postgres",
            "POSTGRES_PASSWORD": self.url.password or "",
            "POSTGRES_POOL_SIZE": self.option("pool_size", "4"),
            "POSTGRES_MAX_OVERFLOW": self.option("max_overflow", "8"),
            "POSTGRES_CONNECT_TIMEOUT": self.option("connect_timeout", "5"),
            "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "30",
            # No check of a pooled connection before each use (a round trip per
            # checkout): the recorder replaces dead connections when one fails and
            # tries once more (a database restart costs a reconnect, not an error).
        }
        if self.schema is not None:
            env["POSTGRES_SCHEMA"] = self.schema
        attrs = self.option("target_session_attrs", "")
        if attrs:
            # A read-only ledger's sessions are read-only themselves, so libpq's
            # ``read-write`` check would refuse every server: ``primary`` asks what
            # ``read-write`` means here (a server not in recovery).
            env["CL_PG_TARGET_SESSION_ATTRS"] = "primary" if read_only and attrs == "read-write" else attrs
        if read_only:
            env["PERSISTENCE_MODULE"] = (
                "contextledger.infrastructure.persistence.stores:ReadOnlyPostgresFactory"
            )
        return env


def persistence_env(settings: Settings) -> dict[str, str]:
    """The whole eventsourcing environment for ``settings``: store, mapper, cipher."""
    env = {
        # Each record under its conversation's data-subject key (``subject_mapper``),
        # wrapped under the master key when there is one (``key_modes``); records
        # written before per-subject keys are read as before.
        "MAPPER_TOPIC": "contextledger.infrastructure.keys.subject_mapper:SubjectMapper",
        "CL_KEY_SCOPE": settings.key_scope,
        "TRANSCODER_TOPIC": "contextledger.infrastructure.keys.mapper:JSONBytesTranscoder",
        "IS_SNAPSHOTTING_ENABLED": "y",
        **Database.parse(settings.database_url).persistence_env(read_only=settings.read_only),
    }
    kind = Database.parse(settings.database_url).kind
    if kind == "sqlite":
        env["SQLITE_LOCK_TIMEOUT"] = str(max(1, round(settings.statement_timeout)))
        env["CL_SQLITE_POOL_TIMEOUT"] = str(settings.statement_timeout)
    elif kind == "postgresql":
        # The lean recorder's factory extends TimedPostgresFactory: libpq connect_timeout
        # and a session statement_timeout on every connection.
        database = Database.parse(settings.database_url)
        seconds = database.option("connect_timeout", str(settings.connect_timeout))
        env["CL_PG_CONNECT_TIMEOUT"] = str(max(2, round(float(seconds))))
        env["CL_PG_STATEMENT_TIMEOUT_MS"] = str(int(settings.statement_timeout * 1000))
        env["POSTGRES_CONNECT_TIMEOUT"] = env["CL_PG_CONNECT_TIMEOUT"]
    if settings.key_store is not None:
        env.update(key_store_env(Database.parse(settings.database_url), settings.key_store))
    if settings.compress:
        env["COMPRESSOR_TOPIC"] = "eventsourcing.compressor:ZlibCompressor"
    if settings.cipher_key is not None:
        # OpenSSL's AES-GCM in eventsourcing's AESCipher byte layout (``aead``): stores
        # written with eventsourcing's cipher load unchanged.
        env["CIPHER_TOPIC"] = "contextledger.infrastructure.keys.aead:AESGCMCipher"
        env["CIPHER_KEY"] = settings.cipher_key.get_secret_value()
    return env


def key_store_env(events: Database, url: str) -> dict[str, str]:
    """The environment of the key store ``url`` beside the event store ``events``
    (``Settings.key_store``; ``infrastructure/keys/key_store.py`` reads it): another
    SQLite file beside a SQLite store, another PostgreSQL database beside a
    PostgreSQL store; anything else is ``ConfigurationError``."""
    keys = Database.parse(url)
    if events.kind == "memory" or keys.kind != events.kind:
        raise ConfigurationError(
            f"the key store must be of the event store's kind: another SQLite file beside a "
            f"SQLite store, another PostgreSQL database beside a PostgreSQL store (key store "
            f"{keys.masked}, event store {events.masked})",
            setting="key_store",
            url=keys.masked,
        )
    if keys.kind == "sqlite":
        if keys.path is None or events.path is None:
            raise ConfigurationError("a key store needs a SQLite file", setting="key_store", url=keys.masked)
        if keys.path.resolve() == events.path.resolve():
            raise ConfigurationError(
                "the key store is the event store itself: leave key_store unset for that",
                setting="key_store",
                url=keys.masked,
            )
        folder = keys.path.resolve().parent
        if not folder.is_dir():
            raise ConfigurationError(
                f"the folder of the key store's SQLite file does not exist: {folder}",
                setting="key_store",
                url=keys.masked,
            )
        return {"CL_KEY_STORE": keys.masked, "CL_KEY_STORE_PATH": str(keys.path.resolve())}
    same = (keys.servers, keys.url.database) == (events.servers, events.url.database)
    if same:
        raise ConfigurationError(
            "the key store must be another PostgreSQL database than the event store's "
            "(another schema of the same database is backed up with it)",
            setting="key_store",
            url=keys.masked,
        )
    host, port = keys.libpq_hosts
    env = {
        "CL_KEY_STORE": keys.masked,
        "CL_KEY_STORE_DBNAME": keys.url.database or "",
        "CL_KEY_STORE_HOST": host,
        "CL_KEY_STORE_PORT": port,
        "CL_KEY_STORE_USER": keys.url.username or "postgres",
        "CL_KEY_STORE_PASSWORD": keys.url.password or "",
    }
    if keys.schema is not None:
        env["CL_KEY_STORE_SCHEMA"] = keys.schema
    return env
