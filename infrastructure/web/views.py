"""What the viewer's pages show, computed from a ledger with no web framework involved.

Each function returns plain, JSON-ready dictionaries: the HTML templates render them
and the ``.json`` endpoints return them as they are, so the two never disagree.
Everything here reads; nothing is written to the store.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

from contextledger.application.facade.ledger import Ledger
from contextledger.application.shared.results import AuditEvent
from contextledger.application.storage.store import store_errors
from contextledger.domain.conversation import Conversation
from contextledger.domain.erasure import ContentErased
from contextledger.domain.events import DomainEvent
from contextledger.domain.folding.queries import is_placeholder
from contextledger.domain.values.errors import ConversationErasedError, ConversationNotFoundError
from contextledger.infrastructure.web.paging import Paging

__all__ = [
    "CONTEXT_PER_PAGE",
    "MAX_CONTEXT_PER_PAGE",
    "ConversationIndex",
    "ConversationRow",
    "context_page",
    "describe_event",
    "events_between",
]

#: Context messages on one page unless ``?per_page=`` says otherwise, and the most it may say.
CONTEXT_PER_PAGE = 250
MAX_CONTEXT_PER_PAGE = 1000
#: Notifications read per page when catching up with the log.
_PAGE = 500
#: Topics of the conversation's events (other aggregates, e.g. client message ids, share the log).
_CONVERSATION_TOPICS = "contextledger.conversation."


@dataclass(frozen=True)
class ConversationRow:
    """One line of the conversation list."""

    id: str
    key: str | None
    model: str
    started_at: datetime
    last_activity: datetime
    version: int
    messages: int
    summaries: int
    appended_tokens: int
    context_tokens: int
    #: A fork's source conversation and the source's version it was forked at.
    forked_from: str | None = None
    forked_at_version: int | None = None
    #: When the conversation's data subject was erased, and why (None: not erased).
    erased_at: datetime | None = None
    erase_reason: str | None = None

    @classmethod
    def erased(cls, cid: UUID, error: ConversationErasedError) -> ConversationRow:
        """The line of an erased conversation: its id and the erasure, nothing else."""
        at = error.erased_at or datetime.now(UTC)
        return cls(
            id=str(cid),
            key=None,
            model="",
            started_at=at,
            last_activity=at,
            version=0,
            messages=0,
            summaries=0,
            appended_tokens=0,
            context_tokens=0,
            erased_at=at,
            erase_reason=error.reason,
        )

    @classmethod
    def of(cls, conversation: Conversation) -> ConversationRow:
        s = conversation.state
        key = getattr(s, "key", None) or getattr(conversation, "key", None)
        origin = s.fork_of
        return cls(
            id=str(conversation.id),
            key=key if isinstance(key, str) else None,
            model=s.model,
            started_at=conversation.created_on,
            last_activity=conversation.modified_on,
            version=conversation.version,
            messages=s.next_position,
            summaries=s.summaries_created,
            appended_tokens=s.appended_tokens,
            context_tokens=conversation.context_tokens(),
            forked_from=None if origin is None else str(origin.conversation_id),
            forked_at_version=None if origin is None else origin.version,
        )

    def matches(self, query: str) -> bool:
        """Whether ``query`` is a substring of the id or the key (case-insensitive)."""
        q = query.strip().lower()
        return not q or q in self.id or (self.key is not None and q in self.key.lower())

    def record(self) -> dict[str, Any]:
        return asdict(self)


class ConversationIndex:
    """The conversation list, kept in memory and brought up to date from the log.

    The first call loads every conversation once (from its latest snapshot); later
    calls read only the notifications appended since and reload the conversations
    they touch. Nothing is written anywhere, so it works on a read-only store.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._rows: dict[UUID, ConversationRow] = {}
        #: The log is read through this notification id (None: not listed yet).
        self._seen: int | None = None
        self._lock = threading.Lock()

    def rows(self) -> list[ConversationRow]:
        """Every conversation, newest activity first."""
        with self._lock:
            self._catch_up()
            rows = list(self._rows.values())
        rows.sort(key=lambda row: (row.last_activity, row.id), reverse=True)
        return rows

    def _catch_up(self) -> None:
        recorder = self.ledger.recorder
        top = recorder.max_notification_id() or 0
        if self._seen is not None and top <= self._seen:
            return
        if self._seen is None:
            # Every conversation committed now (a one-off read: it does not wait for
            # the log to be final past a gap, so the first listing is never short).
            touched = set(self.ledger.conversation_ids())
        else:
            touched = set()
            start = self._seen + 1
            while start <= top:
                batch = recorder.select_notifications(start, _PAGE, stop=top)
                if not batch:
                    break
                touched.update(
                    UUID(str(n.originator_id)) for n in batch if n.topic.startswith(_CONVERSATION_TOPICS)
                )
                for n in batch:
                    if n.topic == ContentErased.TOPIC:  # an erasure: its conversations are gone
                        record = self.ledger.mapper.to_domain_event(n)
                        if isinstance(record, ContentErased):
                            touched.update(c for c in record.erased if c in self._rows)
                start = batch[-1].id + 1
        for cid in touched:
            # Read in place (no private copy): the row takes only plain values.
            try:
                self._rows[cid] = self.ledger.store.read(cid, ConversationRow.of)
            except ConversationErasedError as exc:
                self._rows[cid] = ConversationRow.erased(cid, exc)
        self._seen = top


