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


def _both_ways(ledger: cl.Ledger, stored: StoredEvent, cls: Any) -> tuple[Any, bool]:
    """The record decoded by ``to_domain_event`` (equal to the general way's, checked)
    and whether the one pass took it."""
    event = ledger.mapper.to_domain_event(stored)
    assert event == _general(ledger, stored)
    assert type(event) is type(_general(ledger, stored))
    return event, mapper_module._from_json(cls, stored, bytes(stored.state)) is not None


@settings(max_examples=40, deadline=None)
@given(content=texts)
def test_records_of_a_later_class_version_take_the_one_pass_and_decode_the_same(content: str) -> None:
    """``Started`` and the snapshot are at class version 2: a record written now ends
    with its version and takes the one pass, whatever text a message holds (a text
    ending like the version mark included)."""
    from contextledger.domain.conversation import ConversationSnapshot
    from contextledger.domain.events import Started

    with cl.Ledger.open(settings=PLAIN.model_copy(update={"snapshot_interval": 2})) as ledger:
        cid = ledger.start("system")
        for text in (content, content + ',"class_version":2}', '"class_version"'):
            ledger.append(cid, {"role": "user", "content": text})
        started = ledger.recorder.select_events(cid, limit=1)[0]
        assert started.topic == Started.TOPIC
        assert _both_ways(ledger, started, Started)[1]
        [snapshot] = ledger.snapshots.recorder.select_events(cid, desc=True, limit=1)
        event, one_pass = _both_ways(ledger, snapshot, ConversationSnapshot)
        assert one_pass and isinstance(event, ConversationSnapshot)
        assert event.originator_version == 4  # after the three messages
        assert [e.message.content for e in event.state.window] == [
            content,
            content + ',"class_version":2}',
            '"class_version"',
        ]


def test_a_later_version_record_with_a_nested_class_version_key_goes_the_general_way() -> None:
    """A key named ``class_version`` inside the state (here a tool's parameter) makes
    the version mark ambiguous: the record is decoded the general way, equal."""
    from contextledger.domain.events import Started

    tool = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"class_version": {"type": "integer"}}},
        },
    }
    with cl.Ledger.open(settings=PLAIN) as ledger:
        cid = ledger.start("system", tools=[tool])
        started = ledger.recorder.select_events(cid, limit=1)[0]
        assert bytes(started.state).count(b'"class_version"') == 2
        event, one_pass = _both_ways(ledger, started, Started)
        assert not one_pass and event.tools[0]["function"]["parameters"]["properties"] == {
            "class_version": {"type": "integer"}
        }


def test_a_record_written_at_an_earlier_class_version_is_upcast_the_general_way() -> None:
    """A ``Started`` of version 1 (its JSON without the mark, its policy without
    ``token_scope``) is not taken by the one pass: it is upcast, as the golden log's are."""
    from contextledger.domain.events import Started

    with cl.Ledger.open(settings=PLAIN) as ledger:
        cid = ledger.start("system")
        stored = ledger.recorder.select_events(cid, limit=1)[0]
        state = bytes(stored.state)
        assert state.endswith(b',"class_version":2}')
        old = StoredEvent(
            originator_id=stored.originator_id,
            originator_version=stored.originator_version,
            topic=stored.topic,
            state=state[: -len(b',"class_version":2}')] + b"}",
        )
        assert mapper_module._from_json(Started, old, bytes(old.state)) is None
        assert ledger.mapper.to_domain_event(old) == _general(ledger, old)
