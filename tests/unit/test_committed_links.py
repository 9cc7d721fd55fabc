"""The committed links of the digest chain (``values/digests.py``, ``commands/links.py``):
what an append writes is what verify recomputes, and a change to a link's content, salt,
commitment, time or position no longer matches it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import contextledger.domain.conversation  # noqa: F401  (the events' fold)
from contextledger.domain.commands.links import content_of, expected_link, structure_of
from contextledger.domain.events import MessageAppended
from contextledger.domain.values.digests import (
    chain_digest,
    commit,
    commitment,
    committed_link,
    message_content,
    structure,
)
from contextledger.domain.values.messages import Message

AT = datetime(2026, 5, 2, 10, 0, 0, 123456, tzinfo=UTC)
MESSAGE = Message(role="user", content="the flight leaves at 15:15")


def appended(previous: str, **changes: object) -> MessageAppended:
    fields = commit(previous, structure("message", 3, AT, 1), message_content(MESSAGE))
    event = MessageAppended(
        originator_id=uuid4(),
        originator_version=3,
        timestamp=AT,
        position=1,
        message=MESSAGE,
        tokens=7,
        **fields,
    )
    return event.model_copy(update=changes)


def test_commit_spells_the_commitment_and_the_link_verify_recomputes() -> None:
    fields = commit("p" * 64, "message|3|t|1", b"content")
    assert fields["commitment"] == commitment(fields["salt"], b"content")
    assert fields["digest"] == committed_link("p" * 64, "message|3|t|1", fields["commitment"])
    again = commit("p" * 64, "message|3|t|1", b"content")
    assert again["salt"] != fields["salt"] and again["commitment"] != fields["commitment"]  # fresh salts


def test_an_appended_link_is_what_verify_expects_and_survives_storage() -> None:
    event = appended("p" * 64)
    assert structure_of(event) == f"message|3|{AT.isoformat()}|1"
    assert content_of(event) == message_content(MESSAGE)
    assert expected_link("p" * 64, event) == event.digest
    stored = MessageAppended.model_validate_json(event.model_dump_json())
    assert expected_link("p" * 64, stored) == event.digest


def test_a_change_to_the_content_salt_commitment_time_or_position_shows() -> None:
    event = appended("p" * 64)
    for changed in (
        event.model_copy(update={"message": Message(role="user", content="the flight leaves at 16:15")}),
        event.model_copy(update={"salt": "0" * 32}),
        event.model_copy(update={"commitment": "0" * 64}),
        event.model_copy(update={"timestamp": AT + timedelta(seconds=1)}),
        event.model_copy(update={"position": 2}),
        event.model_copy(update={"originator_version": 4}),
    ):
        assert expected_link("p" * 64, changed) != event.digest
    assert expected_link("q" * 64, event) != event.digest  # another previous link


def test_a_link_without_a_commitment_hashes_its_content_as_before() -> None:
    event = appended("p" * 64).model_copy(
        update={"salt": None, "commitment": None, "digest": chain_digest("p" * 64, MESSAGE)}
    )
    assert expected_link("p" * 64, event) == event.digest
    dumped = event.model_dump(mode="json")
    assert "salt" not in dumped and "commitment" not in dumped  # stored as before commitments