# --------------------------------------------------------------------- a conversation


def _excerpt(text: str | None, width: int = 160) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def describe_event(audit: AuditEvent) -> str:
    """One line saying what the event did (unknown kinds: their field names)."""
    d = audit.data
    kind = audit.kind
    if kind == "Started":
        return f"started on {d.get('model')}; system prompt: {_excerpt(d.get('system_prompt'), 120)}"
    if kind == "MessageAppended":
        message = d.get("message") or {}
        calls = message.get("tool_calls") or []
        text = _excerpt(message.get("content") if isinstance(message.get("content"), str) else "")
        if calls:
            names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls)
            text = (text + " " if text else "") + f"[calls {names}]"
        return f"#{d.get('position')} {message.get('role')}: {text}"
    if kind == "ThresholdReached":
        return (
            f"{d.get('limit')} limit reached: {d.get('unsummarized_messages')} messages, "
            f"{d.get('unsummarized_tokens')} tokens unsummarized; proposed range "
            f"{d.get('from_position')}-{d.get('through_position')}"
        )
    if kind == "SummaryCreated":
        p = d.get("provenance") or {}
        return (
            f"summary of {d.get('from_position')}-{d.get('through_position')} "
            f"({d.get('tokens')} tokens) by {p.get('model')}, prompt {p.get('prompt_version')}"
        )
    if kind == "SummarizationFailed":
        return (
            f"summarizing {d.get('from_position')}-{d.get('through_position')} failed "
            f"(attempt {d.get('attempt')}, {d.get('kind')}): {_excerpt(str(d.get('error')), 200)}"
        )
    if kind == "PolicyChanged":
        return f"policy changed to version {d.get('policy_version')}"
    if kind == "UsageRecorded":
        return (
            f"provider usage through #{d.get('through_position')}: {d.get('prompt_tokens')} prompt "
            f"(estimated {d.get('estimated_prompt_tokens')}), {d.get('completion_tokens')} completion"
        )
    if kind == "MessagesRetracted":
        positions = ", ".join(f"#{p}" for p in d.get("positions") or [])
        reason = f": {_excerpt(str(d.get('reason')), 200)}" if d.get("reason") else ""
        return f"{d.get('command')}: retracted {positions} ({d.get('tokens')} tokens){reason}"
    if kind == "MessageEdited":
        message = d.get("message") or {}
        replaced = d.get("replaces_version")
        return f"#{d.get('position')} {message.get('role')} edited (replaces version {replaced})"
    if kind == "SystemPromptChanged":
        prompt = _excerpt(d.get("system_prompt"), 120)
        return f"system prompt changed ({d.get('system_tokens')} tokens): {prompt}"
    if kind == "SummaryInvalidated":
        versions = ", ".join(str(v) for v in d.get("invalidated_versions") or []) or "none of its own"
        return (
            f"summaries at versions {versions} invalidated ({d.get('reason')} at version "
            f"{d.get('trigger_version')}); {len(d.get('reopened') or [])} messages back in the window"
        )
    if kind == "Forked":
        origin = d.get("origin") or {}
        return (
            f"forked from {origin.get('conversation_id')} at version {origin.get('version')} "
            f"(shares messages #0-#{origin.get('through_position')})"
        )
    if kind == "ToolsChanged":
        return f"tool definitions changed: {len(d.get('tools') or [])}, {d.get('tools_tokens')} tokens"
    return kind + (": " + ", ".join(sorted(d)) if d else "")


