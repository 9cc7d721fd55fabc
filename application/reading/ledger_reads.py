"""The ledger's read queries: the context and its cost, the tools, a copy of the
aggregate, token totals, the transcript, the summaries, the what-if replay, and the
audits (``replay``, ``conversation_ids``, ``verify``). ``Ledger`` inherits them, as it
inherits the edits of ``ledger_edits``; each delegates to ``queries.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, overload
from uuid import UUID

from contextledger.application.auditing.whatif_results import WhatIfReport
from contextledger.application.reading.queries import ConversationQueries
from contextledger.application.shared.addressing import ConversationRef
from contextledger.application.shared.ports import Summarizer
from contextledger.application.shared.results import (
    AuditEvent,
    SummaryInfo,
    TokenTotals,
    TranscriptEntry,
    VerifyReport,
    WorkingMemory,
)
from contextledger.application.shared.wire import ContextMessage, ToolDefinition
from contextledger.domain.conversation import Conversation
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["LedgerReads"]


class LedgerReads:
    """What a conversation sends, costs and recorded, and the audits of the log."""

    queries: ConversationQueries

    @overload
    def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: Literal["openai"] = "openai",
        cache: Literal[False] = False,
        summary: Literal["system"] = "system",
    ) -> list[ContextMessage]: ...

    @overload
    def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: Literal["responses"],
        cache: Literal[False] = False,
        summary: Literal["system", "user"] = "system",
    ) -> dict[str, Any]: ...

    @overload
    def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: Literal["anthropic", "gemini"],
        cache: bool = False,
        summary: Literal["system", "user", "assistant"] = "system",
    ) -> dict[str, Any]: ...

    def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: str = "openai",
        cache: bool = False,
        summary: str = "system",
    ) -> list[ContextMessage] | dict[str, Any]:
        """What the model is sent next (or was sent at aggregate ``version``).

        ``format="openai"`` (the default): OpenAI chat messages, typed as the openai
        SDK's ``ChatCompletionMessageParam``. ``format="responses"``: ``{"instructions":
        ..., "input": [...items]}`` for ``client.responses.create(model=..., **ctx)``
        (``instructions`` only with a system prompt). ``format="anthropic"``: ``{"system": [...],
        "messages": [...]}`` for ``client.messages.create(**ctx, model=..., max_tokens=...)``;
        ``cache=True`` marks prompt-cache breakpoints (``docs/providers.md``).
        ``format="gemini"``: ``{"system_instruction": ..., "contents": [...]}`` for
        ``generate_content``. ``summary="user"`` (Responses, Anthropic, Gemini) sends
        summaries as user turns instead of system text, ``summary="assistant"`` as an
        assistant (model) turn (for Anthropic and Gemini after a short user turn: their
        first turn must be the user's). Messages appended in another format are
        converted (what cannot cross is dropped: ``docs/providers.md``). An unknown
        format or a combination it cannot take (``cache=True`` but not Anthropic) is an
        ``InvalidArgumentError``.
        """
        if format == "openai" and cache is False and summary == "system":
            return self.queries.working_memory(conversation_id, version).messages
        rendered: list[ContextMessage] | dict[str, Any] = self.queries.rendered(
            conversation_id, version, format, cache, summary
        )
        return rendered

    def tools(self, conversation_id: ConversationRef, *, version: int | None = None) -> list[ToolDefinition]:
        """The tool definitions to send with the next model call (empty: none)."""
        return self.queries.tools(conversation_id, version)

    def working_memory(
        self, conversation_id: ConversationRef, *, version: int | None = None
    ) -> WorkingMemory:
        """The context and its token cost read together (a summary landing in the
        background cannot fall between them)."""
        return self.queries.working_memory(conversation_id, version)

    def conversation(self, conversation_id: ConversationRef, *, version: int | None = None) -> Conversation:
        """A private copy of the aggregate, as it is now or was at ``version`` (audits)."""
        return self.queries.conversation(conversation_id, version)

    def totals(self, conversation_id: ConversationRef | None = None) -> TokenTotals:
        """Token accounting for one conversation, or summed over all of them.

        A fork's own totals count the history it shares with its source (its prompts
        carry it); the sum counts each stored message once: ``messages``,
        ``appended_tokens``, ``retracted_messages`` and ``edited_messages`` leave out
        what forks inherited."""
        return self.queries.totals(conversation_id)

    def transcript(self, conversation_id: ConversationRef) -> list[TranscriptEntry]:
        """Every message ever appended and every edited version, oldest first (a fork
        starts with the history it shares). Retracted entries are marked
        ``retracted``; an edited version names the version it replaced."""
        return self.queries.transcript(conversation_id)

    def summaries(self, conversation_id: ConversationRef) -> list[SummaryInfo]:
        """Every summary recorded, oldest first, with ranges and provenance; one that a
        retraction or an edit invalidated is marked ``valid=False``."""
        return self.queries.summaries(conversation_id)

    def simulate(
        self,
        policy: ReductionPolicy | Mapping[str, Any],
        conversations: Iterable[ConversationRef] | ConversationRef | None = None,
        summarizer: Summarizer | str | None = None,
        *,
        budget_calls: int | None = None,
        prices: Mapping[str, Any] | None = None,
    ) -> WhatIfReport:
        """What ``policy`` would have sent, turn by turn, against what the log recorded:
        an in-memory replay that writes nothing (see ``contextledger.application.auditing.whatif``).
        ``summarizer``: None or "offline" (no network), "openai", or a ``Summarizer``."""
        return self.queries.simulate(policy, conversations, summarizer, budget_calls, prices)

    def replay(self, conversation_id: ConversationRef) -> Iterator[AuditEvent]:
        """Every stored event of the conversation, in order, for audits."""
        return self.queries.replay(conversation_id)

    def conversation_ids(self) -> list[UUID]:
        """Ids of every conversation, in the order they were started (with several
        stores: store by store, each in that order)."""
        return self.queries.conversation_ids()

    def verify(self, conversation_id: ConversationRef | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest; report what does not match."""
        return self.queries.verify(conversation_id)
