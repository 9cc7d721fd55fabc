"""The DB-API drivers' errors as eventsourcing's, shared by the store's recorders.

eventsourcing's own recorders turn psycopg's and sqlite3's errors into its
``PersistenceError`` tree, name for name (``IntegrityError`` for ``IntegrityError``,
and so on); the store's recorders, which run some statements without the library's
wrappers, map them the same way, so callers see one error tree whichever store is used.
"""

from __future__ import annotations

from typing import Any

from eventsourcing import persistence as es

__all__ = ["persistence_error"]

#: The DB-API error classes, most specific first: a driver's error of each name
#: becomes eventsourcing's of the same name (``Error``: ``PersistenceError``).
_DBAPI_ERRORS = (
    "InterfaceError",
    "OperationalError",
    "DataError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "DatabaseError",
)


def persistence_error(exc: Exception, driver: Any) -> es.PersistenceError:
    """``exc``, an error of the DB-API module ``driver``, as eventsourcing's error."""
    for name in _DBAPI_ERRORS:
        if isinstance(exc, getattr(driver, name)):
            error: es.PersistenceError = getattr(es, name)(str(exc))
            return error
    return es.PersistenceError(str(exc))