def _timeline_entry(audit: AuditEvent, marks: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One row of the timeline; ``marks``: what later events did (``event_marks``)."""
    marks = marks or {}
    entry: dict[str, Any] = {
        "version": audit.version,
        "timestamp": audit.timestamp,
        "kind": audit.kind,
        "known": audit.kind in _KNOWN,
        "description": describe_event(audit),
        "data": audit.data,
        "marks": marks.get(audit.version, {}),
    }
    if audit.kind in ("MessageAppended", "MessageEdited"):
        entry["message"] = audit.data.get("message")
        entry["position"] = audit.data.get("position")
        entry["tokens"] = audit.data.get("tokens")
    return entry


_KNOWN = frozenset(
    {
        "Started",
        "MessageAppended",
        "ThresholdReached",
        "SummaryCreated",
        "SummarizationFailed",
        "PolicyChanged",
        "UsageRecorded",
        "ToolsChanged",
        "MessagesRetracted",
        "MessageEdited",
        "SystemPromptChanged",
        "SummaryInvalidated",
        "Forked",
    }
)


# ------------------------------------------------------------------ the context at v


def _annotations(conversation: Conversation) -> list[dict[str, Any]]:
    """Where each context message comes from and what it costs, in context order."""
    s = conversation.state
    notes: list[dict[str, Any]] = []
    if s.system_prompt is not None:
        notes.append({"source": "system prompt", "position": None, "tokens": s.system_tokens})
    for layer in s.summaries:
        notes.append(
            {
                "source": f"summary of {layer.from_position}-{layer.through_position}",
                "position": None,
                "tokens": layer.message_tokens,
            }
        )
    for entry in conversation.visible_entries():
        if is_placeholder(s, entry):
            notes.append(
                {
                    "source": f"placeholder for #{entry.position}",
                    "position": entry.position,
                    "tokens": entry.placeholder_tokens or 0,
                }
            )
        else:
            notes.append({"source": f"#{entry.position}", "position": entry.position, "tokens": entry.tokens})
    return notes


def events_between(ledger: Ledger, cid: UUID, after: int, through: int) -> list[DomainEvent]:
    """The conversation's stored events of versions ``after`` (excluded) to ``through``."""
    with store_errors(cid):
        found = list(ledger.store.app.events.get(cid, gt=after, lte=through))
    return cast("list[DomainEvent]", found)


def context_page(
    ledger: Ledger,
    cid: UUID,
    version: int | None,
    *,
    page: int = 1,
    per_page: int = CONTEXT_PER_PAGE,
    suffix: str = "",
) -> dict[str, Any]:
    """The messages the model was sent at ``version`` (default: the latest), with
    their sources and token counts, ``per_page`` of them on page ``page`` (links to
    the neighbouring pages end in ``suffix``: ``.json`` for the JSON's)."""

    def read(conversation: Conversation) -> tuple[int, list[dict[str, Any]], int, list[dict[str, Any]]]:
        messages, tokens = conversation.working_memory()
        return conversation.version, [m.to_openai() for m in messages], tokens, _annotations(conversation)

    if version is None:
        chosen, messages, tokens, notes = ledger.store.read(cid, read)
        latest = chosen
    else:
        latest = ledger.store.read(cid, lambda conversation: conversation.version)
        if version > latest:
            raise ConversationNotFoundError(
                f"version {version} is past the latest version of conversation {cid} ({latest})",
                conversation_id=cid,
                version=version,
            )
        chosen, messages, tokens, notes = read(ledger.conversation(cid, version=version))
    if len(notes) != len(messages):  # pragma: no cover - a domain change not mirrored here
        notes = [{"source": "", "position": None, "tokens": None} for _ in messages]
    at = events_between(ledger, cid, chosen - 1, chosen)
    audit = AuditEvent.from_event(at[0]) if at else None
    paging = Paging(page, per_page, len(messages))
    link = f"/conversations/{cid}/context{suffix}"
    shown = zip(messages[paging.start : paging.stop], notes[paging.start : paging.stop], strict=True)
    return {
        "conversation_id": str(cid),
        "version": chosen,
        "latest_version": latest,
        "tokens": tokens,
        "event": None if audit is None else {"kind": audit.kind, "description": describe_event(audit)},
        "messages_page": {
            **paging.record(link, CONTEXT_PER_PAGE, extra=f"version={chosen}"),
            "first_index": paging.start,
        },
        "messages": [{"message": message, **note} for message, note in shown],
    }
