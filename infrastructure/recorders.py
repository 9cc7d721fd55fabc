"""The event store's recorders: a leaner PostgreSQL write path and an O(window) memory store.

``PostgresConversationRecorder`` (selected by ``Database.persistence_env`` through
``PostgresConversationFactory``) keeps every guarantee of eventsourcing's
``PostgresApplicationRecorder`` -- optimistic concurrency on
``(originator_id, originator_version)``, one transaction per save, notification ids
that a follower reading up to ``max_notification_id()`` never sees filled in later --
and costs less per append:

- **one round trip**: a save is one prepared call of a server-side function that
  takes the table's ``EXCLUSIVE`` lock, notifies listeners and inserts the events, run
  as one autocommit statement. The lock is held only while the server inserts and
  commits, never while a client process waits for the CPU between statements (the
  library sends four statements and holds the lock across their round trips);
- **group commit**: concurrent saves in one process share one call, so one
  transaction and one commit (``GroupCommit``). The batch is one statement: all of it
  commits or none of it does. If it fails on a conflict, each save of the batch is run
  again alone, so only the conflicting one gets ``IntegrityError``;
- **no pre-ping**: a pooled connection is used as it is; a failure on a dead one
  checks the pool (dead connections are replaced) and tries once more. A save whose
  commit answer was lost and whose retry conflicts is recognised by the conversation
  store (``ConversationStore._landed``).

``WindowedPOPORecorder`` (``memory://``) reads the events after a version in time
proportional to the events read, not to the aggregate's history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import (
    ApplicationRecorder,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg.sql import SQL, Identifier

from contextledger.infrastructure.pgstore import TimedPostgresFactory

__all__ = [
    "GroupCommit",
    "MemoryFactory",
    "PostgresConversationFactory",
    "PostgresConversationRecorder",
    "WindowedPOPORecorder",
]

T = TypeVar("T")

#: Most events one group commit writes in one statement.
MAX_BATCH_EVENTS = 1000


class _Save:
    """One save waiting in a ``GroupCommit``."""

    __slots__ = ("done", "error", "events", "lead", "result")

    def __init__(self, events: Sequence[StoredEvent]) -> None:
        self.events = events
        self.done = threading.Event()
        self.lead = False
        self.result: list[int] = []
        self.error: BaseException | None = None


class GroupCommit:
    """Concurrent saves of one process share one statement and one commit.

    The first save to arrive leads: it writes every save queued by then in one call of
    ``write`` and hands each its notification ids (or the error). Saves arriving
    meanwhile queue up; when the leader is done the oldest of them leads the next
    batch. A lone save is written at once, with no thread switch. The batch is one
    statement, so nothing of it is half-written: if it fails on the server (a conflict,
    one bad save) each save is written again alone, so the others still commit and only
    the failing one gets the error; if the connection fails, every save of the batch
    gets the error.
    """

    def __init__(self, write: Callable[[Sequence[StoredEvent]], list[int]]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._queue: list[_Save] = []
        self._busy = False
        #: Batches led, saves they carried and the most saves in one batch.
        self.batches = 0
        self.saves = 0
        self.largest = 0

    def submit(self, events: Sequence[StoredEvent]) -> list[int]:
        save = _Save(events)
        with self._lock:
            self._queue.append(save)
            lead = not self._busy
            self._busy = True
        if not lead:
            save.done.wait()
            if not save.lead:
                return _outcome(save)
        try:
            self._lead()
        finally:
            with self._lock:
                if self._queue:
                    nxt = self._queue[0]
                    nxt.lead = True
                    nxt.done.set()
                else:
                    self._busy = False
        return _outcome(save)

    def _lead(self) -> None:
        with self._lock:
            batch: list[_Save] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].events) <= MAX_BATCH_EVENTS):
                save = self._queue.pop(0)
                batch.append(save)
                size += len(save.events)
        try:
            self._run(batch)
        finally:
            for save in batch:
                save.done.set()

    def _run(self, batch: list[_Save]) -> None:
        self.batches += 1
        self.saves += len(batch)
        self.largest = max(self.largest, len(batch))
        if len(batch) == 1:
            self._run_alone(batch[0])
            return
        try:
            ids = self._write([e for save in batch for e in save.events])
        except (InterfaceError, OperationalError) as exc:
            # The connection failed (after one more try): whether the statement
            # committed is unknown, so every save gets the error (the conversation
            # store recognises a save that landed when it retries).
            for save in batch:
                save.error = exc
            return
        except Exception:
            # The statement failed and rolled back as a whole (a conflict, or one bad
            # save): write each alone, so only the failing one gets the error.
            for save in batch:
                self._run_alone(save)
            return
        start = 0
        for save in batch:
            save.result = ids[start : start + len(save.events)]
            start += len(save.events)

    def _run_alone(self, save: _Save) -> None:
        try:
            save.result = self._write(save.events)
        except BaseException as exc:
            save.error = exc


def _outcome(save: _Save) -> list[int]:
    if save.error is not None:
        raise save.error
    return save.result


class PostgresConversationRecorder(PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder with a one-round-trip,
    group-committed save (see the module doc)."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        self.append_function_name = f"{events_table_name}_append"
        self.check_identifier_length(self.append_function_name)
        schema = Identifier(self.datastore.schema)
        table = Identifier(self.events_table_name)
        function = Identifier(self.append_function_name)
        # Replaces the library's insert function (which takes no table lock).
        self.sql_create_statements[self.create_insert_function_statement_index] = SQL(
            "CREATE OR REPLACE FUNCTION {schema}.{function}(events {schema}.{event}[]) "
            "RETURNS SETOF bigint LANGUAGE plpgsql AS $BODY$ "
            "BEGIN "
            # Serialize inserting transactions so that notification ids are issued in
            # commit order: a reader never passes over an id committed later.
            "    LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE; "
            "    NOTIFY {channel}; "
            "    RETURN QUERY INSERT INTO {schema}.{table} "
            "        (originator_id, originator_version, topic, state) "
            "        SELECT e.originator_id, e.originator_version, e.topic, e.state "
            "        FROM unnest(events) WITH ORDINALITY AS e "
            "        ORDER BY e.ordinality "
            "        RETURNING notification_id; "
            "END; $BODY$"
        ).format(
            schema=schema,
            function=function,
            event=Identifier(self.stored_event_type_name),
            table=table,
            channel=Identifier(self.channel_name),
        )
        self.append_statement = SQL("SELECT {schema}.{function}(%s) AS id").format(
            schema=schema, function=function
        )
        self.group_commit = GroupCommit(self._write)

    # -- writing ----------------------------------------------------------------------

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if kwargs.get("tracking") is not None:  # a process application's save: the library's path
            ids: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return ids
        if not stored_events:
            return []
        return self.group_commit.submit(stored_events)

    def _write(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        rows = [
            self.construct_pg_stored_event(e.originator_id, e.originator_version, e.topic, e.state)
            for e in stored_events
        ]

        def write() -> list[int]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(self.append_statement, (rows,), prepare=True)
                return [row["id"] for row in curs.fetchall()]

        return self._once_more(write)

    # -- reading (no library retry loop: one more try on a checked pool) ---------------

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        raw: Any = PostgresApplicationRecorder.select_events.__wrapped__
        events: Sequence[StoredEvent] = self._once_more(
            lambda: raw(self, originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        )
        return events

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Any]:
        raw: Any = PostgresApplicationRecorder.select_notifications.__wrapped__
        return self._once_more(
            lambda: raw(self, start, limit, stop, topics, inclusive_of_start=inclusive_of_start)
        )

    def max_notification_id(self) -> int | None:
        raw: Any = PostgresApplicationRecorder.max_notification_id.__wrapped__
        top: int | None = self._once_more(lambda: raw(self))
        return top

    def _once_more(self, call: Callable[[], T]) -> T:
        """``call()``; if the connection it used was dead (a server restart, a killed
        backend), check the pool -- broken connections are replaced -- and call once more."""
        try:
            return call()
        except (InterfaceError, OperationalError):
            self.datastore.pool.check()
            return call()


class PostgresConversationFactory(TimedPostgresFactory):
    """eventsourcing's PostgreSQL factory with ``PostgresConversationRecorder``, and the
    connect and statement timeouts of ``TimedPostgresFactory``."""

    application_recorder_class = PostgresConversationRecorder


class WindowedPOPORecorder(POPOApplicationRecorder):
    """The in-memory recorder, reading ``gt=`` ranges by version instead of scanning."""

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        if gt is None or desc:
            return super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        with self._database_lock:
            index = self._stored_events_index.get(str(originator_id))
            if not index:
                return []
            results: list[StoredEvent] = []
            version = gt + 1
            # Versions of one aggregate are consecutive: walk up from gt + 1.
            while version in index and (lte is None or version <= lte):
                results.append(self._stored_events[index[version]])
                if len(results) == limit:
                    break
                version += 1
            if not results and gt > 0 and gt not in index:  # not a version of it: scan
                return super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
            return results


class MemoryFactory(POPOFactory):
    """eventsourcing's in-memory factory with ``WindowedPOPORecorder``."""

    def application_recorder(self) -> ApplicationRecorder:
        return WindowedPOPORecorder()
