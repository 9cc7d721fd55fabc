"""The one rule for data subjects and erasure reasons (``domain/values/validation.py``), as a
property: accepted exactly when the text is non-blank, short enough, without NUL and
valid Unicode (no lone surrogate); refused with ``InvalidArgumentError`` otherwise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.domain.values.validation import (
    MAX_REASON_CHARS,
    MAX_SUBJECT_CHARS,
    check_reason,
    check_subject,
)

ANY_TEXT = st.characters(exclude_categories=())  # lone surrogates and NUL included


def _valid(text: str, limit: int) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return bool(text.strip()) and len(text) <= limit and "\x00" not in text


@given(st.one_of(st.text(ANY_TEXT, max_size=40), st.text(ANY_TEXT, min_size=190, max_size=215)))
@settings(max_examples=300, deadline=None)
def test_a_subject_is_accepted_exactly_when_the_rule_says(text: str) -> None:
    try:
        accepted = check_subject(text) == text
    except cl.InvalidArgumentError as exc:
        assert exc.argument == "subject"
        accepted = False
    assert accepted is _valid(text, MAX_SUBJECT_CHARS)


@given(st.one_of(st.text(ANY_TEXT, max_size=40), st.text(ANY_TEXT, min_size=1990, max_size=2010)))
@settings(max_examples=200, deadline=None)
def test_a_reason_is_accepted_exactly_when_the_rule_says(text: str) -> None:
    try:
        accepted = check_reason(text) == text
    except cl.InvalidArgumentError as exc:
        assert exc.argument == "reason"
        accepted = False
    assert accepted is _valid(text, MAX_REASON_CHARS)


@pytest.mark.parametrize("value", [None, 42, b"user-1", ["user-1"]])
def test_what_is_not_a_string_is_neither_a_subject_nor_a_reason(value: object) -> None:
    with pytest.raises(cl.InvalidArgumentError):
        check_subject(value)
    with pytest.raises(cl.InvalidArgumentError):
        check_reason(value)
