"""The summary commands of the ``Conversation`` aggregate: what the summarizer is
given, and the recording of its result or of its failure.

A summary is recorded only for the pending range (a late or duplicate one is stale)
and only past the quality gate: not empty, not an error or a refusal, within
``max_summary_tokens``, no longer than its input, and leaving the context within
``max_context_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from contextledger.domain.events import (
    NativeSummaryReadable,
    SummarizationFailed,
    SummaryCreated,
    SummaryProvenance,
)
from contextledger.domain.folding.aggregate import ConversationRoot
from contextledger.domain.folding.queries import (
    folds_previous,
    layers_after,
    newest_group_tokens,
    summaries_tokens,
)
from contextledger.domain.folding.state import PendingRange
from contextledger.domain.values.errors import StaleSummaryError, SummaryQualityError
from contextledger.domain.values.redaction import provider_text
from contextledger.domain.values.reduction import Entry

__all__ = ["SummaryCommands", "SummaryFailure"]

#: A summary this short is accepted even when its input was shorter still.
_TINY_SUMMARY_TOKENS = 32

_ERROR_TEXT_PREFIXES = (
    "error",
    "i'm sorry",
    "i am sorry",
    "sorry, i",
    "as an ai",
    "i cannot",
    "i can't",
    "internal server error",
    "traceback",
)


@dataclass(frozen=True)
class SummaryFailure:
    """One failed summarization attempt, as recorded in ``SummarizationFailed``.

    ``kind`` names the failure (an error class name, ``"quality"``, ...), ``error``
    says what happened (one line of at most 2,000 characters, control characters
    escaped and anything like an API key masked: ``redaction.provider_text``), ``retryable`` whether trying
    again may help, ``called_provider`` whether a provider was called (and may have
    charged for it), with the tokens it reported when it did.
    """

    kind: str
    error: str
    retryable: bool
    called_provider: bool
    input_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:  # text from a provider: escaped, secrets masked
        object.__setattr__(self, "error", provider_text(self.error))


class SummaryCommands(ConversationRoot):
    """The summary commands and queries; ``Conversation`` inherits them."""

    def pending_messages_for_summary(self) -> list[Entry]:
        """Entries of the pending range (the summarizer's input besides the summary)."""
        p = self.state.pending
        if p is None:
            return []
        return [e for e in self.state.window if p.from_position <= e.position <= p.through_position]

    def previous_summary_text(self) -> str | None:
        """The summary a new one extends (all layers joined when consolidating)."""
        s = self.state
        if not s.summaries:
            return None
        if folds_previous(s, s.pending):
            return "\n\n".join(layer.text for layer in s.summaries)
        return None

    def record_summary(
        self,
        *,
        from_position: int,
        through_position: int,
        text: str,
        tokens: int,
        message_tokens: int,
        source_digest: str,
        provenance: SummaryProvenance,
        at: datetime,
        threshold_version: int | None = None,
        native: str | None = None,
        payload: tuple[dict[str, Any], ...] | None = None,
    ) -> None:
        """Command: record the summary of the pending range; stale ones are rejected
        (with ``threshold_version``, also a range pinned again after an edit). A
        ``native`` one (a provider's compaction, with its ``payload``) re-folds every
        summary before it."""
        pending = self._require_pending(from_position, through_position, threshold_version)
        s = self.state
        stripped = text.strip()
        if not stripped:
            raise SummaryQualityError("the summary is empty", conversation_id=self.id)
        if stripped.lower().startswith(_ERROR_TEXT_PREFIXES):
            raise SummaryQualityError("the summary reads like an error or a refusal", conversation_id=self.id)
        if tokens > s.policy.max_summary_tokens:
            raise SummaryQualityError(
                f"the summary has {tokens} tokens, over max_summary_tokens ({s.policy.max_summary_tokens})",
                conversation_id=self.id,
            )
        source_tokens = sum(e.tokens for e in self.pending_messages_for_summary())
        if self.previous_summary_text() is not None:
            source_tokens += sum(layer.message_tokens for layer in s.summaries)
        if tokens > max(source_tokens, _TINY_SUMMARY_TOKENS):
            raise SummaryQualityError(
                f"the summary ({tokens} tokens) is longer than its input ({source_tokens} tokens)",
                conversation_id=self.id,
            )
        cap = s.policy.max_context_tokens
        if cap is not None:
            layers = layers_after(s, pending, from_position, through_position, "", message_tokens)
            fixed = s.reply_priming + s.tools_tokens
            fixed += s.system_tokens if s.system_prompt is not None else 0
            fixed += summaries_tokens(s, layers)
            newest = newest_group_tokens(s, after=through_position)
            if fixed + newest > cap:
                raise SummaryQualityError(
                    f"with this summary the context cannot fit max_context_tokens ({cap})",
                    conversation_id=self.id,
                )
        # a re-folding summary covers all there is (of a fork's remainder, its own part)
        folds = native is not None or folds_previous(s, pending)
        covers_from = s.erased_before if folds else from_position
        self._trigger(
            SummaryCreated,
            at,
            from_position=from_position,
            through_position=through_position,
            covers_from=covers_from,
            text=text,
            tokens=tokens,
            message_tokens=message_tokens,
            source_digest=source_digest,
            threshold_version=pending.threshold_version,
            consolidated=pending.consolidate or native is not None,
            provenance=provenance,
            policy_version=s.policy_version,
            native=native,
            payload=payload,
        )
        self._maybe_pin_range(at)

    def native_range(self) -> tuple[int, int] | None:
        """The range a provider's compaction made now stands for: every message not yet
        summarized (it re-folds the summaries before it); None when there is none or a
        tool-call group is open (a request with an unanswered call was never sent)."""
        s = self.state
        if s.open_group_index is not None:
            return None
        from_position = max(s.summarized_through + 1, s.erased_before)
        through_position = s.next_position - 1
        if through_position < from_position:
            return None
        return from_position, through_position

    def native_sources(self, from_position: int, through_position: int) -> list[Entry]:
        """The window entries a native compaction of that range is made from."""
        return [e for e in self.state.window if from_position <= e.position <= through_position]

    def record_native_summary(
        self,
        *,
        native: str,
        payload: tuple[dict[str, Any], ...],
        from_position: int,
        through_position: int,
        text: str,
        tokens: int,
        message_tokens: int,
        source_digest: str,
        provenance: SummaryProvenance,
        at: datetime,
    ) -> None:
        """Command: record a compaction the provider made as a summary of every message
        not yet summarized (``native_range``), re-folding the summaries before it. A
        pending range it covers is answered by it (a late result for it is stale). An
        opaque OpenAI item may come without readable text (``text=""``): it is made on
        demand later (``record_native_readable``)."""
        if self.native_range() != (from_position, through_position):
            raise StaleSummaryError(
                "a native compaction covers every message not yet summarized",
                conversation_id=self.id,
                from_position=from_position,
                through_position=through_position,
                pending=self.native_range(),
            )
        if not text.strip() and (native != "responses" or text):
            raise SummaryQualityError("the native compaction has no readable text", conversation_id=self.id)
        s = self.state
        self._trigger(
            SummaryCreated,
            at,
            from_position=from_position,
            through_position=through_position,
            covers_from=s.erased_before,
            text=text,
            tokens=tokens,
            message_tokens=message_tokens,
            source_digest=source_digest,
            threshold_version=s.pending.threshold_version if s.pending is not None else 0,
            consolidated=True,
            provenance=provenance,
            policy_version=s.policy_version,
            native=native,
            payload=payload,
        )
        self._maybe_pin_range(at)

    def record_native_readable(
        self,
        *,
        summary_version: int,
        summary_origin: UUID | None,
        from_position: int,
        through_position: int,
        text: str,
        tokens: int,
        message_tokens: int,
        provenance: SummaryProvenance,
        at: datetime,
    ) -> None:
        """Command: record the readable text of the opaque native summary of
        ``summary_version`` (in ``summary_origin``'s log; None: this one), recorded
        without one. Refused when the text is empty."""
        if not text.strip():
            raise SummaryQualityError("the readable summary is empty", conversation_id=self.id)
        self._trigger(
            NativeSummaryReadable,
            at,
            summary_version=summary_version,
            summary_origin=summary_origin,
            from_position=from_position,
            through_position=through_position,
            text=text.strip(),
            tokens=tokens,
            message_tokens=message_tokens,
            provenance=provenance,
        )

    def record_native_failure(self, native: str, failure: SummaryFailure, *, at: datetime) -> None:
        """Command: record a native compaction that failed (the provider gave no summary):
        the policy's own summarizer stays in charge of any pending range."""
        s = self.state
        covered = self.native_range() or (s.next_position, s.next_position - 1)
        self._trigger(
            SummarizationFailed,
            at,
            threshold_version=s.pending.threshold_version if s.pending is not None else 0,
            from_position=covered[0],
            through_position=covered[1],
            kind=failure.kind,
            error=failure.error[:2000],
            attempt=1,
            retryable=failure.retryable,
            called_provider=failure.called_provider,
            input_tokens=failure.input_tokens,
            output_tokens=failure.output_tokens,
            native=native,
        )

    def record_summarization_failure(
        self,
        failure: SummaryFailure,
        *,
        from_position: int,
        through_position: int,
        at: datetime,
        threshold_version: int | None = None,
    ) -> int:
        """Command: record a failed attempt for the pending range; returns the attempt number."""
        pending = self._require_pending(from_position, through_position, threshold_version)
        attempt = pending.attempts + 1
        self._trigger(
            SummarizationFailed,
            at,
            threshold_version=pending.threshold_version,
            from_position=from_position,
            through_position=through_position,
            kind=failure.kind,
            error=failure.error[:2000],
            attempt=attempt,
            retryable=failure.retryable,
            called_provider=failure.called_provider,
            input_tokens=failure.input_tokens,
            output_tokens=failure.output_tokens,
        )
        return attempt

    def _require_pending(
        self, from_position: int, through_position: int, threshold_version: int | None = None
    ) -> PendingRange:
        pending = self.state.pending
        if (
            pending is None
            or pending.from_position != from_position
            or pending.through_position != through_position
            or (threshold_version is not None and pending.threshold_version != threshold_version)
        ):
            raise StaleSummaryError(
                "the range is not the conversation's pending range (late or duplicate result)",
                conversation_id=self.id,
                from_position=from_position,
                through_position=through_position,
                pending=(pending.from_position, pending.through_position) if pending else None,
            )
        return pending
