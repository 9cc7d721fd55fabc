"""Ports: what the application needs from the outside world.

Adapters live in ``contextledger.infrastructure``; users may bring their own. Each
port has a contract suite in ``contextledger.testing.contracts`` to run an adapter against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from contextledger.domain.values.errors import InvalidArgumentError
from contextledger.domain.values.messages import Message

__all__ = ["Summarizer", "SummaryRequest", "SummaryResult", "TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way the provider bills a prompt.

    A counter may also have ``count_tools(tools: list[dict]) -> int``, what a list of
    tool definitions adds to a prompt; without it their JSON text is counted.
    """

    #: Tokens the API adds to every prompt to prime the reply (3 for OpenAI chat models).
    reply_priming: int

    def count_text(self, text: str) -> int:
        """Tokens of a bare string."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens one message adds to a prompt, per-message overhead included."""
        ...


@dataclass(frozen=True)
class SummaryRequest:
    """What a summarizer is asked to do: extend ``previous_summary`` with ``messages``.

    ``messages`` are exactly the newly covered ones (positions ``from_position`` to
    ``through_position``, without the retracted ones, each at its position in
    ``positions``); nothing already summarized is sent again.
    """

    conversation_id: UUID
    from_position: int
    through_position: int
    messages: tuple[Message, ...]
    previous_summary: str | None
    model: str
    max_summary_tokens: int
    #: Stable per pinned range: a provider that supports idempotency keys can use it.
    idempotency_key: str
    #: Which attempt at this range the call is (1 for the first).
    attempt: int = 1
    #: The version that pinned the range: a range pinned again after an edit (same
    #: positions, other messages) rejects a result made for the earlier pin.
    threshold_version: int | None = None
    #: The transcript position of each of ``messages``, in order: a range with
    #: retracted messages has gaps, so ``from_position + index`` is not a message's
    #: position. None (a request built without them): the messages are taken as
    #: consecutive from ``from_position``; ``positioned()`` answers either way.
    positions: tuple[int, ...] | None = None
    #: The counter the ledger measures the summary with (the conversation's): a
    #: summarizer that sizes its output by counting tokens itself counts with this
    #: one, so what fits ``max_summary_tokens`` by its count fits by the ledger's.
    #: None: the summarizer's own. ``max_summary_tokens`` already leaves the
    #: counter's stated error as a margin when its counts are estimates
    #: (``summary_service.summary_budget``).
    token_counter: TokenCounter | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.positions is not None and len(self.positions) != len(self.messages):
            raise InvalidArgumentError(
                f"a summary request names {len(self.positions)} positions for {len(self.messages)} messages",
                conversation_id=self.conversation_id,
                argument="positions",
            )

    def positioned(self) -> tuple[tuple[int, Message], ...]:
        """``(position, message)`` for each message: the positions to cite."""
        positions = self.positions
        if positions is None:
            positions = tuple(range(self.from_position, self.from_position + len(self.messages)))
        return tuple(zip(positions, self.messages, strict=True))


@dataclass(frozen=True)
class SummaryResult:
    """A summarizer's answer with its provenance."""

    text: str
    model: str
    prompt_version: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)
    #: A provider's own compaction (``"responses"``, ``"anthropic"``; None: a summary of
    #: contextledger's own): recorded as a native summary, ``payload`` sent as it came
    #: to that provider's format and ``text`` to every other.
    native: str | None = None
    #: The compaction's items or blocks, exactly as the provider gave them.
    payload: tuple[dict[str, Any], ...] | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Turns a previous summary plus new messages into a new summary.

    Raises a subclass of ``contextledger.domain.values.errors.SummarizerError`` on failure:
    ``SummarizerTimeoutError``, ``SummarizerRateLimitedError`` (with ``retry_after``),
    ``SummarizerUnavailableError`` or ``SummarizerOutputError``.
    """

    #: The model name recorded as provenance when the request names none.
    model: str

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...
