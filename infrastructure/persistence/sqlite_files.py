"""Whether a path can be a SQLite database, asked before SQLite opens it, and what a
read-only open leaves beside it.

SQLite answers a directory, a text file or an unreadable file with errors of its own
that name no path. The event store's file (``stores``) and the read models' file
(``readmodels.storage``) are checked here first.

A connection opened ``mode=ro`` to a database in WAL mode makes its ``-wal`` and
``-shm`` files when they are not there (no other connection has the file open), and,
being read-only, never removes them: ``ReadOnlyLeftovers`` notes which were missing
when a read-only store opened and, when it closes, removes them again the way SQLite
does -- by closing a connection that has read the file: SQLite deletes both only when
that connection is the last one on the file and the WAL holds nothing (an empty WAL
is never checkpointed: the database file is not written). Where neither file is
there and none can be made (a folder this process may not write), no writer can be
using the file either, and ``read_only_uri`` opens it ``immutable``: SQLite reads it
without them.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from contextledger.domain.values.errors import SchemaMissingError, StoreError

__all__ = ["ReadOnlyLeftovers", "check_sqlite_file", "read_only_uri"]

#: The first 16 bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(path: Path, *, must_exist: bool, url: str) -> None:
    """Raise ``StoreError`` (or ``SchemaMissingError`` when ``must_exist`` and the
    file is not there) if ``path`` cannot be a SQLite database."""
    if path.is_dir():
        raise StoreError(
            f"{path} is a directory, not a SQLite database file", url=url, cause="not_a_database"
        )
    if not path.exists():
        if must_exist:
            raise SchemaMissingError(
                f"no SQLite database at {path} (opened read-only: nothing is created; check "
                "the path, or create the store with `contextledger init`)",
                url=url,
                table=str(path),
                cause="database_missing",
            )
        return
    try:
        with path.open("rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(
            f"cannot read the SQLite file {path}: {exc.strerror or exc}", url=url, cause="unreadable"
        ) from exc
    if header and header != _SQLITE_HEADER:
        raise StoreError(
            f"{path} is not a SQLite database (it holds something else; check the path)",
            url=url,
            cause="not_a_database",
        )


def read_only_uri(path: Path) -> str:
    """The ``file:`` URI that opens ``path`` read-only, never creating it (see the
    module doc for when it is ``immutable``)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    folder = path.resolve().parent
    if not any(_beside(path, s).exists() for s in ("-wal", "-shm")) and not os.access(
        folder, os.W_OK, effective_ids=os.access in os.supports_effective_ids
    ):
        uri += "&immutable=1"
    return uri


class ReadOnlyLeftovers:
    """The ``-wal``/``-shm`` files of ``path`` missing when a read-only open began
    (see the module doc); ``tidy()`` when it has closed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.missing = [f for f in (_beside(path, "-wal"), _beside(path, "-shm")) if not f.exists()]

    def tidy(self) -> None:
        """Remove the files this open made, if no connection is left on the file."""
        wal = _beside(self.path, "-wal")
        made = [f for f in self.missing if f.exists()]
        if not made or not self.path.exists() or (wal.exists() and wal.stat().st_size > 0):
            return  # nothing made here, or another connection has written: its files
        with contextlib.suppress(sqlite3.Error, OSError):
            conn = sqlite3.connect(self.path, timeout=0)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
            finally:
                conn.close()


def _beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)
