"""How a data key is kept under the master key: the associated data it is wrapped
with (its id and subject, so a wrapped key moved to another row does not open), the
name the key table gives a master key, and the table's check row (a known token
wrapped under the current master key: see ``subject_keys``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from datetime import datetime

from contextledger.infrastructure.keys.aead import AESGCMCipher
from contextledger.infrastructure.keys.key_tables import KeyRow

__all__ = [
    "CHECK_SUBJECT",
    "KEY_ID_SIZE",
    "MASTER_KEY_SIZE",
    "UNWRAPPED",
    "DataKey",
    "Tombstone",
    "master_key_id",
    "new_check_row",
    "opens",
    "wrap_aad",
    "wrap_key",
]

KEY_ID_SIZE = 16
#: The master key's check row of the key table: no data subject is named "" (a subject
#: is never blank), so no subject's key can take its place.
CHECK_SUBJECT = ""
#: What the check row holds, wrapped under the master key.
_CHECK_TOKEN = b"contextledger master key check v1"
#: The length of a master key ``keys rotate`` makes current (a new data key's too).
MASTER_KEY_SIZE = 32
_WRAP_CONTEXT = b"contextledger data key v1\x00"
_MASTER_ID_CONTEXT = b"contextledger master key id v1"
#: The ``master_id`` of a key stored unwrapped (a store without a master key).
UNWRAPPED = "unwrapped"


def master_key_id(master: bytes) -> str:
    """The name the key table gives a master key: a keyed digest, never the key."""
    return hmac.new(master, _MASTER_ID_CONTEXT, hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True)
class DataKey:
    """A subject's data key, unwrapped: its id and its cipher."""

    key_id: bytes
    subject: str
    cipher: AESGCMCipher

    def __repr__(self) -> str:
        return f"DataKey(key_id={self.key_id.hex()!r}, subject={self.subject!r})"


@dataclass(frozen=True)
class Tombstone:
    """What is left of an erased subject's key: when it was erased, and why."""

    key_id: bytes
    subject: str
    erased_at: datetime
    reason: str | None


def wrap_aad(key_id: bytes, subject: str) -> bytes:
    """The associated data a data key is wrapped with: its id and its subject."""
    return _WRAP_CONTEXT + key_id + subject.encode("utf-8", "surrogatepass")


def wrap_key(master: AESGCMCipher | None, key: bytes, key_id: bytes, subject: str) -> bytes:
    """``key`` as the key table holds it: wrapped under ``master``, or as it is (no master key)."""
    return key if master is None else master.encrypt(key, wrap_aad(key_id, subject))


def new_check_row(master: AESGCMCipher | None, master_id: str, now: datetime) -> KeyRow:
    """A new check row: the check token wrapped under ``master`` (as it is without one)."""
    key_id = os.urandom(KEY_ID_SIZE)
    wrapped = wrap_key(master, _CHECK_TOKEN, key_id, CHECK_SUBJECT)
    return KeyRow(
        key_id=key_id, subject=CHECK_SUBJECT, wrapped_key=wrapped, master_id=master_id, created_at=now
    )


def opens(master: AESGCMCipher | None, row: KeyRow, *, check: bool = False) -> bool:
    """Whether ``row``'s wrapped key unwraps under ``master`` (``check``: to the check
    token); with no master key, whether the row holds its key unwrapped."""
    if row.wrapped_key is None:
        return False
    if master is None:
        raw = row.wrapped_key if row.master_id == UNWRAPPED else None
    else:
        try:
            raw = master.decrypt(row.wrapped_key, wrap_aad(row.key_id, row.subject))
        except ValueError:
            return False
    return raw == _CHECK_TOKEN if check else raw is not None
