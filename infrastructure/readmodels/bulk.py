"""Many rows of one table in one statement: what a batch of events adds at once, and
what a view holds of its batch (``ViewBatch``: the rows to add, the row updates to make).

SQLAlchemy's ``conn.execute(insert(table), rows)`` builds and binds every row through
its generic machinery (a dictionary of parameters per row, each value through its
column type's processor by name); for a batch of thousands of rows that costs more
than the database's own work. ``insert_rows`` binds the same values with the same
processors (``TypeEngine._cached_bind_processor``: a sealed column is sealed, a JSON
column serialized, a UUID or a datetime converted exactly as a single insert does),
column by column, and hands them to the driver in one call on the transaction's own
connection: ``executemany`` on SQLite, ``COPY ... FROM STDIN`` on PostgreSQL. The rows
stored are the rows a plain insert stores; a driver error becomes ``StoreError`` like
any other (and the batch's transaction rolls back whole).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table

from contextledger.application.storage.store import failure_cause
from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.readmodels.storage import reason

__all__ = ["BulkPlan", "RowUpdate", "ViewBatch", "insert_rows", "plan_for"]


@dataclass(frozen=True)
class BulkPlan:
    """How to write rows of ``columns`` into one table on one dialect."""

    table: str
    statement: str
    columns: tuple[str, ...]
    #: Per column: its bind processor (None: the value goes to the driver as it is).
    processors: tuple[Callable[[Any], Any] | None, ...]
    copy: bool


def plan_for(conn: Connection, table: Table, columns: Sequence[str]) -> BulkPlan:
    """The plan for rows of ``columns`` of ``table`` on ``conn``'s dialect."""
    dialect = conn.dialect
    prepare = dialect.identifier_preparer
    names = ", ".join(prepare.format_column(table.c[name]) for name in columns)
    target = prepare.format_table(table)
    processors = tuple(table.c[name].type._cached_bind_processor(dialect) for name in columns)
    if dialect.name == "postgresql":
        statement = f"COPY {target} ({names}) FROM STDIN"
        return BulkPlan(table.name, statement, tuple(columns), processors, copy=True)
    marks = ", ".join("?" for _ in columns)
    statement = f"INSERT INTO {target} ({names}) VALUES ({marks})"
    return BulkPlan(table.name, statement, tuple(columns), processors, copy=False)


def insert_rows(conn: Connection, plan: BulkPlan, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (each a dict of ``plan.columns``) in the transaction of ``conn``."""
    columns = plan.columns
    data = [[row[name] for name in columns] for row in rows]
    for index, process in enumerate(plan.processors):
        if process is not None:
            for values in data:
                values[index] = process(values[index])
    driver = conn.connection.driver_connection
    try:
        if plan.copy:
            with driver.cursor() as cursor, cursor.copy(plan.statement) as copy:  # type: ignore[union-attr]
                for values in data:
                    copy.write_row(values)
        else:
            cursor = driver.cursor()  # type: ignore[union-attr]
            try:
                cursor.executemany(plan.statement, data)
            finally:
                cursor.close()
    except conn.dialect.loaded_dbapi.Error as exc:
        cause = failure_cause(exc)
        raise StoreError(f"cannot insert rows into {plan.table}: {reason(exc)}", cause=cause) from exc


@dataclass
class RowUpdate:
    """What a batch will change in one row (``SQLView._update_row``)."""

    sets: dict[str, Any]
    adds: dict[str, int]
    on_missing: Callable[[Connection, dict[str, int]], None] | None

    def merge(self, sets: dict[str, Any] | None, adds: dict[str, int] | None) -> None:
        """Another change of the same row in the batch: its values set, its counts added."""
        if sets:
            self.sets.update(sets)
        if adds:
            counters = self.adds
            for name, amount in adds.items():
                if amount:
                    counters[name] = counters.get(name, 0) + amount


@dataclass
class ViewBatch:
    """A view's part of a batch: its tracking as locked, and as applied so far."""

    conn: Connection
    application_name: str
    thread: int
    start: int
    tracked: int
    #: Rows to insert, in order, written together before any other statement of the
    #: view runs and at the batch's end (one ``executemany`` per run of one table).
    pending: list[tuple[Table, dict[str, Any]]] = field(default_factory=list)
    #: Per row (its key): columns to set (the last value wins) and counters to add
    #: to (summed), written after the pending rows, one UPDATE per row.
    updates: dict[Any, RowUpdate] = field(default_factory=dict)
    #: The view's bulk-insert plans, by table and columns (``bulk.plan_for``).
    plans: dict[tuple[str, tuple[str, ...]], BulkPlan] = field(default_factory=dict)

    def flush_rows(self) -> None:
        """Insert the pending rows: each run of rows of one table and the same columns
        in one driver call (``bulk.insert_rows``)."""
        pending, self.pending = self.pending, []
        start = 0
        while start < len(pending):
            table, first = pending[start]
            keys = first.keys()
            end = start + 1
            while end < len(pending) and pending[end][0] is table and pending[end][1].keys() == keys:
                end += 1
            columns = tuple(keys)
            plan = self.plans.get((table.name, columns))
            if plan is None:
                plan = self.plans[(table.name, columns)] = plan_for(self.conn, table, columns)
            insert_rows(self.conn, plan, [values for _, values in pending[start:end]])
            start = end
