"""Access and portability: everything a store holds about one data subject
(``Ledger.export_subject``, ``contextledger export --subject S``).

A ``SubjectExport`` holds each conversation of the subject (those that name it, and
the conversation whose own id it is) with:

- ``messages``: every message as appended, oldest first: its position, version, time,
  tokens, the chat-completions form (``message``), the form it was handed in when that
  was another (``original``: an Anthropic or Gemini message, a LangChain or Pydantic AI
  message, as stored, with its ``"format"``), and the marks of later edits
  (retracted, edited, inherited from a fork's source);
- ``summaries``, ``edits`` (each edit's event with its version and time: retractions,
  edits, system prompt, tools and policy changes, summary invalidations) and ``totals``.

Forks of *other* subjects that inherited this subject's content are listed too
(``forks``), with what they hold of it: the inherited messages, up to the position
the fork shares with its source. Their own later messages belong to their own subject
and are left out.

``to_json()`` is the document's JSON form (format ``contextledger-subject-export/1``,
schema in docs/privacy.md); ``to_markdown()`` a readable rendering. An erased subject
is ``ConversationErasedError``: nothing of it can be read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from contextledger.application.following.notifications import read_notifications
from contextledger.application.formats.originals import OriginalsHost, transcript_originals
from contextledger.domain.events import (
    Forked,
    MessageEdited,
    MessagesRetracted,
    PolicyChanged,
    SummaryInvalidated,
    SystemPromptChanged,
    ToolsChanged,
)
from contextledger.domain.values.errors import ConversationErasedError
from contextledger.domain.values.validation import check_subject

__all__ = ["EXPORT_FORMAT", "ExportedConversation", "SubjectExport", "export_subject"]

EXPORT_FORMAT = "contextledger-subject-export/1"
#: The events listed as a conversation's edits.
_EDITS = (
    MessagesRetracted,
    MessageEdited,
    SystemPromptChanged,
    ToolsChanged,
    PolicyChanged,
    SummaryInvalidated,
)
_ENVELOPE = {"originator_id", "originator_version", "timestamp"}


def _plain(value: Any) -> Any:
    """``value`` as JSON values."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class ExportedConversation:
    """One conversation of the export (see the module doc), its parts as JSON values."""

    conversation_id: UUID
    key: str | None
    #: The conversation's own subject (for a fork of another subject: that subject).
    subject: str
    messages: tuple[dict[str, Any], ...]
    summaries: tuple[dict[str, Any], ...] = ()
    edits: tuple[dict[str, Any], ...] = ()
    totals: dict[str, Any] | None = None
    #: For a fork of another subject: the conversation it inherited this subject's
    #: content from, and the last position it shares with it.
    forked_from: UUID | None = None
    through_position: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = _plain(self)
        assert isinstance(data, dict)
        return data


