"""Read models brought up to date before a command reads them, with progress."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from contextledger.application.ledger import Ledger
from contextledger.application.projections import ReadModelRunner
from contextledger.domain.errors import ContextLedgerError, StoreError
from contextledger.infrastructure.cli.render import Progress
from contextledger.infrastructure.cli.signals import interruptible
from contextledger.infrastructure.database import Database
from contextledger.infrastructure.readmodels import SQLReadModels

__all__ = ["caught_up_read_models", "current_read_models"]


@contextmanager
def caught_up_read_models(ledger: Ledger, *, label: str = "catch up") -> Iterator[SQLReadModels]:
    """The ledger's read models, caught up with its log as of now (a progress bar
    while they are behind; Ctrl-C stops between two events, each applied with its
    tracking row in one transaction, so the next run resumes where this one stopped)."""
    models = SQLReadModels.for_ledger(ledger)
    try:
        runner = models.runner(ledger, close_with_runner=False)
        top = ledger.recorder.max_notification_id() or 0
        if min(runner.position(name) for name in runner.names) < top:
            runner.start()
            try:
                # Projections that follow few topics only look behind: a short wait
                # settles them without a progress bar.
                if not runner.wait_idle(0.25):
                    _follow_with_progress(runner, top, label)
            finally:
                runner.stop()
        yield models
    finally:
        models.close()


def _follow_with_progress(runner: ReadModelRunner, top: int, label: str) -> None:
    with interruptible() as asked, Progress(label, should_stop=asked, unit="event") as progress:
        while not runner.wait_idle(0.25):
            if runner.last_error is not None:
                raise StoreError(f"the read models cannot catch up: {runner.last_error}")
            progress(min(runner.position(name) for name in runner.names), top)
        progress(top, top)


@contextmanager
def current_read_models(ledger: Ledger) -> Iterator[SQLReadModels | None]:
    """The ledger's read models if they are there and have applied the whole log (as
    of now), opened without creating or writing anything (a read-only ledger, a role
    with ``SELECT`` only); None when they are missing, behind or cannot be read, and
    the caller reads the log instead."""
    database = Database.parse(ledger.settings.database_url)
    if database.kind == "memory" or (database.kind == "sqlite" and not (
        database.views_path is not None and database.views_path.exists()
    )):
        yield None
        return
    models: SQLReadModels | None = None
    try:
        models = SQLReadModels.for_ledger(ledger, create=False)
        top = ledger.recorder.max_notification_id() or 0
        usable = models.has_tables() and all(
            (view.max_tracking_id(ledger.name) or 0) >= top for view in models.views.values()
        )
    except ContextLedgerError:
        usable = False
    try:
        yield models if usable else None
    finally:
        if models is not None:
            models.close()
