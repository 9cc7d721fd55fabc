"""The links of the digest chain, as ``verify`` recomputes them.

A chained event (``Started``, a message, an edit, a retraction, a system prompt
change) written since the chain commits to content carries a ``salt`` and a
``commitment`` (``values/digests.py``): its link covers its structure (``structure_of``:
kind, version, time, positions) and the commitment, so that it can still be checked
once the content is erased. One without a commitment links its content itself, as it
always did. ``expected_link`` is the link an event should carry after ``previous``.
"""

from __future__ import annotations

from contextledger.domain.commands.edits import edit_record, retraction_record, system_prompt_record
from contextledger.domain.events import (
    ConversationEvent,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    Started,
    SystemPromptChanged,
)
from contextledger.domain.values.digests import (
    chain_digest,
    commitment,
    committed_link,
    edit_content,
    edit_digest,
    genesis_content,
    genesis_digest,
    message_content,
    structure,
)

__all__ = ["CHAINED", "content_of", "expected_link", "structure_of"]

#: The events that are links of the digest chain.
CHAINED = (Started, MessageAppended, MessageEdited, MessagesRetracted, SystemPromptChanged)

#: What ``expected_link`` gives for an event whose commitment is not its content's.
_NOT_ITS_CONTENT = "the commitment is not its content's"


def structure_of(event: ConversationEvent) -> str | None:
    """The structure a committed link covers (None: the event is no link)."""
    v, at = event.originator_version, event.timestamp
    if isinstance(event, MessageAppended):
        return structure("message", v, at, event.position)
    if isinstance(event, MessageEdited):
        return structure("edit", v, at, event.position, event.replaces_version)
    if isinstance(event, MessagesRetracted):
        return structure("retract", v, at, event.command, ",".join(map(str, event.positions)))
    if isinstance(event, SystemPromptChanged):
        return structure("system_prompt", v, at)
    if isinstance(event, Started):
        return structure("start", v, at, event.originator_id)
    return None


def content_of(event: ConversationEvent) -> bytes | None:
    """What a link's commitment covers (None: the event is no link)."""
    if isinstance(event, MessageAppended):
        return message_content(event.message, event.items, event.original, event.hidden)
    if isinstance(event, MessageEdited):
        return edit_content(edit_record(event.position, event.replaces_version, event.message))
    if isinstance(event, MessagesRetracted):
        return edit_content(retraction_record(event.command, event.positions, event.reason))
    if isinstance(event, SystemPromptChanged):
        return edit_content(system_prompt_record(event.system_prompt))
    if isinstance(event, Started):
        return genesis_content(event.system_prompt, event.model)
    return None


def expected_link(previous: str, event: ConversationEvent) -> str:
    """The digest ``event`` (a link) should carry after ``previous`` (a ``Started``'s
    previous is ignored). A commitment that is not its content's gives a digest no
    event carries, so the link shows as altered."""
    committed = getattr(event, "commitment", None)
    if committed is None:
        return _plain_link(previous, event)
    salt = getattr(event, "salt", None) or ""
    content, shape = content_of(event), structure_of(event)
    if content is None or shape is None or commitment(salt, content) != committed:
        return _NOT_ITS_CONTENT
    return committed_link("" if isinstance(event, Started) else previous, shape, committed)


def _plain_link(previous: str, event: ConversationEvent) -> str:
    """The link of an event written before commitments: over its content."""
    if isinstance(event, MessageAppended):
        return chain_digest(previous, event.message, event.items, event.original, event.hidden)
    if isinstance(event, MessageEdited):
        return edit_digest(previous, edit_record(event.position, event.replaces_version, event.message))
    if isinstance(event, MessagesRetracted):
        return edit_digest(previous, retraction_record(event.command, event.positions, event.reason))
    if isinstance(event, SystemPromptChanged):
        return edit_digest(previous, system_prompt_record(event.system_prompt))
    if isinstance(event, Started):
        return genesis_digest(str(event.originator_id), event.system_prompt, event.model)
    return _NOT_ITS_CONTENT
