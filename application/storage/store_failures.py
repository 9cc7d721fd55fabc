"""What the event store's failures mean: a database error becomes ``StoreError``
naming its cause (``StoreError.cause``: busy, statement_timeout, connection_lost,
connect_timeout, server_unreachable, or None when unknown), and stored events that do
not fold become ``LogDamagedError``. Every load and save of the conversation store goes
through here, and so do the read models' views (``failure_cause``).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import OperationalError, PersistenceError

from contextledger.domain.values.errors import LogDamagedError, StoreError

__all__ = ["failure_cause", "store_error", "store_errors"]

#: What a database failure says -> ``StoreError.cause``.
_CAUSES = (
    ("statement timeout", "statement_timeout"),
    ("database is locked", "busy"),
    ("database table is locked", "busy"),
    ("lock timeout", "busy"),
    ("timed out waiting for return of writer", "busy"),  # this process's other writer
    ("idle-in-transaction timeout", "connection_lost"),
    ("terminating connection", "connection_lost"),
    ("server closed the connection", "connection_lost"),
    ("consuming input failed", "connection_lost"),
    ("the connection is closed", "connection_lost"),
    ("connection is lost", "connection_lost"),
    ("timeout expired", "connect_timeout"),
    ("couldn't get a connection", "connect_timeout"),
    ("connection refused", "server_unreachable"),
    ("could not connect", "server_unreachable"),
    ("connection failed", "server_unreachable"),
    ("the database system is", "server_unreachable"),  # starting up / shutting down
)


def failure_cause(exc: BaseException) -> str | None:
    """Why a store call failed, from the exception and its causes (None: unknown)."""
    seen: BaseException | None = exc
    texts: list[str] = []
    while seen is not None and len(texts) < 8:
        texts.append(f"{type(seen).__name__}: {seen}".lower())
        seen = seen.__cause__ or seen.__context__
    text = " | ".join(texts)
    if "querycanceled" in text and "timeout" in text:
        return "statement_timeout"
    return next((cause for needle, cause in _CAUSES if needle in text), None)


def store_error(exc: BaseException, conversation_id: UUID | None = None) -> StoreError:
    """The ``StoreError`` for a failure of the event store, naming its cause."""
    cause = failure_cause(exc)
    said = str(exc).strip().splitlines()
    detail = said[0] if said else type(exc).__name__
    return StoreError(
        f"the event store failed ({cause or 'error'}): {detail}",
        conversation_id=conversation_id,
        cause=cause,
    )


class store_errors:
    """Map the event store's failures to ``StoreError``, and stored events that do not
    fold to ``LogDamagedError`` (the cause chained). A plain context manager: every
    load enters it."""

    __slots__ = ("conversation_id",)

    def __init__(self, conversation_id: UUID | None = None) -> None:
        self.conversation_id = conversation_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, (OperationalError, PersistenceError)):
            raise store_error(exc, self.conversation_id) from exc
        if isinstance(exc, (ValueError, KeyError, IndexError)):  # stored events that do not fold
            raise LogDamagedError(
                f"the log is damaged: its events do not fold ({type(exc).__name__}: {exc})",
                conversation_id=self.conversation_id,
            ) from exc
