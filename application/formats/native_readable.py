"""The readable text of an opaque native summary, made on demand.

With ``Settings.native_readable = "on_demand"`` an OpenAI compaction item is recorded
without readable text (``SummaryCreated.text == ""``, ``native == "responses"``). Only
the Responses format can send it as it is; every other format needs a summary of the
range it covers. The first read that needs one (``context()`` in the chat, Anthropic
or Gemini format, ``working_memory()``), at any version, makes it with the
conversation's summarizer (the offline summarizer when that one fails) from the
messages as they stood just before the compaction, and records it
(``NativeSummaryReadable``, naming the summary's version). Every read after it, at any
version the summary stands at, sends that text: a read in another format never sees
the summary without it, so what ``context(cid, version=v)`` gives never changes. A
read-only ledger cannot record it: it makes the text for that read only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol
from uuid import UUID

from contextledger.application.formats.native import readable_text
from contextledger.application.shared.ports import Summarizer, SummaryResult, TokenCounter
from contextledger.application.shared.settings import Settings
from contextledger.application.storage.store import ConversationStore
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import NativeSummaryReadable, SummaryProvenance
from contextledger.domain.folding.fold import refresh_view
from contextledger.domain.values.errors import StoreError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import SummaryLayer, SummaryLink, summary_message

__all__ = [
    "ErasureCheck",
    "ReadableHost",
    "ReadableSource",
    "make_readable_now",
    "readable_now",
    "readable_of",
    "readable_texts",
    "unreadable_links",
    "with_readable_summaries",
]

#: A readable text by the summary it belongs to: (its log, None for the reading
#: conversation's own; its version).
Key = tuple[UUID | None, int]


class ErasureCheck(Protocol):
    """The check made before content goes to a summarizer (``Subjects`` is one)."""

    def learn_erasures(self, conversation_id: UUID) -> tuple[str, ...]:
        """The subjects of the conversation's content the key table says are erased
        and this process did not know of (learnt by the call)."""
        ...


class ReadableSource(Protocol):
    """What making a readable summary of a conversation needs: its store, the
    conversation's summarizer and its fallback, token counters, and the check of its
    subjects' keys."""

    @property
    def store(self) -> ConversationStore: ...

    @property
    def summarizer(self) -> Summarizer: ...

    @property
    def fallback_summarizer(self) -> Summarizer | None: ...

    def summarizer_model_name(self) -> str: ...

    def counter_for(self, model: str) -> TokenCounter: ...

    @property
    def subjects(self) -> ErasureCheck: ...


class ReadableHost(ReadableSource, Protocol):
    """What making and recording the readable summaries a read needs: besides, the
    settings and the clock."""

    @property
    def settings(self) -> Settings: ...

    def clock(self) -> datetime: ...


def readable_of(
    host: ReadableSource, conversation: Conversation, appended: tuple[Message, ...] = ()
) -> SummaryResult | None:
    """``readable_text`` of ``conversation`` by the host's summarizers, under its policy."""
    policy = conversation.policy
    return readable_text(
        conversation,
        host.summarizer,
        host.fallback_summarizer,
        model=policy.summarizer_model or host.summarizer_model_name(),
        max_summary_tokens=policy.max_summary_tokens,
        counter=host.counter_for(conversation.state.model),
        appended=appended,
    )


def readable_now(
    host: ReadableSource, conversation_id: UUID, appended: tuple[Message, ...] = ()
) -> SummaryResult | None:
    """The readable summary of what an opaque compaction about to be recorded covers
    (the messages not yet summarized, then ``appended``), from the conversation as it
    is now. Its content goes to the summarizer: the key table is read first, so a
    subject another process erased is learnt and the read raises
    ``ConversationErasedError`` (``Subjects.learn_erasures``)."""
    host.subjects.learn_erasures(conversation_id)
    return host.store.read(conversation_id, lambda conversation: readable_of(host, conversation, appended))


def _waiting(layer: SummaryLayer) -> bool:
    return layer.native == "responses" and not layer.text and layer.link is not None


def unreadable_links(conversation: Conversation) -> list[SummaryLink]:
    """The native summaries ``conversation``'s working memory rests on whose readable
    text was not there at its version."""
    return [layer.link for layer in conversation.state.summaries if _waiting(layer) and layer.link]


