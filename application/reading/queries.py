"""The queries behind the ``Ledger`` façade: the context and its cost, a copy of the
aggregate, token totals, the transcript, the summaries, what-if replays, and the
audits (replay, the conversations' ids, verify) over every store.

Nothing here writes. What a query needs of the ledger is the ``QueryHost`` port; the
``Ledger`` satisfies it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast
from uuid import UUID

from contextledger.application.auditing.audit import Audit
from contextledger.application.auditing.whatif import LogSource, choose_summarizer, simulate_policy
from contextledger.application.auditing.whatif_results import WhatIfReport
from contextledger.application.formats.anthropic_render import render_anthropic
from contextledger.application.formats.gemini_render import render_gemini
from contextledger.application.formats.native_readable import (
    ReadableHost,
    unreadable_links,
    with_readable_summaries,
)
from contextledger.application.formats.originals import WorkingEntries, entries_of
from contextledger.application.formats.responses_render import render_responses
from contextledger.application.shared.addressing import ConversationRef, resolve
from contextledger.application.shared.observability import Tracer
from contextledger.application.shared.ports import Summarizer, TokenCounter
from contextledger.application.shared.results import (
    AuditEvent,
    SharedHistory,
    SummaryInfo,
    TokenTotals,
    TranscriptEntry,
    VerifyReport,
    WorkingMemory,
    calibrated_tokens,
)
from contextledger.application.shared.settings import Settings
from contextledger.application.shared.wire import ContextMessage, ToolDefinition
from contextledger.application.storage.store import ConversationStore
from contextledger.application.summaries.history import shared_history, summary_infos, transcript_entries
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import DomainEvent
from contextledger.domain.values.errors import ConversationErasedError, InvalidArgumentError, LogDamagedError
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.validation import check_count

__all__ = ["FORMATS", "AuditedStore", "ConversationQueries", "QueryHost", "check_context_format"]

T = TypeVar("T")

#: The formats ``Ledger.context`` gives the working memory in.
FORMATS = ("openai", "responses", "anthropic", "gemini")


def check_context_format(format: Any, cache: Any, summary: Any) -> None:
    """``InvalidArgumentError`` for an unknown format or a combination it cannot take."""
    if not isinstance(format, str) or format not in FORMATS:
        raise InvalidArgumentError(
            f"format must be one of {', '.join(map(repr, FORMATS))}, not {format!r}"[:200], argument="format"
        )
    if not isinstance(cache, bool):
        raise InvalidArgumentError("cache must be True or False", argument="cache")
    if summary not in ("system", "user", "assistant"):
        raise InvalidArgumentError(
            f'summary must be "system", "user" or "assistant", not {summary!r}'[:200], argument="summary"
        )
    if cache and format != "anthropic":
        raise InvalidArgumentError(
            "cache=True marks Anthropic prompt-cache breakpoints: it needs "
            f'format="anthropic", not {format!r}',
            argument="cache",
        )
    if summary != "system" and format == "openai":
        raise InvalidArgumentError(
            f'summary="{summary}" needs format="responses", "anthropic" or "gemini" '
            "(the OpenAI format places summaries as the policy's summary_placement says)",
            argument="summary",
        )


class AuditedStore(Protocol):
    """One store of the ledger, as the audits over every store see it."""

    @property
    def audit(self) -> Audit: ...


class QueryHost(AuditedStore, ReadableHost, Protocol):
    """What the queries need of the ledger: its settings, its conversations, its
    tracer, its stores (itself alone unless sharded), the ids of its conversations,
    the token counter of a model, and (for an opaque native summary's readable text,
    made on demand) its summarizers and clock."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> ConversationStore: ...

    @property
    def tracer(self) -> Tracer: ...

    @property
    def shards(self) -> Sequence[AuditedStore]: ...

    def conversation_ids(self) -> list[UUID]: ...

    def counter_for(self, model: str) -> TokenCounter: ...


