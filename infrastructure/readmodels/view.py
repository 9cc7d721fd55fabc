"""The base of the SQL views: each change is written with its tracking row, atomically.

Every view change is written with its tracking row in one transaction that first
locks the row (``SELECT ... FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on
SQLite): an event whose notification id is not above the tracked one changes
nothing, so processes that race over the same log apply each event exactly once. A
view that finds its tracking row *below* what it had seen knows that someone rebuilt
the read model and raises ``TrackingRewoundError``; the runner then resumes from
there, cooperating with the rebuild instead of skipping over it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from uuid import UUID

from eventsourcing.persistence import Tracking, TrackingRecorder
from sqlalchemy import (
    Connection,
    Integer,
    String,
    Table,
    bindparam,
    delete,
    insert,
    inspect,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from contextledger.application.storage.store import failure_cause
from contextledger.domain.values.errors import StoreError, TrackingRewoundError
from contextledger.infrastructure.readmodels.bulk import BulkPlan, RowUpdate, ViewBatch
from contextledger.infrastructure.readmodels.host import ReadModelHost, SharedTransaction
from contextledger.infrastructure.readmodels.sealing import is_subject_sealed
from contextledger.infrastructure.readmodels.storage import reason

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["SQLView", "SharedTransaction", "columns_of"]

log = logging.getLogger("contextledger.readmodels")

RecordT = TypeVar("RecordT", bound="DataclassInstance")


#: Per record class: its field names (``dataclasses.fields`` costs more than the copy).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def columns_of(record: DataclassInstance) -> dict[str, Any]:
    """A record's fields as column values (the read-model columns carry their names)."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    return {name: getattr(record, name) for name in names}


