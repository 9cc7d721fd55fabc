"""An erased conversation's stored structure altered behind the ledger's back: its
erased records (dropped, swapped) or the structure its erasure recorded in clear in
the ``ContentErased`` record (a commitment, a time, a link's digest, a summary's
range changed), as someone with access to the database could."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from contextledger.domain.erasure import Erasure
from tests.support.raw_store import RawStore

__all__ = ["TAMPERS", "tamper"]

#: The ways ``tamper`` alters an erased conversation.
TAMPERS = ("drop", "swap", "commitment", "timestamp", "digest", "range")

#: The first bytes of a record stored in clear (``infrastructure/keys/subject_mapper.py``).
CLEAR_MARK = b"CLC\x01"


def tamper(raw: RawStore, subject: str, cid: UUID, how: str) -> bool:
    """Alter ``cid``'s erased part as ``how`` says (``TAMPERS``); False if it holds
    nothing to alter that way (no summary to change the range of, one record only)."""
    if how in ("drop", "swap"):
        return _rows(raw, cid, how)
    record_id = Erasure.id_for(subject)
    [(version, _, state)] = raw.rows("events", record_id)
    assert state.startswith(CLEAR_MARK)
    data = json.loads(state[len(CLEAR_MARK) :])
    [log] = [log for log in data.get("structure", []) if log["conversation_id"] == str(cid)]
    if not _change(log["records"], how):
        return False
    raw.set_state("events", record_id, version, CLEAR_MARK + json.dumps(data).encode())
    return True


def _rows(raw: RawStore, cid: UUID, how: str) -> bool:
    rows = raw.rows("events", cid)
    if len(rows) < 3:
        return False
    middle = len(rows) // 2
    if how == "drop":
        raw._run(
            f"DELETE FROM {raw.tables['events']} WHERE originator_id = %s AND originator_version = %s",
            (raw._id(cid), rows[middle][0]),
        )
        return True
    (a, _, first), (b, _, second) = rows[middle - 1], rows[middle]
    raw.set_state("events", cid, a, second)  # two records' bytes in each other's place
    raw.set_state("events", cid, b, first)
    return True


def _change(records: list[dict[str, Any]], how: str) -> bool:
    def flip(text: str) -> str:
        return ("0" if text[0] != "0" else "1") + text[1:]

    for record in records:
        if how == "commitment" and record.get("commitment"):
            record["commitment"] = flip(record["commitment"])
        elif how == "digest" and record.get("digest") and record.get("structure"):
            record["digest"] = flip(record["digest"])
        elif how == "timestamp" and record.get("structure") and record.get("timestamp"):
            at = datetime.fromisoformat(record["timestamp"]) + timedelta(seconds=1)
            record["timestamp"] = at.isoformat()
        elif how == "range" and record.get("summary"):
            covers, first, last = record["summary"]
            record["summary"] = [covers, first, last + 10_000]  # past every message there is
        else:
            continue
        return True
    return False
