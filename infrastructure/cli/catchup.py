"""Read models brought up to date before a command reads them, with progress."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from contextledger.domain.errors import StoreError
from contextledger.infrastructure.cli.render import Progress
from contextledger.infrastructure.cli.signals import interruptible

if TYPE_CHECKING:
    from contextledger.application.ledger import Ledger
    from contextledger.application.projections import ReadModelRunner
    from contextledger.infrastructure.readmodels import SQLReadModels

__all__ = ["caught_up_read_models"]


@contextmanager
def caught_up_read_models(ledger: Ledger, *, label: str = "catch up") -> Iterator[SQLReadModels]:
    """The ledger's read models, caught up with its log as of now (a progress bar
    while they are behind; Ctrl-C stops between two events, each applied with its
    tracking row in one transaction, so the next run resumes where this one stopped)."""
    from contextledger.application.notifications import committed_top
    from contextledger.infrastructure.readmodels import SQLReadModels

    models = SQLReadModels.for_ledger(ledger)
    try:
        runner = models.runner(ledger, close_with_runner=False)
        # What is committed now, not the final mark: past a gap the mark may lag what
        # is committed (docs/operations.md), and a stale listing must not pass for
        # a complete one. The runner's wait_idle waits for that same committed top.
        top = committed_top(ledger.recorder)
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
