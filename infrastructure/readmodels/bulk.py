"""Many rows of one table in one statement: what a batch of events adds at once.

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
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table

from contextledger.application.storage.store import failure_cause
from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.readmodels.storage import reason

__all__ = ["BulkPlan", "insert_rows", "plan_for"]


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
