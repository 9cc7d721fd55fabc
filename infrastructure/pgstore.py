"""eventsourcing's PostgreSQL factory with the server-side timeouts contextledger needs.

eventsourcing's own ``POSTGRES_CONNECT_TIMEOUT`` is how long to wait for a pooled
connection; this factory also gives libpq a ``connect_timeout`` (a server that does
not answer fails the connect after that many seconds) and every session a
``statement_timeout`` (a statement stuck behind a lock or a sick server is cancelled,
and the call fails with ``StoreError(cause="statement_timeout")``).
"""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresFactory

__all__ = ["TIMED_POSTGRES_TOPIC", "TimedPostgresFactory"]

TIMED_POSTGRES_TOPIC = "contextledger.infrastructure.pgstore:TimedPostgresFactory"


class TimedPostgresFactory(PostgresFactory):
    """``PostgresFactory`` whose connections carry libpq ``connect_timeout`` and a
    session ``statement_timeout`` (``CL_PG_CONNECT_TIMEOUT`` seconds,
    ``CL_PG_STATEMENT_TIMEOUT_MS`` milliseconds in its environment)."""

    CONNECT_TIMEOUT = "CL_PG_CONNECT_TIMEOUT"
    STATEMENT_TIMEOUT_MS = "CL_PG_STATEMENT_TIMEOUT_MS"

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        kwargs = self.datastore.pool.kwargs
        assert isinstance(kwargs, dict)
        connect = self.env.get(self.CONNECT_TIMEOUT)
        if connect:
            kwargs["connect_timeout"] = max(2, int(float(connect)))
        statement = self.env.get(self.STATEMENT_TIMEOUT_MS)
        if statement:
            kwargs["options"] = f"-c statement_timeout={int(float(statement))}"