class SQLView(TrackingRecorder):
    """A view on SQL tables: each change is written with its tracking row, atomically."""

    name: ClassVar[str] = ""
    table_names: ClassVar[tuple[str, ...]] = ()
    #: A sealed column of the view's table that tells how its values are sealed
    #: (``upgrade``: read models sealed under the store's key are rebuilt).
    sealed_column: ClassVar[str | None] = None

    def __init__(self, models: ReadModelHost) -> None:
        self.models = models
        self._tracking = models.tables["tracking"]
        #: Per application: the last notification id this view applied or saw applied.
        self._seen: dict[str, int] = {}
        #: The batch this view applies events in now (``batch()``), if any.
        self._batch: ViewBatch | None = None
        #: Statements built once and run with parameters (``_statement``).
        self._statements: dict[Any, Any] = {}
        #: Bulk-insert plans of the batches (``ViewBatch.plans``), kept from batch to batch.
        self._plans: dict[tuple[str, tuple[str, ...]], BulkPlan] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def tables(self) -> list[Table]:
        """The view's tables (dropped and recreated by ``reset()``)."""
        return [self.models.tables[n] for n in self.table_names]

    @property
    def table(self) -> Table:
        """The view's (first) table."""
        return self.models.tables[self.table_names[0]]

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
            raise StoreError(f"read model {self.name}: {reason(exc)}", cause=failure_cause(exc)) from exc
        return int(value) if value else None

    def reset(self) -> None:
        """Drop and recreate this view's tables and set its tracking back to zero, in
        one transaction that first locks its tracking rows."""
        t = self._tracking
        try:
            with self.models.begin() as conn:
                conn.execute(select(t.c.notification_id).where(t.c.projection == self.name).with_for_update())
                for table in reversed(self.tables):
                    table.drop(conn, checkfirst=True)
                for table in self.tables:
                    table.create(conn, checkfirst=True)
                conn.execute(update(t).where(t.c.projection == self.name).values(notification_id=0))
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot reset read model {self.name}: {reason(exc)}") from exc
        self._seen.clear()

    def upgrade(self, conn: Connection) -> bool:
        """Rebuild path for a database an earlier release made: if a table of this
        view lacks a column or has another primary key than this release defines, drop
        and recreate the view's tables and set its tracking back to zero (the runner
        then replays the whole log into it). True if it did. Runs inside the
        transaction that creates the tables."""
        inspector = inspect(conn)
        outdated = False
        for table in self.tables:
            if not inspector.has_table(table.name, schema=table.schema):
                continue
            found = {c["name"] for c in inspector.get_columns(table.name, schema=table.schema)}
            key = set(inspector.get_pk_constraint(table.name, schema=table.schema)["constrained_columns"])
            if set(table.columns.keys()) - found or key != set(table.primary_key.columns.keys()):
                outdated = True
        if not outdated and not self._sealed_by_earlier_release(conn):
            return False
        log.warning("read model %s was made by an earlier release: rebuilding it from the log", self.name)
        for table in reversed(self.tables):
            table.drop(conn, checkfirst=True)
        for table in self.tables:
            table.create(conn, checkfirst=True)
        t = self._tracking
        conn.execute(update(t).where(t.c.projection == self.name).values(notification_id=0))
        self._seen.clear()
        return True

    def _sealed_by_earlier_release(self, conn: Connection) -> bool:
        """Whether these read models seal values per data subject and the view's table
        holds a value that is not (sealed under the store's key by an earlier release,
        or stored before a key was set): one value tells, as a release writes one form."""
        codec = self.models.codec
        column = self.sealed_column
        if codec is None or codec.subjects is None or column is None:
            return False
        table = self.table
        if not inspect(conn).has_table(table.name, schema=table.schema):
            return False
        raw = conn.execute(
            select(type_coerce(table.c[column], String)).where(table.c[column].is_not(None)).limit(1)
        ).scalar()
        return raw is not None and not is_subject_sealed(raw)

    # -- batches ----------------------------------------------------------------------

    @contextmanager
    def batch(self, application_name: str) -> Iterator[None]:
        """Apply the events of ``application_name`` written in this block in one
        transaction (shared with the other views of these read models that join it),
        with one tracking update at its end: rows and tracking commit together, or
        neither does. Raises ``TrackingRewoundError`` on entry if the read model was
        reset elsewhere since this view last wrote."""
        app = application_name
        with self.models.batch() as shared:
            try:
                tracked = self._lock_tracking(shared.conn, app)
            except SQLAlchemyError as exc:
                raise StoreError(f"read model {self.name}: {reason(exc)}", cause=failure_cause(exc)) from exc
            seen = self._seen.get(app)
            if seen is not None and tracked < seen:
                self._seen[app] = tracked
                raise TrackingRewoundError(
                    f"read model {self.name} was reset (tracked {tracked}, seen {seen})",
                    projection=self.name,
                    tracked=tracked,
                )
            state = ViewBatch(shared.conn, app, shared.thread, tracked, tracked, plans=self._plans)
            self._batch = state
            try:
                yield
                self._flush(state)
                if state.tracked > state.start:
                    t = self._tracking
                    shared.conn.execute(
                        update(t)
                        .where(t.c.projection == self.name, t.c.application_name == app)
                        .values(notification_id=state.tracked)
                    )
            except SQLAlchemyError as exc:
                raise StoreError(f"read model {self.name}: {reason(exc)}", cause=failure_cause(exc)) from exc
            finally:
                self._batch = None

            def applied() -> None:
                self._seen[app] = max(state.tracked, self._seen.get(app, 0))

            shared.on_commit.append(applied)

    # -- the one write path -----------------------------------------------------------

    def _write(
        self, tracking: Tracking, change: Callable[[Connection], None] | None, *, deferrable: bool = False
    ) -> bool:
        """Apply ``change`` and move the tracking row to ``tracking``, in one transaction
        (in a batch: in the batch's, which moves the tracking row when it ends); False
        (and nothing written) if the event was applied already. ``deferrable``: the
        change only adds rows (``_add_row``) or changes one row (``_update_row``),
        which a batch may write later, with others; any other change first writes
        what is pending."""
        app, nid = tracking.application_name, tracking.notification_id
        batch = self._batch
        if batch is not None and batch.application_name == app and batch.thread == threading.get_ident():
            if nid <= batch.tracked:
                return False
            if change is not None:
                if not deferrable:
                    self._flush(batch)
                change(batch.conn)
            batch.tracked = nid
            return True
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
            raise StoreError(f"read model {self.name}: {reason(exc)}", cause=failure_cause(exc)) from exc
        self._seen[app] = nid
        return True

    def _batched(self, tracking: Tracking) -> ViewBatch | None:
        """The batch ``tracking``'s event is applied in (this view's open batch, of the
        same application, in this thread), None if it is applied on its own."""
        batch = self._batch
        if (
            batch is not None
            and batch.application_name == tracking.application_name
            and batch.thread == threading.get_ident()
        ):
            return batch
        return None

    def _merge_in_batch(
        self,
        tracking: Tracking,
        key: Any,
        sets: dict[str, Any] | None = None,
        adds: dict[str, int] | None = None,
    ) -> bool:
        """``_write`` of ``_update_row(key, sets=..., adds=...)`` for an event of a batch
        that holds a change of the row already (most events of a batch change a row an
        earlier one did): merged into it in place, the batch's tracking moved on, or
        nothing if the event was applied already. False (nothing done) otherwise: the
        caller takes the general way."""
        batch = self._batched(tracking)
        if batch is None:
            return False
        nid = tracking.notification_id
        if nid <= batch.tracked:
            return True
        held = batch.updates.get(key)
        if held is None:
            return False
        held.merge(sets, adds)
        batch.tracked = nid
        return True

    def erase_conversations(self, conversation_ids: Sequence[UUID], *, tracking: Tracking) -> None:
        """Delete every row of this view's tables that belongs to one of
        ``conversation_ids`` (their data subject was erased). On SQLite the freed
        bytes are overwritten (``secure_delete``)."""
        ids = list(conversation_ids)

        def change(conn: Connection) -> None:
            if self.models.is_sqlite:
                conn.exec_driver_sql("PRAGMA secure_delete = ON")
            for table in self.tables:
                if "conversation_id" in table.c and ids:
                    conn.execute(delete(table).where(table.c.conversation_id.in_(ids)))

        self._write(tracking, change)

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

    def _insert(self, tracking: Tracking, values: dict[str, Any]) -> None:
        """Insert one row into the view's table, with its tracking row."""
        table = self.table

        def change(conn: Connection) -> None:
            self._add_row(conn, table, values)

        self._write(tracking, change, deferrable=True)

    def _flush(self, batch: ViewBatch) -> None:
        """Write what ``batch`` holds back: the pending rows, then the row updates."""
        batch.flush_rows()
        updates, batch.updates = batch.updates, {}
        for key, change in updates.items():
            self._run_update(batch.conn, key, change)

    def _update_row(
        self,
        conn: Connection,
        key: Any,
        *,
        sets: dict[str, Any] | None = None,
        adds: dict[str, int] | None = None,
        on_missing: Callable[[Connection, dict[str, int]], None] | None = None,
    ) -> None:
        """Set columns ``sets`` and add ``adds`` to counters of the view's row
        ``conversation_id == key``: now, or in a batch once for every event of the batch
        that changes the row. ``on_missing(conn, adds)``: called if there is no such row."""
        batch = self._batch
        held = None if batch is None or batch.conn is not conn else batch.updates.get(key)
        if held is None:
            change = RowUpdate(dict(sets or {}), {k: v for k, v in (adds or {}).items() if v}, on_missing)
            if batch is None or batch.conn is not conn:
                self._run_update(conn, key, change)
            else:
                batch.updates[key] = change
            return
        # The row changes again in this batch (most events do): merge in place.
        held.merge(sets, adds)
        if held.on_missing is None:
            held.on_missing = on_missing

    def _run_update(self, conn: Connection, key: Any, change: RowUpdate) -> None:
        if not change.sets and not change.adds:
            return
        table = self.table
        shape = (tuple(change.sets), tuple(change.adds))

        def build() -> Any:
            values: dict[Any, Any] = {
                table.c[k]: bindparam(f"_v_{k}", type_=table.c[k].type) for k in shape[0]
            }
            values.update({table.c[k]: table.c[k] + bindparam(f"_d_{k}", type_=Integer) for k in shape[1]})
            where = table.c.conversation_id == bindparam("_key", type_=table.c.conversation_id.type)
            return update(table).where(where).values(values)

        params = {"_key": key, **{f"_v_{k}": v for k, v in change.sets.items()}}
        params.update({f"_d_{k}": v for k, v in change.adds.items()})
        result = conn.execute(self._statement(("update", shape), build), params)
        if result.rowcount == 0 and change.on_missing is not None:
            change.on_missing(conn, change.adds)

    def _add_row(self, conn: Connection, table: Table, values: dict[str, Any]) -> None:
        """Insert ``values`` into ``table``: now, or in a batch with the batch's other rows."""
        batch = self._batch
        if batch is not None and batch.conn is conn:
            batch.pending.append((table, values))
        else:
            conn.execute(insert(table), [values])

    def _statement(self, key: Any, build: Callable[[], Any]) -> Any:
        """The statement ``build()`` makes, built once per ``key``: run with parameters,
        it skips building and compiling the SQL again for every event."""
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = build()
        return statement

    def _seal(
        self,
        conversation_id: UUID,
        value: Any,
        *,
        json_value: bool = False,
        inherited: bool = False,
        covers_from: int | None = None,
    ) -> Any:
        """A sealed column's value of one of the conversation's rows, sealed under the
        keys of the subjects whose content it holds (``ContentCodec.sealed_value``);
        ``ConversationErasedError`` if one of them was erased."""
        codec = self.models.codec
        if codec is None:
            return value
        return codec.sealed_value(
            conversation_id, value, json_value=json_value, inherited=inherited, covers_from=covers_from
        )

    def _lookup(self, value: str | None) -> str | None:
        """The lookup digest of a sealed name (None without a cipher key: the value
        itself is then stored as it is, and looked up as it is)."""
        codec = self.models.codec
        return None if value is None or codec is None else codec.lookup(value)

    def _records(self, record: type[RecordT], query: Any) -> list[RecordT]:
        """The rows of ``query`` as ``record`` objects (columns named as its fields)."""
        names = [f.name for f in fields(record)]
        return [record(**{n: row._mapping[n] for n in names}) for row in self._select(query)]

    def _select(self, query: Any) -> list[Any]:
        try:
            with self.models.read() as conn:
                return list(conn.execute(query))
        except SQLAlchemyError as exc:
            raise StoreError(f"read model {self.name}: {reason(exc)}", cause=failure_cause(exc)) from exc