class ConversationQueries:
    """The ledger's read side (``Ledger`` delegates to it; the public methods'
    documentation is the façade's). ``build_summarizer`` makes a what-if's summarizer
    of a kind ("offline", "openai")."""

    def __init__(self, host: QueryHost, build_summarizer: Callable[[str], Summarizer]) -> None:
        self._host = host
        self._build_summarizer = build_summarizer

    def working_memory(self, conversation_id: ConversationRef, version: int | None) -> WorkingMemory:
        conversation_id = resolve(conversation_id)
        with self._host.tracer.span("context", conversation_id=conversation_id, version=version) as span:
            memory = self._working_memory(conversation_id, version)
            span.set("messages", len(memory.messages))
            span.set("context_tokens", memory.tokens)
            span.set("aggregate_version", memory.version)
            return memory

    def _working_memory(self, conversation_id: UUID, version: int | None) -> WorkingMemory:

        def read(conversation: Conversation) -> WorkingMemory:
            messages, estimate = conversation.working_memory()
            tokens, error_bound = calibrated_tokens(conversation, estimate)
            return WorkingMemory(
                messages=cast("list[ContextMessage]", [m.to_openai() for m in messages]),
                tokens=tokens,
                version=conversation.version,
                estimate_error_bound=error_bound,
            )

        self.check_digests(conversation_id)
        if version is not None:
            return read(self._readable(self.conversation(conversation_id, version)))
        return self._newest(conversation_id, read)

    def _readable(self, conversation: Conversation) -> Conversation:
        """``conversation`` (a copy) with the readable text of every opaque native
        summary it rests on (``native_readable``: made and recorded when missing)."""
        return with_readable_summaries(self._host, conversation)

    def _newest(self, conversation_id: UUID, reader: Callable[[Conversation], T]) -> T:
        """``reader`` over the newest state, in one read when it has every readable text.
        Otherwise they are made first and recorded (then read at the new version), or,
        by a read-only ledger, put into a copy for this read alone."""
        store = self._host.store
        answer = store.read(conversation_id, lambda c: None if unreadable_links(c) else (reader(c),))
        if answer is not None:
            return answer[0]
        made = self._readable(self.conversation(conversation_id, None))
        return reader(made) if self._host.settings.read_only else store.read(conversation_id, reader)

    def check_digests(self, conversation_id: UUID) -> None:
        """``Settings.check_digests``: recompute the conversation's digests (as
        ``verify`` does) before a read answers, on every read or when the conversation
        is not in this process's cache; ``LogDamagedError`` names the first version
        that does not match."""
        level = self._host.settings.check_digests
        if level == "off" or (level == "load" and self._host.store.cached(conversation_id)):
            return
        report = self._host.audit.verify(conversation_id)
        if report.problems:
            first = report.problems[0]
            raise LogDamagedError(
                f"the stored log does not match its digests at version {first.version}: {first.problem} "
                f"(check_digests={level!r}; `contextledger verify` lists every problem)",
                conversation_id=conversation_id,
                version=first.version,
            )

    def rendered(
        self, conversation_id: ConversationRef, version: int | None, format: str, cache: bool, summary: Any
    ) -> Any:
        """The working memory as ``format``'s request (``Ledger.context`` with a format)."""
        check_context_format(format, cache, summary)
        conversation_id = resolve(conversation_id)
        with self._host.tracer.span("context", conversation_id=conversation_id, version=version) as span:
            self.check_digests(conversation_id)
            if format == "responses":
                return self._responses(conversation_id, version, summary)
            working: WorkingEntries
            if version is not None:
                working = entries_of(self._readable(self.conversation(conversation_id, version)))
            else:
                working = self._newest(conversation_id, entries_of)
            span.set("messages", len(working.entries))
            span.set("aggregate_version", working.version)
            if format == "anthropic":
                return render_anthropic(working.entries, summary=summary, cache=cache)
            if format == "gemini":
                return render_gemini(working.entries, summary=summary)
            return [entry.message for entry in working.entries]

    def _responses(self, conversation_id: UUID, version: int | None, summary: Any) -> dict[str, Any]:
        if version is not None:
            return render_responses(self.conversation(conversation_id, version), summary=summary)
        return self._host.store.read(conversation_id, lambda c: render_responses(c, summary=summary))

    def conversation(self, conversation_id: ConversationRef, version: int | None) -> Conversation:
        conversation_id = resolve(conversation_id)
        if version is None:
            return self._host.store.copy(conversation_id)
        check_count(version, "version", minimum=1, conversation_id=conversation_id)
        return self._host.store.at_version(conversation_id, version)

    def tools(self, conversation_id: ConversationRef, version: int | None) -> list[ToolDefinition]:
        state = self.conversation(conversation_id, version).state
        return cast("list[ToolDefinition]", [dict(t) for t in state.tools or ()])

    def totals(self, conversation_id: ConversationRef | None) -> TokenTotals:
        store = self._host.store
        if conversation_id is not None:
            return store.read(resolve(conversation_id), TokenTotals.of)
        found: list[TokenTotals] = []
        shared: list[SharedHistory] = []
        for cid in self._host.conversation_ids():
            try:
                totals, forked = store.read(cid, _totals_and_fork)
            except ConversationErasedError:  # its content, counts included, is gone
                continue
            found.append(totals)
            if forked and (inherited := shared_history(store, cid)) is not None:
                shared.append(inherited)
        return TokenTotals.sum(found, shared)

    def transcript(self, conversation_id: ConversationRef) -> list[TranscriptEntry]:
        return transcript_entries(self._host.store, resolve(conversation_id))

    def summaries(self, conversation_id: ConversationRef) -> list[SummaryInfo]:
        return summary_infos(self._host.store, resolve(conversation_id))

    def simulate(
        self,
        policy: ReductionPolicy | Mapping[str, Any],
        conversations: Iterable[ConversationRef] | ConversationRef | None,
        summarizer: Summarizer | str | None,
        budget_calls: int | None,
        prices: Mapping[str, Any] | None,
    ) -> WhatIfReport:
        host = self._host

        def events(conversation_id: UUID) -> list[DomainEvent]:
            # The chosen summarizer is given the content: the key table is read first (a
            # subject another process erased is learnt, and the read raises).
            host.subjects.learn_erasures(conversation_id)
            return host.store.events(conversation_id)

        source = LogSource(host.conversation_ids, events, host.counter_for)
        chosen = choose_summarizer(
            summarizer, self._build_summarizer, openai_configured=host.settings.openai_api_key is not None
        )
        return simulate_policy(
            policy,
            source,
            summarizer=chosen,
            conversations=conversations,
            budget_calls=budget_calls,
            prices=prices,
        )

    def replay(self, conversation_id: ConversationRef) -> Iterator[AuditEvent]:
        return self._host.audit.replay(resolve(conversation_id))

    def conversation_ids(self) -> list[UUID]:
        return [cid for shard in self._host.shards for cid in shard.audit.conversation_ids()]

    def verify(self, conversation_id: ConversationRef | None) -> VerifyReport:
        if conversation_id is not None:
            return self._host.audit.verify(resolve(conversation_id))
        reports = [shard.audit.verify(None) for shard in self._host.shards]
        if len(reports) == 1:
            return reports[0]
        return VerifyReport(
            conversations=sum(r.conversations for r in reports),
            events=sum(r.events for r in reports),
            messages=sum(r.messages for r in reports),
            summaries=sum(r.summaries for r in reports),
            problems=tuple(p for r in reports for p in r.problems),
            erased=tuple(c for r in reports for c in r.erased),
        )


def _totals_and_fork(conversation: Conversation) -> tuple[TokenTotals, bool]:
    return TokenTotals.of(conversation), conversation.state.fork_of is not None
