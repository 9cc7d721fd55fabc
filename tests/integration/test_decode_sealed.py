"""A record under its subject's data key decodes the same at once as the general way.

``SubjectMapper.to_domain_event`` decrypts the usual record (one data key) where it
lies, its associated data built from the conversation's id (kept from the record
before) and the record's version; anything it cannot take goes the general way
(``decrypt_state``). Both must give the same event, and a record altered or moved to
another place in the log must fail as the general way says.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import resolve_topic

import contextledger as cl
from contextledger.infrastructure.keys.subject_mapper import MARK


def _ledger(tmp_path: Path) -> cl.Ledger:
    key = base64.b64encode(os.urandom(32)).decode()
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    return cl.Ledger.open(settings=cl.Settings(database_url=url, cipher_key=key, run_policy=False))


def _general(ledger: cl.Ledger, stored: StoredEvent) -> Any:
    mapper: Any = ledger.mapper
    return mapper._decode_general(resolve_topic(stored.topic), stored, mapper.decrypt_state(stored))


def _counting(mapper: Any, taken: list[StoredEvent]) -> None:
    """Count the records ``mapper`` decrypts the general way (into ``taken``)."""
    general_way = mapper.decrypt_state

    def counted(stored: StoredEvent, *args: Any) -> bytes:
        taken.append(stored)
        return bytes(general_way(stored, *args))

    mapper.decrypt_state = counted


def _moved(stored: StoredEvent, **change: Any) -> StoredEvent:
    fields = {
        "originator_id": stored.originator_id,
        "originator_version": stored.originator_version,
        "topic": stored.topic,
        "state": bytes(stored.state),
    }
    return StoredEvent(**{**fields, **change})


def test_every_record_of_two_conversations_decodes_the_same_either_way(tmp_path: Path) -> None:
    with _ledger(tmp_path) as ledger:
        cids = [ledger.start(f"system {n}") for n in range(2)]
        for i in range(6):
            for cid in cids:  # the records of the two alternate: the kept id changes each time
                ledger.append(cid, {"role": "user", "content": f"secret {i} of {cid}"})
        stored = [s for cid in cids for s in ledger.recorder.select_events(cid)]
        assert all(bytes(s.state)[: len(MARK)] == MARK for s in stored)
        mapper: Any = ledger.mapper
        taken: list[StoredEvent] = []
        _counting(mapper, taken)
        fast = [mapper.to_domain_event(s) for s in stored[::2] + stored[1::2]]
        as_text = [mapper.to_domain_event(_moved(s, originator_id=str(s.originator_id))) for s in stored]
        assert taken == []  # every one decrypted at once, none the general way
        del mapper.decrypt_state
        assert fast == [_general(ledger, s) for s in stored[::2] + stored[1::2]]
        assert as_text == [_general(ledger, s) for s in stored]


@pytest.mark.parametrize("where", ["another version", "another conversation", "a flipped byte"])
def test_a_record_altered_or_moved_fails_as_the_general_way_says(tmp_path: Path, where: str) -> None:
    with _ledger(tmp_path) as ledger:
        a, b = ledger.start("system a"), ledger.start("system b")
        ledger.append(a, {"role": "user", "content": "secret of a"})
        ledger.append(b, {"role": "user", "content": "secret of b"})
        record = ledger.recorder.select_events(a)[-1]
        ledger.mapper.to_domain_event(record)  # decodes where it is
        state = bytes(record.state)
        if where == "another version":
            bad = _moved(record, originator_version=record.originator_version + 1)
        elif where == "another conversation":
            bad = _moved(record, originator_id=ledger.recorder.select_events(b)[-1].originator_id)
        else:
            bad = _moved(record, state=state[:-5] + bytes([state[-5] ^ 1]) + state[-4:])
        mapper: Any = ledger.mapper
        taken: list[StoredEvent] = []
        _counting(mapper, taken)
        with pytest.raises(cl.StoreError, match="does not decrypt") as fast:
            mapper.to_domain_event(bad)
        assert taken == [bad]  # refused at once, then failed the general way
        del mapper.decrypt_state
        with pytest.raises(cl.StoreError) as general:
            _general(ledger, bad)
        assert str(fast.value) == str(general.value)
