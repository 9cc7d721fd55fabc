"""eventsourcing's PostgreSQL factory with the timeouts and retries contextledger needs.

eventsourcing's own ``POSTGRES_CONNECT_TIMEOUT`` is how long to wait for a pooled
connection; this factory also gives libpq a ``connect_timeout`` (a server that does
not answer fails the connect after that many seconds) and every session a
``statement_timeout`` (a statement stuck behind a lock or a sick server is cancelled,
and the call fails with ``StoreError(cause="statement_timeout")``).

Its recorders retry as the store does (``pgreads.once_more``: once after a dead
connection, never after the pool waited its whole ``connect_timeout``), not as the
library's do (ten attempts, each waiting that long: a call outlived a 20 s outage).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent, Tracking
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresDatastore,
    PostgresFactory,
    PostgresTrackingRecorder,
)
from psycopg.sql import SQL, Identifier

from contextledger.infrastructure.keys.key_factory import SubjectKeysFactory
from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.persistence.pgkeyrows import KeyedSnapshotRead
from contextledger.infrastructure.persistence.pgreads import once_more

__all__ = [
    "TIMED_POSTGRES_TOPIC",
    "PostgresSnapshotRecorder",
    "PostgresTrackingRecorderOnce",
    "SelectEventsOnce",
    "TimedPostgresFactory",
    "event_columns",
]

TIMED_POSTGRES_TOPIC = "contextledger.infrastructure.persistence.pgstore:TimedPostgresFactory"


def event_columns(stored_events: Sequence[StoredEvent]) -> tuple[list[Any], ...]:
    """The events as four arrays (ids, versions, topics, states), sent in binary."""
    return (
        [e.originator_id for e in stored_events],
        [e.originator_version for e in stored_events],
        [e.topic for e in stored_events],
        [e.state for e in stored_events],
    )


class SelectEventsOnce:
    """``select_events`` for a PostgreSQL recorder without the library's retry loop:
    one more try on a checked pool (``once_more``). Put it before the recorder class."""

    datastore: PostgresDatastore

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        raw: Any = PostgresAggregateRecorder.select_events.__wrapped__
        events: Sequence[StoredEvent] = once_more(
            lambda: raw(self, originator_id, gt=gt, lte=lte, desc=desc, limit=limit), self.datastore
        )
        return events


class PostgresSnapshotRecorder(SelectEventsOnce, PostgresAggregateRecorder):
    """eventsourcing's aggregate recorder (the snapshots' table), writing its rows as
    four arrays sent in binary instead of an array of a composite type: the library
    encodes that array as text, escaping every byte of a snapshot's state (tens of KB).
    Reads and writes retry as the store does (see the module doc). With the key table in
    this database, a conversation's latest snapshot is read with its subject's key row
    (``pgkeyrows.KeyedSnapshotRead``)."""

    #: The key table's fence (set by ``SubjectKeysFactory``; None: no subject keys).
    fence: KeyFence | None = None
    _keyed: KeyedSnapshotRead | None = None

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        self.insert_events_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(%b::{id_type}[], %b::bigint[], %b::text[], %b::bytea[])"
        ).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.events_table_name),
            id_type=Identifier(self.datastore.originator_id_type),
        )

    def select_events(self, originator_id: UUID | str, **options: Any) -> Sequence[StoredEvent]:
        """The library's read (``options``: ``gt``, ``lte``, ``desc``, ``limit``); the
        latest snapshot (``desc``, ``limit=1``) with its subject's key row when the key
        table is in this database."""
        fence = self.fence
        latest = options.get("desc") and options.get("limit") == 1 and options.get("gt") is None
        if latest and fence is not None and fence.fresh is not None:
            keyed = self._keyed
            if keyed is None:
                keyed = self._keyed = KeyedSnapshotRead(self.datastore.schema, self.events_table_name, fence)

            def read() -> Sequence[StoredEvent] | None:
                with self.datastore.get_connection() as conn:
                    return keyed.read(conn, originator_id, options.get("lte"))

            found: Sequence[StoredEvent] | None = once_more(read, self.datastore)
            if found is not None:
                return found
            self.fence = None  # no key tables in this store: the library's read, from now on
        return super().select_events(originator_id, **options)

    def _insert_stored_events(self, curs: Any, stored_events: Sequence[StoredEvent], **_: Any) -> None:
        curs.execute(self.insert_events_statement, event_columns(stored_events), prepare=True)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        raw: Any = PostgresAggregateRecorder.insert_events.__wrapped__  # without the library's retry
        ids: Sequence[int] | None = once_more(lambda: raw(self, stored_events, **kwargs), self.datastore)
        return ids


class PostgresTrackingRecorderOnce(PostgresTrackingRecorder):
    """eventsourcing's tracking recorder (the summarization policy's position), retrying
    as the store does (see the module doc)."""

    def insert_tracking(self, tracking: Tracking) -> None:
        raw: Any = PostgresTrackingRecorder.insert_tracking.__wrapped__
        once_more(lambda: raw(self, tracking), self.datastore)

    def max_tracking_id(self, application_name: str) -> int | None:
        raw: Any = PostgresTrackingRecorder.max_tracking_id.__wrapped__
        top: int | None = once_more(lambda: raw(self, application_name), self.datastore)
        return top

    def has_tracking_id(self, application_name: str, notification_id: int | None) -> bool:
        raw: Any = PostgresTrackingRecorder.has_tracking_id.__wrapped__
        found: bool = once_more(lambda: raw(self, application_name, notification_id), self.datastore)
        return found


class TimedPostgresFactory(SubjectKeysFactory, PostgresFactory):
    """``PostgresFactory`` whose connections carry libpq ``connect_timeout`` and a
    session ``statement_timeout`` (``CL_PG_CONNECT_TIMEOUT`` seconds,
    ``CL_PG_STATEMENT_TIMEOUT_MS`` milliseconds in its environment), whose snapshot
    and tracking recorders retry as the store does, and whose mapper gets the store's
    data-subject key table (``subject_mapper``)."""

    CONNECT_TIMEOUT = "CL_PG_CONNECT_TIMEOUT"
    STATEMENT_TIMEOUT_MS = "CL_PG_STATEMENT_TIMEOUT_MS"
    TARGET_SESSION_ATTRS = "CL_PG_TARGET_SESSION_ATTRS"

    aggregate_recorder_class = PostgresSnapshotRecorder
    tracking_recorder_class = PostgresTrackingRecorderOnce

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        kwargs = self.datastore.pool.kwargs
        assert isinstance(kwargs, dict)
        connect = self.env.get(self.CONNECT_TIMEOUT)
        if connect:
            kwargs["connect_timeout"] = max(2, int(float(connect)))
        attrs = self.env.get(self.TARGET_SESSION_ATTRS)
        if attrs:  # a multi-host URL: libpq keeps the server with these attributes
            kwargs["target_session_attrs"] = attrs
        statement = self.env.get(self.STATEMENT_TIMEOUT_MS)
        if statement:
            kwargs["options"] = f"-c statement_timeout={int(float(statement))}"
