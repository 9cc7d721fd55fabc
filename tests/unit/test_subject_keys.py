"""Data-subject keys over the in-memory key table: naming subjects, erasure, rotation,
and read-model values sealed per subject."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextledger as cl
from contextledger.infrastructure.keys.memory_key_table import MemoryKeyTable
from contextledger.infrastructure.keys.subject_keys import SubjectKeys
from contextledger.infrastructure.readmodels.sealing import SUBJECT_SEALED_PREFIX, SealedText, codec_for_key

WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def make_keys(master: bytes | None = None) -> SubjectKeys:
    return SubjectKeys(MemoryKeyTable(), master or os.urandom(32), clock=lambda: WHEN)


def test_a_key_is_made_once_per_subject_and_differs_between_subjects() -> None:
    keys = make_keys()
    first, again, other = keys.key_for("user-1"), keys.key_for("user-1"), keys.key_for("user-2")
    assert first.key_id == again.key_id != other.key_id
    keys.forget()  # read back from the table: the same key unwraps
    assert keys.key_for("user-1").cipher.decrypt(first.cipher.encrypt(b"x")) == b"x"


def test_a_conversation_is_its_own_subject_unless_it_names_one_before_its_first_record() -> None:
    keys = make_keys()
    own, named = uuid4(), uuid4()
    assert keys.subject_of(own) == str(own)
    keys.assign(named, "tenant-9")
    keys.assign(named, "tenant-9")  # the same again: nothing to do
    assert keys.subject_of(named) == "tenant-9"
    assert keys.key_for_conversation(named).key_id == keys.key_for("tenant-9").key_id
    with pytest.raises(cl.InvalidArgumentError, match="another data subject"):
        keys.assign(named, "tenant-10")
    keys.key_for_conversation(own)  # its first record is written under its own key
    with pytest.raises(cl.InvalidArgumentError, match="before its first record"):
        keys.assign(own, "tenant-9")


@pytest.mark.parametrize("bad", ["", "   ", "x" * 257, "a\x00b", 42, None])
def test_a_bad_subject_is_an_invalid_argument(bad: object) -> None:
    with pytest.raises(cl.InvalidArgumentError):
        make_keys().key_for(bad)  # type: ignore[arg-type]


def test_erasure_destroys_the_key_keeps_its_first_tombstone_and_blocks_new_keys() -> None:
    keys = make_keys()
    cid = uuid4()
    keys.assign(cid, "user-1")
    made = keys.key_for_conversation(cid)
    tomb = keys.tombstone("user-1", reason="request")
    assert (tomb.subject, tomb.erased_at, tomb.reason) == ("user-1", WHEN, "request")
    assert keys.tombstone("user-1", reason="again").reason == "request"
    assert keys.is_erased("user-1") and keys.key_by_id(made.key_id) == tomb
    with pytest.raises(cl.ConversationErasedError) as caught:
        keys.key_for_conversation(cid)
    assert caught.value.conversation_id == cid and caught.value.erased_at == WHEN
    keys.tombstone("never-seen")  # erased before it had a key: none is ever made
    with pytest.raises(cl.ConversationErasedError):
        keys.key_for("never-seen")
    with pytest.raises(cl.ConversationErasedError):
        keys.assign(uuid4(), "never-seen")
    with pytest.raises(cl.InvalidArgumentError):
        keys.tombstone("user-2", reason="x" * 3000)


def test_rotation_rewraps_under_the_new_master_and_the_old_one_no_longer_opens() -> None:
    old, new = os.urandom(32), os.urandom(32)
    keys = make_keys(old)
    sealed = keys.key_for("user-1").cipher.encrypt(b"content")
    assert keys.rewrap(old, new) == 1
    rotated = SubjectKeys(keys.table, new)
    assert rotated.key_for("user-1").cipher.decrypt(sealed) == b"content"
    with pytest.raises(cl.StoreError, match="another master key"):
        SubjectKeys(keys.table, old).key_for("user-1")
    with pytest.raises(cl.ConfigurationError, match="not the current master key"):
        keys.rewrap(os.urandom(32), os.urandom(32))  # neither is the table's master key


@given(st.text(max_size=200))
def test_read_model_values_sealed_per_subject_open_until_the_subject_is_erased(text: str) -> None:
    keys = make_keys()
    codec = codec_for_key(base64.b64encode(os.urandom(32)).decode(), keys=keys)
    assert codec is not None
    cid = uuid4()
    keys.assign(cid, "user-1")
    sealed = codec.seal_for(cid, text)
    raw = base64.b64decode(sealed.removeprefix(SUBJECT_SEALED_PREFIX))
    assert raw[:4] == b"CLK\x01" and raw[4:20] == keys.key_for("user-1").key_id
    assert len(text) < 8 or text.encode() not in raw
    assert codec.open(sealed) == text
    column = SealedText(codec)
    assert column.process_result_value(sealed, None) == text  # type: ignore[arg-type]
    keys.tombstone("user-1")
    assert codec.open(sealed) is None
    assert column.process_result_value(sealed, None) is None  # type: ignore[arg-type]


def test_a_value_sealed_per_subject_needs_the_stores_keys_to_open() -> None:
    keys = make_keys()
    master = base64.b64encode(os.urandom(32)).decode()
    sealed = codec_for_key(master, keys=keys).seal_for(uuid4(), "hello")  # type: ignore[union-attr]
    with pytest.raises(cl.StoreError, match="data-subject key"):
        codec_for_key(master).open(sealed)  # type: ignore[union-attr]
    with pytest.raises(cl.KeyMissingError):
        codec_for_key(master, keys=make_keys()).open(sealed)  # type: ignore[union-attr]
