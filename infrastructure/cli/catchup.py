"""The read models a command that only reads may use: there, and caught up with the log."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from contextledger.domain.values.errors import ContextLedgerError

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.projections import ReadModelProjection
    from contextledger.infrastructure.readmodels import SQLReadModels

__all__ = ["current_read_models", "present_read_models"]


@contextmanager
def current_read_models(ledger: Ledger, *names: str) -> Iterator[SQLReadModels | None]:
    """The ledger's read models if they are there and read models ``names`` have
    applied every event of theirs in the log (as of now), opened without creating or
    writing anything (a read-only ledger, a role with ``SELECT`` only); None when they
    are missing, behind or cannot be read, and the caller reads the log instead.
    Bringing them up to date is the worker's job (or ``rebuild``'s)."""
    with present_read_models(ledger) as models:
        try:
            usable = models is not None and all(
                _caught_up(ledger, projection)
                for projection in models.projections()
                if projection.name in names
            )
        except ContextLedgerError:
            usable = False
        yield models if usable else None


@contextmanager
def present_read_models(ledger: Ledger) -> Iterator[SQLReadModels | None]:
    """The ledger's read models if they are there, however far they got, opened
    without creating or writing anything; None when they are missing or cannot be
    read."""
    from contextledger.infrastructure.persistence.database import Database
    from contextledger.infrastructure.readmodels import SQLReadModels

    database = Database.parse(ledger.settings.database_url)
    if database.kind == "memory" or (
        database.kind == "sqlite" and not (database.views_path is not None and database.views_path.exists())
    ):
        yield None
        return
    models: SQLReadModels | None = None
    try:
        models = SQLReadModels.for_ledger(ledger, create=False)
        usable = models.has_tables()
    except ContextLedgerError:
        usable = False
    try:
        yield models if usable else None
    finally:
        if models is not None:
            models.close()


def _caught_up(ledger: Ledger, projection: ReadModelProjection[Any]) -> bool:
    """Whether no event of ``projection``'s topics lies in the log after its tracking
    position (a read model tracks only the events it follows), and that position is
    not past the log's head (a store restored from an older backup). Everything committed
    counts, also past a gap a follower would still wait at: a listing must not pass
    a read model that lacks a committed event for a complete one."""
    from contextledger.application.following.notifications import committed_top, read_notifications

    position = projection.view.max_tracking_id(ledger.name) or 0
    if position > committed_top(ledger.recorder):  # ahead of the log: not the log's read model
        return False
    pages = read_notifications(
        ledger.notification_log, after=position, topics=tuple(projection.topics), page=1, committed=True
    )
    return next(pages, None) is None
