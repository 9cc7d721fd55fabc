"""Provider-native compaction as the fake servers do it.

OpenAI (``OpenAICompactions``): ``responses.compact`` and ``context_management``
compaction give an opaque ``compaction`` item (``{"type": "compaction", "id": ...,
"encrypted_content": ...}``) that only the server that issued it can read. The fake
keeps what each one stands for; an input holding a compaction item it did not issue,
or one issued for another model family, is refused (400), as the real API refuses a
payload it cannot decrypt.

Anthropic (``anthropic_compaction``): with the ``compact-2026-01-12`` beta and a
``compact_20260112`` edit in ``context_management.edits``, a request over the
trigger's input tokens is answered with a ``compaction`` block (the summary text)
before the reply's own blocks; on later requests the API drops every block before
the newest compaction block (``after_compaction``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANTHROPIC_COMPACTION_BETA",
    "DEFAULT_ANTHROPIC_TRIGGER",
    "OpenAICompactions",
    "after_compaction",
    "anthropic_compaction_trigger",
    "compaction_threshold",
    "model_family",
]

#: The beta header value that turns Anthropic's compaction on.
ANTHROPIC_COMPACTION_BETA = "compact-2026-01-12"
#: Anthropic's default trigger: 150,000 input tokens.
DEFAULT_ANTHROPIC_TRIGGER = 150_000
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def model_family(model: str) -> str:
    """The family a compaction item is bound to: ``gpt-4.1-mini`` and
    ``gpt-4.1-2025-04-14`` are ``gpt-4.1``; ``gpt-5-nano`` is ``gpt-5``; ``o3-mini`` is ``o3``."""
    name = _DATED.sub("", model.strip().rsplit("/", 1)[-1])
    parts = name.split("-")
    if parts[0] == "gpt" and len(parts) > 1:
        return f"gpt-{parts[1]}"
    return parts[0]


@dataclass(frozen=True)
class Issued:
    """What an issued compaction item stands for, as only its server knows it."""

    family: str
    text: str
    tokens: int


def compaction_threshold(body: Mapping[str, Any]) -> int | None:
    """The ``compact_threshold`` of a ``context_management`` compaction entry (None:
    the request asks for no compaction)."""
    for entry in body.get("context_management") or []:
        if isinstance(entry, Mapping) and entry.get("type") == "compaction":
            threshold = entry.get("compact_threshold")
            return threshold if isinstance(threshold, int) else 0
    return None


class OpenAICompactions:
    """The compaction items one fake OpenAI server issued, and the checks of those it
    is sent back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issued: dict[str, Issued] = {}

    def issue(self, model: str, texts: Sequence[str], serial: int) -> dict[str, Any]:
        """A new opaque compaction item standing for ``texts``, bound to ``model``'s family."""
        text = " ".join(" ".join(texts).split())[:400]
        payload = "gAAAAB" + secrets.token_urlsafe(48) + hashlib.sha256(text.encode()).hexdigest()[:16]
        with self._lock:
            self._issued[payload] = Issued(model_family(model), text, len(text) // 4 + 8)
        return {"type": "compaction", "id": f"cmp_{serial:06d}", "encrypted_content": payload}

    @property
    def issued(self) -> int:
        """How many compaction items this server issued."""
        with self._lock:
            return len(self._issued)

    def lookup(self, item: Mapping[str, Any]) -> Issued | None:
        with self._lock:
            return self._issued.get(str(item.get("encrypted_content")))

    def problems(self, model: str, items: Any) -> list[str]:
        """Why the compaction items of ``items`` cannot be read for ``model`` (empty: they can)."""
        found: list[str] = []
        for index, item in enumerate(items if isinstance(items, list) else []):
            if not isinstance(item, Mapping) or item.get("type") != "compaction":
                continue
            issued = self.lookup(item)
            if issued is None:
                found.append(
                    f"input[{index}]: the compaction item could not be decrypted or was not issued here"
                )
            elif issued.family != model_family(model):
                found.append(
                    f"input[{index}]: the compaction item was made for the {issued.family} family, "
                    f"not for {model}"
                )
        return found

    def tokens(self, items: Any) -> int:
        """What the compaction items of ``items`` cost in a prompt (their summaries)."""
        return sum(
            issued.tokens
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, Mapping)
            and item.get("type") == "compaction"
            and (issued := self.lookup(item)) is not None
        )


def anthropic_compaction_trigger(body: Mapping[str, Any]) -> int | None:
    """The input-token trigger of a ``compact_20260112`` edit (None: no such edit)."""
    management = body.get("context_management")
    edits = management.get("edits") if isinstance(management, Mapping) else None
    for edit in edits or []:
        if isinstance(edit, Mapping) and edit.get("type") == "compact_20260112":
            trigger = edit.get("trigger")
            if isinstance(trigger, Mapping) and isinstance(trigger.get("value"), int):
                return int(trigger["value"])
            return DEFAULT_ANTHROPIC_TRIGGER
    return None


def after_compaction(messages: Any) -> list[Any]:
    """What the API reads of ``messages``: every block before the newest ``compaction``
    block is dropped (the message holding it keeps that block and what follows)."""
    if not isinstance(messages, list):
        return []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        kinds = [b.get("type") if isinstance(b, Mapping) else None for b in content]
        if "compaction" in kinds:
            start = len(kinds) - 1 - kinds[::-1].index("compaction")
            return [{**message, "content": content[start:]}, *messages[index + 1 :]]
    return list(messages)