def readable_texts(store: ConversationStore, conversation_id: UUID) -> dict[Key, NativeSummaryReadable]:
    """Every readable text recorded in the conversation's log (the first for each)."""
    found: dict[Key, NativeSummaryReadable] = {}
    for event in store.events(conversation_id):
        if isinstance(event, NativeSummaryReadable):
            found.setdefault((event.summary_origin, event.summary_version), event)
    return found


def _make(host: ReadableHost, conversation_id: UUID, link: SummaryLink) -> SummaryResult:
    """A readable summary of what the native summary ``link`` covers, from the
    conversation it was recorded in as it stood just before it."""
    before = host.store.at_version(link.origin or conversation_id, link.version - 1)
    made = readable_of(host, before)
    if made is None:  # it was recorded over the messages not yet summarized then
        raise StoreError(
            "the log holds no messages before the native summary",
            conversation_id=link.origin or conversation_id,
        )
    return made


def _record(host: ReadableHost, conversation_id: UUID, link: SummaryLink, made: SummaryResult) -> None:
    def command(conversation: Conversation) -> tuple[None, list[object]]:
        if (link.origin, link.version) in readable_texts(host.store, conversation_id):
            return None, []  # another reader made it first
        counter = host.counter_for(conversation.state.model)
        text = made.text.strip()
        conversation.record_native_readable(
            summary_version=link.version,
            summary_origin=link.origin,
            from_position=link.from_position,
            through_position=link.through_position,
            text=text,
            tokens=counter.count_text(text),
            message_tokens=counter.count_message(
                summary_message(link.from_position, link.through_position, text)
            ),
            provenance=SummaryProvenance(
                model=made.model,
                prompt_version=made.prompt_version,
                input_tokens=made.input_tokens,
                output_tokens=made.output_tokens,
                latency_ms=made.latency_ms,
            ),
            at=host.clock(),
        )
        return None, []

    host.store.execute(conversation_id, command)


def with_readable_summaries(host: ReadableHost, conversation: Conversation) -> Conversation:
    """``conversation`` (a private copy, at any version) with the readable text of each
    opaque native summary it rests on: the recorded one, made and recorded now when
    there is none yet."""
    links = unreadable_links(conversation)
    if not links:
        return conversation
    cid = conversation.id
    texts = readable_texts(host.store, cid)
    missing = [link for link in links if (link.origin, link.version) not in texts]
    if missing and host.subjects.learn_erasures(cid):
        # What they cover goes to a summarizer next, and another process erased a
        # subject of it since this one cached the key: read again (it raises, or gives
        # a fork's remainder).
        return with_readable_summaries(host, host.store.at_version(cid, conversation.version))
    patch: dict[Key, tuple[str, int]] = {}
    if missing and host.settings.read_only:
        counter = host.counter_for(conversation.state.model)
        for link in missing:
            text = _make(host, cid, link).text.strip()
            shown = summary_message(link.from_position, link.through_position, text)
            patch[(link.origin, link.version)] = (text, counter.count_message(shown))
    elif missing:
        for link in missing:
            _record(host, cid, link, _make(host, cid, link))
        texts = readable_texts(host.store, cid)
    patch.update({key: (event.text, event.message_tokens) for key, event in texts.items()})
    s = conversation.state
    layers = []
    for layer in s.summaries:
        found = patch.get((layer.link.origin, layer.link.version)) if _waiting(layer) and layer.link else None
        if found is not None:
            layer = layer.model_copy(update={"text": found[0], "message_tokens": found[1]})
        layers.append(layer)
    s.summaries = layers
    refresh_view(s)
    return conversation


def make_readable_now(host: ReadableHost, conversation_id: UUID) -> bool:
    """Make and record the readable text of every opaque native summary the
    conversation's newest working memory rests on that has none (before a summary
    that re-folds them is requested, so that it extends their text); True if there was
    one to make."""
    if not host.store.read(conversation_id, unreadable_links) or host.settings.read_only:
        return False
    with_readable_summaries(host, host.store.copy(conversation_id))
    return True
