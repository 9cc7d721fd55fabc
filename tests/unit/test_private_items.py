"""``private_items``: the copy of rendered items handed to a caller equals a deep copy
and shares no dict or list with what it copied, for any JSON data and for objects
``marshal`` refuses."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contextledger.application.formats.items import private_items

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def containers(value: Any) -> list[int]:
    """The ids of every dict and list inside ``value`` (itself included)."""
    found: list[int] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            found.append(id(v))
            stack.extend(v.values())
        elif isinstance(v, list):
            found.append(id(v))
            stack.extend(v)
    return found


@given(st.lists(st.dictionaries(st.text(max_size=8), JSON, max_size=5), max_size=6))
def test_a_private_copy_equals_a_deep_copy_and_shares_no_container(items: list[dict[str, Any]]) -> None:
    copied = private_items(items)
    assert copied == copy.deepcopy(items)
    assert not set(containers(copied)) & set(containers(items))


def test_objects_marshal_refuses_are_deep_copied_as_they_are() -> None:
    items: list[Any] = [{"type": "message", "content": OrderedDict(a=[1, 2])}]
    copied = private_items(items)
    assert copied == items
    assert type(copied[0]["content"]) is OrderedDict
    assert copied[0]["content"]["a"] is not items[0]["content"]["a"]
