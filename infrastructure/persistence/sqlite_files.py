"""Whether a path can be a SQLite database, asked before SQLite opens it.

SQLite answers a directory, a text file or an unreadable file with errors of its own
that name no path. The event store's file (``stores``) and the read models' file
(``readmodels.storage``) are checked here first.
"""

from __future__ import annotations

from pathlib import Path

from contextledger.domain.errors import SchemaMissingError, StoreError

__all__ = ["check_sqlite_file"]

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
