"""Opening the ledger a command works on, the way an operator expects.

- A SQLite file that does not exist is a usage error (exit 2) and is never created:
  only ``init`` and ``demo`` create a database.
- A PostgreSQL server is tried first with a short connect timeout
  (``CLI_CONNECT_TIMEOUT`` seconds unless the URL sets ``connect_timeout``), and a
  failure says which: no server at host:port, the database missing, or
  authentication failed (``StoreError.cause``), with psycopg's error chained.
- URLs are shown with their password masked.
- The commands that only read open the store read-only (``open_ledger(read_only=True)``):
  they create no table and need no more than ``SELECT`` on PostgreSQL.

The ledger, the settings and SQLAlchemy's URL parsing load when a command first opens a
store, not with the command line (``--help`` and ``--version`` need none of them).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.cli.common import Failure

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.shared.settings import Settings
    from contextledger.infrastructure.persistence.database import Database

__all__ = [
    "CLI_CONNECT_TIMEOUT",
    "check_postgres",
    "database",
    "databases",
    "key_store_given",
    "open_ledger",
    "settings_for",
    "settings_for_all",
]

_LIBPQ_PREFIX = re.compile(
    r'^(connection failed: )?connection to server (at|on) "[^"]*"( \([^)]*\))?(, port \d+)? failed: '
)

#: Seconds the command line waits for a PostgreSQL server before saying why not.
CLI_CONNECT_TIMEOUT = 3
#: The key store of ``--key-store`` while a command runs (``key_store_given``).
_KEY_STORE: ContextVar[str | None] = ContextVar("contextledger_cli_key_store", default=None)


@contextmanager
def key_store_given(url: str | None) -> Iterator[None]:
    """While the block runs, every ledger the command opens uses the key store ``url``
    (``--key-store``; None: the environment's, ``CONTEXTLEDGER_KEY_STORE``)."""
    token = _KEY_STORE.set(url)
    try:
        yield
    finally:
        _KEY_STORE.reset(token)


def database(args: argparse.Namespace, *, default: str | None = None) -> Database:
    """The database of ``--database`` (else ``default``, else the settings'); with
    several stores, the first of them."""
    return databases(args, default=default)[0]


def databases(args: argparse.Namespace, *, default: str | None = None) -> list[Database]:
    """Every store: those of ``--store`` (repeated), else ``--database`` (else
    ``default``), else ``CONTEXTLEDGER_STORES``, else ``CONTEXTLEDGER_DATABASE_URL``."""
    from contextledger.application.shared.settings import Settings
    from contextledger.infrastructure.persistence.database import Database

    stores: list[str] | None = getattr(args, "stores", None)
    url: str | None = getattr(args, "database", None)
    if stores and url:
        raise Failure("give --database or --store, not both", code=2)
    if stores:
        if len(set(stores)) != len(stores):
            raise Failure("a store is given twice with --store", code=2)
        return [Database.parse(u) for u in stores]
    if url is not None or default is not None:
        return [Database.parse(url if url is not None else str(default))]
    return [Database.parse(u) for u in Settings.from_env().store_urls]


def require_existing(db: Database) -> None:
    """Exit 2 (creating nothing) when a SQLite file is not there."""
    if db.kind == "sqlite" and not db.exists():
        raise Failure(
            f"no database at {db.path} (check --database, or create one with "
            f"`contextledger init --database {db.masked}`)",
            code=2,
        )


def settings_for(db: Database, **updates: Any) -> Settings:
    """The environment's settings on ``db``; PostgreSQL with the short connect timeout."""
    from contextledger.application.shared.settings import Settings

    url = db.url
    if db.kind == "postgresql" and "connect_timeout" not in url.query:
        url = url.update_query_dict({"connect_timeout": str(CLI_CONNECT_TIMEOUT)})
    rendered = "memory://" if db.kind == "memory" else url.render_as_string(hide_password=False)
    given = _KEY_STORE.get()
    if given is not None:
        updates = {"key_store": given, **updates}
    return Settings.from_env().model_copy(update={"database_url": rendered, "stores": (), **updates})


def settings_for_all(dbs: list[Database], **updates: Any) -> Settings:
    """``settings_for`` over several stores (one: exactly ``settings_for``)."""
    if len(dbs) == 1:
        return settings_for(dbs[0], **updates)
    urls = tuple(settings_for(db).database_url for db in dbs)
    return settings_for(dbs[0], **{"stores": urls, **updates})


def open_ledger(
    args: argparse.Namespace, *, must_exist: bool = True, read_only: bool = False, **updates: Any
) -> Ledger:
    """The ledger at ``--database`` (or over every ``--store``), without a policy
    thread unless ``updates`` say so. ``read_only`` (the commands that only read):
    nothing is created or written, so a role with only ``SELECT`` can run them, and a
    store without its tables is ``SchemaMissingError``."""
    from contextledger.application.facade.ledger import Ledger

    dbs = databases(args)
    for db in dbs:
        if must_exist:
            require_existing(db)
        if db.kind == "postgresql":
            check_postgres(db)
    return Ledger.open(
        settings=settings_for_all(dbs, **{"run_policy": False, **updates}),
        read_only=read_only or None,
    )


def check_postgres(db: Database, *, timeout: float | None = None) -> None:
    """Connect once to ``db``'s server; raise ``StoreError`` saying why it cannot be used."""
    import psycopg

    seconds = (
        timeout if timeout is not None else float(db.option("connect_timeout", str(CLI_CONNECT_TIMEOUT)))
    )
    try:
        host, port = db.libpq_hosts
        options: dict[str, Any] = {
            "host": host,
            "port": port,
            "dbname": db.url.database,
            "user": db.url.username or "postgres",
            "password": db.url.password or None,
            "connect_timeout": max(1, round(seconds)),
        }
        attrs = db.option("target_session_attrs", "")
        if attrs:  # a multi-host URL: the server with these attributes
            options["target_session_attrs"] = attrs
        connection = psycopg.connect(**options)
    except psycopg.Error as exc:
        raise connection_error(exc, db) from exc
    connection.close()


def connection_error(exc: BaseException, db: Database) -> StoreError:
    """``exc`` (psycopg's, from connecting to ``db``) as a ``StoreError`` naming the cause."""
    text = str(exc)
    state = getattr(exc, "sqlstate", None)
    where = db.where
    user = db.url.username or "postgres"
    detail = _server_message(text)
    if state == "3D000" or ('database "' in text and "does not exist" in text):
        return StoreError(
            f"database {db.url.database!r} does not exist on the PostgreSQL server at {where} "
            "(create it, or check the database name in --database)",
            url=db.masked,
            cause="database_missing",
        )
    if state in ("28000", "28P01") or any(
        marker in text for marker in ("authentication failed", "no pg_hba.conf entry", 'role "', "password")
    ):
        return StoreError(
            f"authentication failed for user {user!r} at {where}: {detail}",
            url=db.masked,
            cause="authentication_failed",
        )
    return StoreError(
        f"no PostgreSQL server answers at {where}: {detail}", url=db.masked, cause="server_unreachable"
    )


def _server_message(text: str) -> str:
    """The server's or the socket's own words: the first line, without libpq's prefix."""
    first = next((" ".join(line.split()) for line in text.splitlines() if line.strip()), "")
    first = _LIBPQ_PREFIX.sub("", first).removeprefix("FATAL: ").strip()
    return first or "connection failed"
