"""The Ledger's edit commands and Responses-item methods (``Ledger`` inherits them).

Edits are events on the aggregate (``contextledger.domain.commands.editing``); what they need
of summarized history is read from the log here (``LogHistory``) and handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError

from contextledger.application.formats import items as items_module
from contextledger.application.formats.items import SummaryRole
from contextledger.application.privacy.subjects import Subjects
from contextledger.application.shared.addressing import ConversationRef, check_key, id_for_key, resolve
from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.limits import check_message_bytes, check_message_tokens
from contextledger.application.shared.ports import TokenCounter
from contextledger.application.shared.settings import Settings
from contextledger.application.storage.store import ConversationStore
from contextledger.application.summaries.history import HistoryCache, LogHistory
from contextledger.domain.conversation import Conversation
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.values.errors import ConversationErasedError, DuplicateConversationError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import placeholder_text
from contextledger.domain.values.validation import MAX_REASON_CHARS, check_position, check_text

__all__ = ["LedgerEdits"]


class LedgerEdits:
    """Edit commands (retract, edit, rewind, pop, clear, the system prompt, fork) and
    Responses-format items."""

    store: ConversationStore
    history_cache: HistoryCache
    settings: Settings
    counters: TokenCounters
    clock: Callable[[], datetime]
    subjects: Subjects

    if TYPE_CHECKING:

        def counter_for(self, model: str) -> TokenCounter: ...

        def conversation(
            self, conversation_id: ConversationRef, *, version: int | None = None
        ) -> Conversation: ...

    def _history(self, conversation: Conversation) -> LogHistory:
        return LogHistory(
            self.store, conversation.id, through_version=conversation.version, cache=self.history_cache
        )

    def retract(
        self, conversation_id: ConversationRef, position: int, reason: str | None = None
    ) -> list[int]:
        """Retract the message at ``position`` from the working memory and all future
        summaries (the log keeps it); returns the retracted positions.

        Tool-call groups go whole: retracting an assistant tool-call message retracts
        its results, retracting one tool result retracts its whole group. Summaries
        made from a retracted message are invalidated (``SummaryInvalidated``).
        """
        conversation_id = resolve(conversation_id)
        check_position(position, conversation_id=conversation_id)
        check_text(reason, "reason", optional=True, max_chars=MAX_REASON_CHARS)
        return self.store.execute(
            conversation_id,
            lambda c: (
                c.retract(position, reason=reason, history=self._history(c), at=self.clock()),
                [],
            ),
        )

    def edit(
        self, conversation_id: ConversationRef, position: int, message: Message | dict[str, Any]
    ) -> bool:
        """Replace the message at ``position`` by a new version (same role; a tool result
        keeps its ``tool_call_id``, a tool-call message its call ids). False if the
        message is the same. Summaries made from the old version are invalidated."""
        conversation_id = resolve(conversation_id)
        check_position(position, conversation_id=conversation_id)
        msg = Message.from_openai(message)
        check_message_bytes(msg, self.settings)

        def command(conversation: Conversation) -> tuple[bool, list[Any]]:
            history = self._history(conversation)
            old = conversation.current_entry(position, history)
            counter = self.counter_for(conversation.state.model)
            tokens = counter.count_message(msg)
            check_message_tokens(tokens, self.settings)
            placeholder_tokens = None
            if msg.role == "tool":
                text = placeholder_text(old.tool_name, tokens, position)
                placeholder_tokens = counter.count_message(
                    Message(role="tool", tool_call_id=msg.tool_call_id, content=text)
                )
            changed = conversation.edit(
                position,
                msg,
                tokens=tokens,
                placeholder_tokens=placeholder_tokens,
                history=history,
                at=self.clock(),
            )
            return changed, []

        return self.store.execute(conversation_id, command)

    def rewind(self, conversation_id: ConversationRef, position: int) -> list[int]:
        """Retract every message after ``position`` (edit-and-regenerate is ``rewind``
        then ``append``); returns the retracted positions."""
        conversation_id = resolve(conversation_id)
        check_position(position, conversation_id=conversation_id)
        return self.store.execute(
            conversation_id,
            lambda c: (c.rewind(position, history=self._history(c), at=self.clock()), []),
        )

    def pop(self, conversation_id: ConversationRef) -> list[dict[str, Any]]:
        """Retract the newest message (or its whole tool-call group) and return it, in
        OpenAI format, oldest first."""
        conversation_id = resolve(conversation_id)
        entries = self.store.execute(
            conversation_id, lambda c: (c.pop(history=self._history(c), at=self.clock()), [])
        )
        return [e.message.to_openai() for e in entries]

    def clear(self, conversation_id: ConversationRef) -> list[int]:
        """Retract every message (the system prompt stays); returns their positions."""
        conversation_id = resolve(conversation_id)
        return self.store.execute(
            conversation_id, lambda c: (c.clear(history=self._history(c), at=self.clock()), [])
        )

    def change_system_prompt(self, conversation_id: ConversationRef, text: str | None) -> bool:
        """Replace the system prompt from now on; False if it is the same."""
        conversation_id = resolve(conversation_id)
        check_text(text, "text", optional=True)
        system = Message(role="system", content=text) if text is not None else None
        if system is not None:
            check_message_bytes(system, self.settings, field="system_prompt")

        def command(conversation: Conversation) -> tuple[bool, list[Any]]:
            counter = self.counter_for(conversation.state.model)
            tokens = counter.count_message(system) if system is not None else 0
            check_message_tokens(tokens, self.settings, field="system_prompt")
            return conversation.change_system_prompt(text, tokens=tokens, at=self.clock()), []

        return self.store.execute(conversation_id, command)

    def fork(
        self,
        conversation_id: ConversationRef,
        version: int | None = None,
        key: str | None = None,
        subject: str | None = None,
    ) -> UUID:
        """Start a new conversation whose history is this one's as it stood at
        ``version`` (default: now); returns its id. Summaries of the shared history
        are reused and the digest chain continues; later edits on either side never
        touch the other. The fork belongs to the source's data subject (encrypted under
        its key) unless given another ``subject``; what it inherits is under the keys of
        every subject whose content it holds (erasing any of them erases the fork's
        inherited part too), its own later records under its own (``docs/privacy.md``).
        A fork whose inherited part was erased cannot be forked in turn (its history
        would be written under the erased key): ``ConversationErasedError``."""
        conversation_id = resolve(conversation_id)
        if key is not None:
            key = check_key(key)
        subject = self.subjects.checked(subject)
        source = self.conversation(conversation_id, version=version)
        if source.state.inherited_erased:
            raise _unforkable(self.store, conversation_id)
        fork = Conversation.fork(
            source, id_for_key(key) if key is not None else uuid4(), key=key, at=self.clock()
        )
        source_subject = self.subjects.subject_of(conversation_id)
        if subject is None:  # the source's (None: no per-subject keys)
            subject = source_subject
        if subject is not None and _inherits_another(self.subjects, source, source_subject, subject):
            # Its policy is in its first record, under the inherited subjects' keys too:
            # restated under its own key, it outlives an erasure of what it inherits.
            fork.restate_policy(at=self.clock())
        try:
            if subject is not None:
                self.subjects.assign_new(fork.id, subject)
            self.store.create(fork)
        except IntegrityError:
            raise DuplicateConversationError(
                f"a conversation with the key {key!r} already exists", conversation_id=fork.id, key=key
            ) from None
        return fork.id

    # ------------------------------------------------------- Responses items

    def append_items(self, conversation_id: ConversationRef, items: Iterable[dict[str, Any]]) -> list[int]:
        """Append Responses-format items (the Agents SDK's and the Responses API's) in one
        transaction; returns the positions of the chat messages they became."""
        return items_module.append_items(self, resolve(conversation_id), items)

    def context_items(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        summary_role: SummaryRole = "system",
    ) -> list[dict[str, Any]]:
        """The working memory as Responses items (the stored items, verbatim, with the
        summary as a message item of ``summary_role`` and placeholders for old outputs)."""
        return items_module.context_items(
            self, resolve(conversation_id), version=version, summary_role=summary_role
        )

    def transcript_items(self, conversation_id: ConversationRef) -> list[dict[str, Any]]:
        """Every item ever appended, oldest first (chat messages converted to items)."""
        return items_module.transcript_items(self, resolve(conversation_id))


def _inherits_another(
    subjects: Subjects, source: Conversation, source_subject: str | None, subject: str
) -> bool:
    """Whether a fork of ``source`` for ``subject`` holds another subject's content: the
    source's, or (the source being a fork) its own source's."""
    if source_subject != subject:
        return True
    origin = source.state.fork_of
    return origin is not None and subjects.subject_of(origin.conversation_id) != subject


def _unforkable(store: ConversationStore, conversation_id: UUID) -> ConversationErasedError:
    """The error forking a fork whose inherited history was erased raises."""
    message = (
        "the conversation's inherited history was erased with its source's data subject: "
        "a fork of it would hold that history, which can no longer be written"
    )
    first = store.records(conversation_id)[0]
    if not isinstance(first, ErasedEvent):  # pragma: no cover - read as a remainder, so erased
        return ConversationErasedError(message, conversation_id=conversation_id)
    return ConversationErasedError(
        message,
        conversation_id=conversation_id,
        subject=first.subject,
        erased_at=first.erased_at,
        reason=first.reason,
    )
