"""What a request to the viewer asks for, checked: the conversation (its id or the
application's key), whole-number query parameters within bounds, the output format.

Every bad value raises ``InvalidArgumentError`` naming the parameter and what it
accepts; the app answers it with 400 and that message. Nothing here touches a store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from uuid import UUID

from starlette.requests import Request

from contextledger.application.shared.addressing import id_for_key, resolve
from contextledger.domain.values.errors import InvalidArgumentError

__all__ = ["MAX_QUERY", "MAX_WHOLE", "Ref", "as_json", "conversation_ref", "search_query", "whole_number"]

#: The largest whole number any query parameter takes (a signed 64-bit integer, as
#: versions are stored); larger values are refused before they reach a store.
MAX_WHOLE = 2**63 - 1
#: Longest search text (a key is at most 200 characters; an id 36).
MAX_QUERY = 200
_DIGITS = re.compile(r"[0-9]{1,19}")
_FORMATS = ("html", "json")


def _shown(value: str) -> str:
    text = value if len(value) <= 40 else value[:37] + "..."
    return repr(text)


def whole_number(
    request: Request, name: str, *, default: int | None, minimum: int = 1, maximum: int = MAX_WHOLE
) -> int | None:
    """The query parameter ``name`` as a whole number from ``minimum`` to ``maximum``;
    ``default`` when absent or empty. Only plain decimal digits are taken: ``1e23``,
    ``-1``, ``1.0``, ``true``, ``0x10``, ``1_000`` are refused."""
    raw = request.query_params.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    bounds = f"{minimum} to {maximum}" if maximum < MAX_WHOLE else f"{minimum} or more"
    if not _DIGITS.fullmatch(text) or int(text) > MAX_WHOLE:
        raise InvalidArgumentError(
            f"{name} must be a whole number, {bounds} (got {_shown(raw)})", argument=name, value=raw[:40]
        )
    number = int(text)
    if not minimum <= number <= maximum:
        raise InvalidArgumentError(
            f"{name} must be {bounds} (got {number})", argument=name, value=text
        )
    return number


def search_query(request: Request) -> str:
    """The search text ``q`` (stripped), at most ``MAX_QUERY`` characters."""
    query = request.query_params.get("q", "").strip()
    if len(query) > MAX_QUERY:
        raise InvalidArgumentError(
            f"q must be at most {MAX_QUERY} characters (got {len(query)})", argument="q"
        )
    return query


def as_json(request: Request, suffixed: bool) -> bool:
    """Whether the JSON form is wanted: a ``.json`` path, or ``?format=json``
    (``?format=html`` asks for the page)."""
    wanted = request.query_params.get("format")
    if wanted is None or wanted == "":
        return suffixed
    if wanted not in _FORMATS:
        raise InvalidArgumentError(
            f"format must be html or json (got {_shown(wanted)})", argument="format", value=wanted[:40]
        )
    return wanted == "json"


@dataclass(frozen=True)
class Ref:
    """A conversation as a URL names it: its id, and the key when named by key."""

    id: UUID
    key: str | None

    def missing(self) -> str:
        """What a 404 says when no conversation answers to this reference."""
        if self.key is not None:
            return f"no such conversation with key {self.key!r} (id {self.id})"
        return f"no such conversation with id {self.id}"


def conversation_ref(raw: str) -> Ref:
    """The conversation a path segment names: an id (a UUID in any of its string forms)
    or the application's key (``start(..., key="chat-7")``), resolved as the ledger
    resolves them. A malformed key (empty, over 200 characters, NUL...) is refused."""
    cid = resolve(raw, argument="conversation")
    # ``resolve`` took ``raw`` as an id exactly when it is not the key's id.
    try:
        is_key = id_for_key(raw) == cid
    except InvalidArgumentError:
        is_key = False
    return Ref(cid, raw if is_key else None)
