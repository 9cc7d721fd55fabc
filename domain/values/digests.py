"""The digest chain: SHA-256 links that make any altered stored event detectable.

Every message's digest covers the previous digest and the message; a summary records
the digest of exactly what it was made from. Every other event carries a seal over
all of its fields (policy, tools, a summary's text and counts, usage...), which the
chain does not cover. ``verify`` recomputes all three.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from contextledger.domain.values.messages import Message

__all__ = ["chain_digest", "edit_digest", "event_seal", "genesis_digest", "summary_source_digest"]

#: Fields an event's seal does not cover: the columns that hold them, and the seal.
_UNSEALED = {"originator_id", "originator_version", "seal"}


def genesis_digest(conversation_id: str, system_prompt: str | None, model: str) -> str:
    """The first link of a conversation's digest chain."""
    seed = f"contextledger/1\n{conversation_id}\n{model}\n{system_prompt or ''}"
    return hashlib.sha256(seed.encode("utf-8")).hexdigest()


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
    h.update(message.canonical_json().encode("utf-8"))
    if items is not None:
        h.update(b"\nitems\n")
        h.update(json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    if original is not None:
        h.update(b"\noriginal\n")
        h.update(json.dumps(original, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    if hidden:
        h.update(b"\nhidden")
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
    h.update(json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def event_seal(topic: str, conversation_id: str, version: int, fields: dict[str, Any]) -> str:
    """SHA-256 over an event's place (topic, conversation, version) and the canonical
    JSON of its fields (``model_dump(mode="json")``; the seal itself left out)."""
    h = hashlib.sha256(f"contextledger/seal/1\n{topic}\n{conversation_id}\n{version}\n".encode())
    state = {k: v for k, v in fields.items() if k not in _UNSEALED}
    h.update(json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()