@dataclass(frozen=True)
class SubjectExport:
    """Everything held about one data subject (see the module doc)."""

    subject: str
    exported_at: datetime
    conversations: tuple[ExportedConversation, ...]
    forks: tuple[ExportedConversation, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The export as one JSON document (docs/privacy.md gives its schema)."""
        return {
            "format": EXPORT_FORMAT,
            "subject": self.subject,
            "exported_at": self.exported_at.isoformat(),
            "conversations": [c.to_json() for c in self.conversations],
            "forks": [c.to_json() for c in self.forks],
        }

    def to_markdown(self) -> str:
        """A readable rendering of the export."""
        lines = [
            f"# Data held about {self.subject}",
            "",
            f"Exported {self.exported_at.isoformat()}: {len(self.conversations)} conversations, "
            f"{len(self.forks)} forks of other subjects holding their content.",
        ]
        for c in (*self.conversations, *self.forks):
            lines += ["", f"## Conversation {c.conversation_id}" + (f" ({c.key})" if c.key else "")]
            if c.forked_from is not None:
                lines.append(
                    f"A fork belonging to {c.subject}, holding this subject's messages from "
                    f"{c.forked_from} through position {c.through_position}."
                )
            if c.totals is not None:
                lines.append(
                    f"{c.totals.get('messages')} messages, "
                    f"{c.totals.get('appended_tokens')} tokens appended, "
                    f"{c.totals.get('summaries')} summaries."
                )
            lines += ["", "### Messages", ""]
            for m in c.messages:
                lines.append(
                    f"- **{m['message'].get('role')}** (position {m['position']}, {m['timestamp']}): "
                    + _text(m["message"])
                    + _marks(m)
                )
            if c.summaries:
                lines += ["", "### Summaries", ""]
                for s in c.summaries:
                    lines.append(f"- positions {s['from_position']}-{s['through_position']}: {s['text']}")
            if c.edits:
                lines += ["", "### Edits", ""]
                for e in c.edits:
                    lines.append(f"- {e['kind']} at version {e['version']} ({e['timestamp']})")
        return "\n".join(lines) + "\n"


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    calls = message.get("tool_calls")
    if calls:
        text += " [calls: " + ", ".join(c["function"]["name"] for c in calls) + "]"
    return text.replace("\n", " ")


def _marks(m: dict[str, Any]) -> str:
    said = [k for k in ("retracted", "edited_from_version", "superseded_by_version") if m.get(k)]
    return f" _({', '.join(said)})_" if said else ""


class ExportHost(OriginalsHost, Protocol):
    """What the export needs of the ledger."""

    def transcript(self, conversation_id: Any) -> Sequence[Any]: ...

    def summaries(self, conversation_id: Any) -> Sequence[Any]: ...

    def totals(self, conversation_id: Any) -> Any: ...


class _Keys(Protocol):
    def conversations_of(self, subject: str) -> list[UUID]: ...

    def subject_of(self, conversation_id: UUID) -> str: ...

    def tombstone_of(self, subject: str) -> object | None: ...


def export_subject(
    host: Any, shards: Sequence[tuple[Any, _Keys | None]], subject: str, *, now: datetime
) -> SubjectExport:
    """The export of ``subject`` over the stores ``shards`` (see the module doc)."""
    check_subject(subject)
    for _, keys in shards:
        if keys is not None and keys.tombstone_of(subject) is not None:
            raise ConversationErasedError(
                f"data subject {subject!r} was erased: nothing of it can be exported", subject=subject
            )
    own: list[UUID] = []
    for shard, keys in shards:
        own += [] if keys is None else keys.conversations_of(subject)
        try:
            cid = UUID(subject)
        except ValueError:
            continue
        if cid not in own and shard.recorder.select_events(cid, limit=1):
            own.append(cid)
    conversations = tuple(_conversation(host, cid, subject) for cid in own)
    forks = tuple(_forks(host, shards, subject, own))
    return SubjectExport(subject, now, conversations, forks)


def _messages(host: Any, cid: UUID, through: int | None = None) -> tuple[dict[str, Any], ...]:
    originals = {position: original for position, _, original in transcript_originals(host, cid)}
    out = []
    for entry in host.transcript(cid):
        if through is not None and entry.position > through:
            continue
        data = _plain(entry)
        data["original"] = _plain(originals.get(entry.position))
        out.append(data)
    return tuple(out)


def _conversation(host: Any, cid: UUID, subject: str) -> ExportedConversation:
    edits = []
    key = None
    for event in host.store.events(cid):
        if isinstance(event, _EDITS):
            fields = event.model_dump(mode="json", exclude=_ENVELOPE)
            edits.append(
                {
                    "kind": type(event).__name__,
                    "version": event.originator_version,
                    "timestamp": event.timestamp.isoformat(),
                    **fields,
                }
            )
        key = getattr(event, "key", key) if key is None else key
    return ExportedConversation(
        conversation_id=cid,
        key=key,
        subject=subject,
        messages=_messages(host, cid),
        summaries=tuple(_plain(s) for s in host.summaries(cid)),
        edits=tuple(edits),
        totals=_plain(host.totals(cid)),
    )


def _forks(
    host: Any, shards: Sequence[tuple[Any, _Keys | None]], subject: str, own: list[UUID]
) -> list[ExportedConversation]:
    """Forks of other subjects whose inherited history holds ``subject``'s content
    (through forks of forks), with the messages they inherited."""
    origins: dict[UUID, tuple[UUID, int]] = {}
    for shard, _ in shards:
        for page in read_notifications(shard.notification_log, topics=(Forked.TOPIC,), committed=True):
            for notification in page:
                event = shard.mapper.to_domain_event(notification)
                if isinstance(event, Forked):
                    origins[event.originator_id] = (
                        event.origin.conversation_id,
                        event.origin.through_position,
                    )
    holders = set(own)
    found: list[ExportedConversation] = []
    grew = True
    while grew:
        grew = False
        for fork, (source, through) in origins.items():
            if fork in holders or source not in holders:
                continue
            holders.add(fork)
            grew = True
            owner = next((k.subject_of(fork) for _, k in shards if k is not None), str(fork))
            found.append(
                ExportedConversation(
                    conversation_id=fork,
                    key=None,
                    subject=owner,
                    messages=_messages(host, fork, through),
                    forked_from=source,
                    through_position=through,
                )
            )
    return found
