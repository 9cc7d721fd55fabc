"""Whether a store's data keys are wrapped under a master key or kept unwrapped.

A store opened with a master key (``Settings.cipher_key``) wraps each subject's data
key under it: erasure *and* encryption at rest. A store opened without one keeps its
data keys unwrapped (``master_id`` ``UNWRAPPED`` in the key table): its records are
still under per-subject keys, so erasing a subject still shreds them, but whoever can
read the key table can read the keys -- erasure, not encryption at rest. A store is
one or the other: the key table's check row says which (``mark``: made when the
table is, under the opening process's master key or unwrapped), and opening it the
other way is a ``ConfigurationError`` at opening (nothing changed). A table without
the row and without keys was made by a process with a master key before the check row
existed (earlier code made key tables only then).
"""

from __future__ import annotations

import time

from contextledger.domain.values.errors import ConfigurationError
from contextledger.infrastructure.keys.key_tables import KeyTable
from contextledger.infrastructure.keys.subject_keys import CHECK_SUBJECT, UNWRAPPED, SubjectKeys

__all__ = ["keys_are_unwrapped", "keys_are_wrapped", "keys_unwrapped_error", "mark"]

#: How long an opening without a master key waits for the check row of a key table
#: another process has just made (its row follows its table at once).
_SETTLE_SECONDS = 1.0


def mark(keys: SubjectKeys) -> None:
    """Give a key table that holds nothing yet its check row, under ``keys``' master
    key or unwrapped; a table that holds keys is left as it is."""
    if _mode(keys.table) is None:
        keys.check_master()


def _mode(table: KeyTable) -> str | None:
    """``UNWRAPPED``, ``"wrapped"``, or None (the table holds no key yet)."""
    check = table.by_subject(CHECK_SUBJECT)
    if check is not None:
        return UNWRAPPED if check.master_id == UNWRAPPED else "wrapped"
    for row in table.wrapped():  # a table made before the check row
        return UNWRAPPED if row.master_id == UNWRAPPED else "wrapped"
    return None


def keys_are_wrapped(table: KeyTable) -> bool:
    """Whether the table's data keys are wrapped under a master key (an existing table
    with no check row and no key: one made before the check row, with a master key)."""
    deadline = time.monotonic() + _SETTLE_SECONDS
    while (mode := _mode(table)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return mode != UNWRAPPED


def keys_are_unwrapped(table: KeyTable) -> bool:
    """Whether the table keeps its data keys unwrapped (a store without a master key)."""
    return _mode(table) == UNWRAPPED


def keys_unwrapped_error(where: str) -> ConfigurationError:
    """What opening a store whose keys are unwrapped with a master key is."""
    return ConfigurationError(
        f"the store {where} was written without a master key (its data keys are kept "
        "unwrapped): open it without a cipher key",
        setting="cipher_key",
        url=where,
    )
