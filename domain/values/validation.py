"""Checks of argument values at the boundary, raising typed errors that name the argument."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SecretStr

from contextledger.domain.values.errors import InvalidArgumentError

__all__ = [
    "MAX_COUNT",
    "MAX_REASON_CHARS",
    "MAX_SUBJECT_CHARS",
    "check_count",
    "check_position",
    "check_reason",
    "check_subject",
    "check_text",
    "check_unicode_fields",
    "shown",
]

#: The largest count or version any store can hold (a signed 64-bit integer).
MAX_COUNT = 2**63 - 1
#: The longest data subject accepted, in characters: by ``start``, ``fork``, ``erase``
#: and the key table alike.
MAX_SUBJECT_CHARS = 200
#: The longest reason a retraction or an erasure records, in characters.
MAX_REASON_CHARS = 2000


def shown(value: Any, width: int = 60) -> str:
    """A short, printable rendering of a bad value for messages."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_count(value: Any, argument: str, *, minimum: int = 0, **context: Any) -> int:
    """``value`` if it is an int in ``[minimum, MAX_COUNT]`` (bools are not counts)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(
            f"{argument} must be an integer, not {type(value).__name__}",
            argument=argument,
            value=shown(value),
            **context,
        )
    if not minimum <= value <= MAX_COUNT:
        raise InvalidArgumentError(
            f"{argument} must be between {minimum} and {MAX_COUNT}",
            argument=argument,
            value=shown(value),
            **context,
        )
    return value


def check_position(value: Any, argument: str = "position", **context: Any) -> int:
    """``value`` if it is an int (bools are not positions: ``rewind(cid, False)`` is
    not position 0); whether a message stands there is the conversation's to say."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(
            f"{argument} must be an integer, not {type(value).__name__}",
            argument=argument,
            value=shown(value),
            **context,
        )
    return value


def check_text(
    value: Any,
    argument: str,
    *,
    optional: bool = False,
    empty: bool = True,
    max_chars: int | None = None,
    **context: Any,
) -> str | None:
    """``value`` if it is a string of valid Unicode (or None when ``optional``), of at
    most ``max_chars`` characters when that is given."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"{argument} must be a string{' or None' if optional else ''}, not {type(value).__name__}",
            argument=argument,
            value=shown(value),
            **context,
        )
    if not empty and not value.strip():
        raise InvalidArgumentError(f"{argument} must not be empty", argument=argument, **context)
    if max_chars is not None and len(value) > max_chars:
        raise InvalidArgumentError(
            f"{argument} must be at most {max_chars} characters, not {len(value)}",
            argument=argument,
            value=shown(value),
            **context,
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{argument} must be valid Unicode (a lone surrogate at position {exc.start})",
            argument=argument,
            **context,
        ) from None
    return value


def check_subject(subject: object, argument: str = "subject") -> str:
    """``subject`` if it is a data subject: a non-blank string of valid Unicode, at
    most ``MAX_SUBJECT_CHARS`` characters, no NUL (``InvalidArgumentError`` otherwise)."""
    if not isinstance(subject, str) or not subject.strip():
        raise InvalidArgumentError(
            "subject must be a non-empty string (a person's or tenant's opaque id)",
            argument=argument,
            value=shown(subject),
        )
    if len(subject) > MAX_SUBJECT_CHARS or "\x00" in subject:
        raise InvalidArgumentError(
            f"subject holds at most {MAX_SUBJECT_CHARS} characters and no NUL, not {len(subject)} characters",
            argument=argument,
            value=shown(subject),
        )
    check_text(subject, argument)
    return subject


def check_reason(reason: object, argument: str = "reason") -> str:
    """``reason`` if it is an erasure's reason: a non-blank string of valid Unicode, at
    most ``MAX_REASON_CHARS`` characters, no NUL (``InvalidArgumentError`` otherwise)."""
    if (
        not isinstance(reason, str)
        or not reason.strip()
        or len(reason) > MAX_REASON_CHARS
        or "\x00" in reason
    ):
        raise InvalidArgumentError(
            f"an erasure's reason is a non-empty string of at most {MAX_REASON_CHARS} characters, no NUL",
            argument=argument,
            value=shown(reason),
        )
    check_text(reason, argument)
    return reason


def check_unicode_fields(model: BaseModel) -> None:
    """Raise ``ValueError`` (in a pydantic validator: the model's typed error) if a
    text field of ``model`` (a string, a secret, or a tuple of strings) holds a lone
    surrogate, which no store, digest or HTTP header can encode."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        texts = value if isinstance(value, tuple | list) else (value,)
        for text in texts:
            if isinstance(text, SecretStr):
                text = text.get_secret_value()
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"{name} must be valid Unicode (it holds a lone surrogate)") from None
