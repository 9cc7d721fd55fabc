"""How a conversation is addressed: by its id (a UUID or its string form) or by the
application's own string key. This module is the one place that resolves them.

A key maps to an id deterministically, ``uuid5(KEY_NAMESPACE, key)``, so no lookup
table is needed and every process (and every language) derives the same id. A string
that parses as a UUID is taken as an id; a key must therefore not look like one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from uuid import UUID, uuid5

from contextledger.domain.values.errors import ContextLedgerError, InvalidArgumentError

__all__ = [
    "KEY_NAMESPACE",
    "MAX_KEY_LENGTH",
    "ConversationRef",
    "check_key",
    "id_for_key",
    "name_keys_in_errors",
    "named_by_key",
    "resolve",
]

C = TypeVar("C", bound=type)

#: The fixed namespace of ``uuid5`` for conversation keys (never change it: ids derive
#: from it). It is itself ``uuid5(NAMESPACE_URL, "https://contextledger/conversation-keys")``.
KEY_NAMESPACE = UUID("d43b8328-271b-565e-9c32-710312306dfe")
MAX_KEY_LENGTH = 200

#: A conversation's id, its id as a string, or its key.
ConversationRef = UUID | str


def _looks_like_uuid(text: str) -> UUID | None:
    if len(text) not in (32, 36, 38, 45):
        return None
    try:
        return UUID(text)
    except ValueError:
        return None


def check_key(key: Any, *, argument: str = "key") -> str:
    """A valid key, or ``InvalidArgumentError``: a string of 1 to 200 characters,
    encodable as UTF-8 (no lone surrogates), no NUL, and not in the form of a UUID."""
    if not isinstance(key, str):
        raise InvalidArgumentError(
            f"a conversation key must be a string, not {type(key).__name__}", argument=argument
        )
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidArgumentError(
            f"a conversation key must be 1 to {MAX_KEY_LENGTH} characters", argument=argument
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            "a conversation key must be valid Unicode text (it holds a lone surrogate)",
            argument=argument,
        ) from None
    if "\x00" in key:
        raise InvalidArgumentError("a conversation key must not contain NUL", argument=argument)
    if _looks_like_uuid(key) is not None:
        raise InvalidArgumentError(
            "a conversation key must not look like a UUID (it would be read as an id)",
            argument=argument,
        )
    return key


def id_for_key(key: str) -> UUID:
    """The conversation id a key stands for: ``uuid5(KEY_NAMESPACE, key)``."""
    return uuid5(KEY_NAMESPACE, check_key(key))


def resolve(ref: Any, *, argument: str = "conversation_id") -> UUID:
    """The id of the conversation ``ref`` names (a UUID, its string form, or a key)."""
    if isinstance(ref, UUID):
        return ref
    if isinstance(ref, str):
        parsed = _looks_like_uuid(ref)
        if parsed is not None:
            return parsed
        return uuid5(KEY_NAMESPACE, check_key(ref, argument=argument))
    raise InvalidArgumentError(
        f"a conversation is named by its id (UUID or string) or its key, not {type(ref).__name__}",
        argument=argument,
    )


def _key_of(ref: Any) -> tuple[str, UUID] | None:
    """The key ``ref`` is, with its id (None: an id, or not a valid key)."""
    if not isinstance(ref, str) or _looks_like_uuid(ref) is not None:
        return None
    try:
        return ref, id_for_key(ref)
    except InvalidArgumentError:
        return None


def named_by_key(error: ContextLedgerError, ref: Any) -> None:
    """Make ``error`` name the key ``ref`` when the call addressed its conversation by
    that key: its ``key`` attribute, and its message (the derived id alone means
    nothing to the caller). Errors about another conversation are left as they are."""
    keyed = _key_of(ref)
    if keyed is None or getattr(error, "key", None) is not None:
        return
    key, cid = keyed
    if error.conversation_id is not None and error.conversation_id not in (cid, key):
        return
    error.key = key
    error.message = f"conversation {key!r}: {error.message}"
    error.args = (error.message, *error.args[1:])


def _keyed(method: Callable[..., Any], argument: str) -> Callable[..., Any]:
    signature = inspect.signature(method)

    def ref_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return signature.bind_partial(*args, **kwargs).arguments.get(argument)
        except TypeError:
            return None

    def named(iterator: Iterator[Any], ref: Any) -> Iterator[Any]:
        try:
            yield from iterator
        except ContextLedgerError as error:
            named_by_key(error, ref)
            raise

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = method(*args, **kwargs)
        except ContextLedgerError as error:
            named_by_key(error, ref_of(args, kwargs))
            raise
        if inspect.isgenerator(result):
            return named(result, ref_of(args, kwargs))
        return result

    return wrapper


def name_keys_in_errors(cls: C) -> C:
    """Class decorator: every public method that takes a conversation (its first
    argument, ``conversation_id``) or a key (``start``, ``get_or_start``) raises errors
    that name the key the caller passed, when the caller passed one."""
    for name in dir(cls):
        method = getattr(cls, name)
        if name.startswith("_") or not inspect.isfunction(method):
            continue
        parameters = list(inspect.signature(method).parameters)
        if parameters[1:2] == ["conversation_id"]:
            setattr(cls, name, _keyed(method, "conversation_id"))
        elif name in ("start", "get_or_start") and "key" in parameters:
            setattr(cls, name, _keyed(method, "key"))
    return cls
