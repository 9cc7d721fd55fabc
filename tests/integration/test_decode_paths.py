"""The mapper's two ways of decoding a record give the same event.

``PydanticMapper.decode_state`` validates a record of a class at its first version from
its JSON in one pass; everything else (upcasting, strings JSON cannot hold, damaged
records) goes the general way (``json.loads`` then ``model_validate``). Every record of
the golden log, and messages of any text, must come out equal either way, and a record
the one pass refuses must still decode, or fail as the general way says.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.domain.events import MessageAppended
from contextledger.domain.values.errors import LogDamagedError
from contextledger.infrastructure.keys import mapper as mapper_module

PLAIN = cl.Settings(database_url="memory://", key_scope="store", run_policy=False)
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden-v1.db"


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cl.Ledger]:
    copy = tmp_path_factory.mktemp("decode") / GOLDEN.name
    shutil.copyfile(GOLDEN, copy)
    with cl.Ledger.open(f"sqlite:///{copy}", run_policy=False) as ledger:
        yield ledger


def _general(ledger: cl.Ledger, stored: StoredEvent) -> Any:
    """The record decoded the general way only."""
    from eventsourcing.utils import resolve_topic

    mapper: Any = ledger.mapper
    data = mapper.decrypt_state(stored) if mapper.decrypts() else stored.state
    return mapper._decode_general(resolve_topic(stored.topic), stored, data)


def test_every_golden_record_decodes_the_same_either_way(golden: cl.Ledger) -> None:
    notifications = golden.recorder.select_notifications(1, 100_000)
    assert len(notifications) > 50
    one_pass = 0
    for stored in notifications:
        fast = golden.mapper.to_domain_event(stored)
        assert fast == _general(golden, stored)
        assert type(fast) is type(_general(golden, stored))
        one_pass += mapper_module._from_json(type(fast), stored, bytes(stored.state)) is not None
    assert one_pass > len(notifications) // 2  # most records take the one pass


texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(content=texts, name=st.none() | st.from_regex(r"[A-Za-z0-9_]{1,10}", fullmatch=True))
def test_any_message_text_decodes_as_it_was_written(content: str, name: str | None) -> None:
    with cl.Ledger.open(settings=PLAIN) as ledger:
        cid = ledger.start("system")
        message: dict[str, Any] = {"role": "user", "content": content}
        if name is not None:
            message["name"] = name
        ledger.append(cid, message)
        stored = ledger.recorder.select_events(cid)[-1]
        event = ledger.mapper.to_domain_event(stored)
        assert isinstance(event, MessageAppended)
        assert event == _general(ledger, stored)
        assert event.message.content == content


def _record(state: bytes, cid: UUID | None = None) -> StoredEvent:
    return StoredEvent(
        originator_id=cid or uuid4(), originator_version=2, topic=MessageAppended.TOPIC, state=state
    )


@pytest.mark.parametrize(
    "state",
    [b"{not json", b"[1, 2]", b'{"message": 3}', b"{}", b'{"originator_id": "x"}'],
)
def test_a_damaged_record_fails_as_the_general_way_says(state: bytes) -> None:
    with cl.Ledger.open(settings=PLAIN) as ledger:
        record = _record(state)
        with pytest.raises(LogDamagedError) as fast:
            ledger.mapper.to_domain_event(record)
        with pytest.raises(LogDamagedError) as general:
            _general(ledger, record)
        assert str(fast.value) == str(general.value)


def test_a_state_naming_the_envelope_is_decoded_the_general_way() -> None:
    with cl.Ledger.open(settings=PLAIN) as ledger:
        cid = ledger.start("system")
        ledger.append(cid, {"role": "user", "content": "hello"})
        stored = ledger.recorder.select_events(cid)[-1]
        assert mapper_module._from_json(MessageAppended, stored, bytes(stored.state)) is not None
        renamed = _record(bytes(stored.state)[:-1] + b',"originator_version":99}', cid)
        assert mapper_module._from_json(MessageAppended, renamed, bytes(renamed.state)) is None
        event = ledger.mapper.to_domain_event(renamed)  # the envelope's version wins
        assert event.originator_version == renamed.originator_version == 2
        assert event == _general(ledger, renamed)
