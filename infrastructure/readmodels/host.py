"""What a view needs of the read models it belongs to: tables, codec, transactions.

``SQLView`` (``view``) is written against ``ReadModelHost``, the part of
``SQLReadModels`` (``models``) that its views use, so that the views import nothing of
the module that builds them: ``models`` imports the views, the views import ``view``,
and ``view`` imports this module, which imports none of them.

``SharedTransaction`` is the write transaction several views share in a batch
(``SQLReadModels.batch``, joined by ``SQLView.batch``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import Connection, Table

from contextledger.infrastructure.readmodels.sealing import ContentCodec

__all__ = ["ReadModelHost", "SharedTransaction"]


@dataclass
class SharedTransaction:
    """A write transaction several views share (``SQLReadModels.batch``)."""

    conn: Connection
    thread: int
    #: Run after the commit (each view's memory of what it applied).
    on_commit: list[Callable[[], None]] = field(default_factory=list)


class ReadModelHost(Protocol):
    """The read models a view belongs to, as the view uses them (``SQLReadModels``)."""

    @property
    def tables(self) -> dict[str, Table]:
        """Every read-model table by name, the tracking table (``tracking``) included."""
        ...

    @property
    def codec(self) -> ContentCodec | None:
        """Seals the content columns (None: stored in plaintext)."""
        ...

    @property
    def is_sqlite(self) -> bool:
        """Whether the tables are on SQLite (else PostgreSQL)."""
        ...

    def begin(self) -> AbstractContextManager[Connection]:
        """One write transaction."""
        ...

    def read(self) -> AbstractContextManager[Connection]:
        """One read transaction."""
        ...

    def batch(self) -> AbstractContextManager[SharedTransaction]:
        """One write transaction shared by every view that joins it in this thread."""
        ...
