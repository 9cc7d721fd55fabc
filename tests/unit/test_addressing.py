"""Conversation ids and keys resolve in one place, deterministically, with typed errors."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.application.shared.addressing import KEY_NAMESPACE, check_key, id_for_key, resolve
from contextledger.domain.values.errors import InvalidArgumentError


def test_the_key_namespace_is_the_documented_uuid5() -> None:
    assert uuid.uuid5(uuid.NAMESPACE_URL, "https://contextledger/conversation-keys") == KEY_NAMESPACE


def test_an_id_its_string_forms_and_a_key_all_resolve() -> None:
    cid = uuid.uuid4()
    assert resolve(cid) == cid
    assert resolve(str(cid)) == cid
    assert resolve(str(cid).upper()) == cid
    assert resolve(cid.hex) == cid
    assert resolve("chat-7") == uuid.uuid5(KEY_NAMESPACE, "chat-7") == id_for_key("chat-7")


@settings(deadline=None)
@given(st.one_of(st.text(max_size=250), st.integers(), st.none(), st.binary(max_size=10), st.floats()))
def test_any_value_either_resolves_to_a_uuid_or_raises_a_typed_error(value: object) -> None:
    try:
        assert isinstance(resolve(value), uuid.UUID)
    except InvalidArgumentError as exc:
        assert exc.argument == "conversation_id"


@settings(deadline=None)
@given(st.text(min_size=1, max_size=200).filter(lambda t: "\x00" not in t))
def test_every_valid_key_maps_to_the_same_id_every_time(key: str) -> None:
    try:
        check_key(key)
    except InvalidArgumentError:
        return  # a lone surrogate, or text in the form of a UUID
    assert id_for_key(key) == resolve(key) == uuid.uuid5(KEY_NAMESPACE, key)


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\udc00b", "nul\x00", "0f8fad5b-d9cb-469f-a165-70867728950e", 7, None])
def test_malformed_keys_are_refused_naming_the_key_argument(bad: object) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_key(bad)
    assert caught.value.argument == "key"
