"""The digest chain: SHA-256 links that make any altered stored event detectable.

Every message's digest covers the previous digest and the message; a summary records
the digest of exactly what it was made from. Every other event carries a seal over
all of its fields (policy, tools, a summary's text and counts, usage...), which the
chain does not cover. ``verify`` recomputes all three.

Events written since the chain was made checkable after erasure carry a ``salt`` and
a ``commitment``: the commitment is SHA-256 over the salt (16 random bytes, stored
in the event and so encrypted, and erased, with its content) and the content the
link used to hash; the link is SHA-256 over the previous link, the record's
structure (kind, version, time, positions; ``structure``) and the commitment. Once
the content is erased the links and commitments still check the structure, and
reveal nothing of the content (the salt that would let one test a guess is gone).
Events without a commitment (written before) hash their content as they always did.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from contextledger.domain.values.messages import Message

__all__ = [
    "chain_digest",
    "commit",
    "commitment",
    "committed_link",
    "edit_content",
    "edit_digest",
    "event_seal",
    "genesis_content",
    "genesis_digest",
    "message_content",
    "structure",
    "summary_source_digest",
]

#: Fields an event's seal does not cover: the columns that hold them, and the seal.
_UNSEALED = {"originator_id", "originator_version", "seal"}


def genesis_digest(conversation_id: str, system_prompt: str | None, model: str) -> str:
    """The first link of a conversation's digest chain (a ``Started`` without a commitment)."""
    seed = f"contextledger/1\n{conversation_id}\n{model}\n{system_prompt or ''}"
    return hashlib.sha256(seed.encode("utf-8")).hexdigest()


def genesis_content(system_prompt: str | None, model: str) -> bytes:
    """What a ``Started`` commits to: its model and system prompt."""
    return f"{model}\n{system_prompt or ''}".encode()


def message_content(
    message: Message,
    items: tuple[dict[str, Any], ...] | None = None,
    original: dict[str, Any] | None = None,
    hidden: bool = False,
) -> bytes:
    """What a message's link covers: its canonical JSON, and the raw Responses items,
    the framework's own form and whether it is hidden, when it has them."""
    data = message.canonical_json().encode("utf-8")
    if items is not None:
        data += b"\nitems\n" + _json(items)
    if original is not None:
        data += b"\noriginal\n" + _json(original)
    if hidden:
        data += b"\nhidden"
    return data


def edit_content(record: dict[str, Any]) -> bytes:
    """What an edit's link covers: its canonical record."""
    return _json(record)


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def structure(kind: str, version: int, timestamp: datetime, *fields: object) -> str:
    """A record's structure as its committed link covers it: what it is, where it
    stands in the log, when, and its positions (no content)."""
    return "|".join((kind, str(version), timestamp.isoformat(), *map(str, fields)))


def commitment(salt: str, content: bytes) -> str:
    """SHA-256 over a record's salt and content: binding while the content is kept,
    revealing nothing once the salt is erased with it."""
    return hashlib.sha256(b"contextledger/commit/1\n" + salt.encode("ascii") + b"\n" + content).hexdigest()


def committed_link(previous: str, structure: str, commitment: str) -> str:
    """The link of a committed record: SHA-256 over the previous link (empty for the
    first), the record's structure and its commitment."""
    return hashlib.sha256(f"contextledger/2\n{previous}\n{structure}\n{commitment}".encode()).hexdigest()


def commit(previous: str, structure: str, content: bytes) -> dict[str, str]:
    """A new link's event fields: a fresh ``salt``, the ``commitment`` to ``content``
    under it, and the ``digest`` after ``previous`` (``commitment`` and
    ``committed_link`` spelled inline: it runs on every append)."""
    salt = os.urandom(16).hex()
    committed = hashlib.sha256(
        b"contextledger/commit/1\n" + salt.encode("ascii") + b"\n" + content
    ).hexdigest()
    link = hashlib.sha256(f"contextledger/2\n{previous}\n{structure}\n{committed}".encode()).hexdigest()
    return {"digest": link, "salt": salt, "commitment": committed}


def chain_digest(
    previous: str,
    message: Message,
    items: tuple[dict[str, Any], ...] | None = None,
    original: dict[str, Any] | None = None,
    hidden: bool = False,
) -> str:
    """SHA-256 over the previous digest and this message's canonical JSON (and the raw
    Responses items it stands for, and the framework's own form of it, when it has
    them, and whether it is hidden from the model: a message without any of these
    hashes as it always did)."""
    h = hashlib.sha256(previous.encode("ascii"))
    h.update(b"\n")
    h.update(message_content(message, items, original, hidden))
    return h.hexdigest()


def summary_source_digest(previous_summary: str | None, messages: Iterable[Message]) -> str:
    """SHA-256 of exactly what a summary was made from (previous summary, then messages)."""
    h = hashlib.sha256()
    if previous_summary is not None:
        h.update(b"previous-summary\n")
        h.update(previous_summary.encode("utf-8"))
        h.update(b"\n")
    for message in messages:
        h.update(message.canonical_json().encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def edit_digest(previous: str, record: dict[str, Any]) -> str:
    """SHA-256 over the previous digest and an edit's canonical record (retraction,
    edited message, changed system prompt): edits extend the same chain as messages."""
    h = hashlib.sha256(previous.encode("ascii"))
    h.update(b"\nedit\n")
    h.update(edit_content(record))
    return h.hexdigest()


def event_seal(topic: str, conversation_id: str, version: int, fields: dict[str, Any]) -> str:
    """SHA-256 over an event's place (topic, conversation, version) and the canonical
    JSON of its fields (``model_dump(mode="json")``; the seal itself left out)."""
    h = hashlib.sha256(f"contextledger/seal/1\n{topic}\n{conversation_id}\n{version}\n".encode())
    state = {k: v for k, v in fields.items() if k not in _UNSEALED}
    h.update(json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()
