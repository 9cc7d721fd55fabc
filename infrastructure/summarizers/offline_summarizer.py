"""An offline, deterministic, extractive summarizer: no network, no randomness.

It extends the previous summary with one line per salient new message: the first
sentence of each user request and assistant answer, each tool outcome ("tool NAME ->
result"), and sentences carrying decisions or figures. When the result would exceed
``max_summary_tokens`` it drops the oldest, least salient lines first; it never
returns an empty summary for a non-empty range. It counts with the request's
``token_counter`` (the conversation's, which the ledger measures the summary with)
when the request carries one, else with its own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.domain.values.messages import Message

__all__ = ["PROMPT_VERSION", "OfflineSummarizer"]

PROMPT_VERSION = "offline-extractive-v1"

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_DECISION = re.compile(
    r"\b(decid\w*|agree\w*|confirm\w*|must|will|booked|cancel\w*|refund\w*|deadline|prefer\w*)\b|\d",
    re.IGNORECASE,
)
_LINE_CHARS = 160


class _ApproxCounter:
    """Fallback when no counter is given: about four characters a token."""

    reply_priming = 3

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4

    def count_message(self, message: Message) -> int:
        return 3 + self.count_text(message.text)


class OfflineSummarizer(Summarizer):
    """The ``Summarizer`` port without a model: extractive and deterministic."""

    def __init__(
        self, *, token_counter: TokenCounter | None = None, model: str = "offline-extractive"
    ) -> None:
        self.model = model
        self._counter: TokenCounter = token_counter or _ApproxCounter()

    def __repr__(self) -> str:
        return f"OfflineSummarizer(model={self.model!r})"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        # The ledger's counter when the request carries it: the summary must fit
        # max_summary_tokens as the ledger counts it, not as another tokenizer does.
        counter = request.token_counter or self._counter
        count = counter.count_text
        previous = [line for line in (request.previous_summary or "").splitlines() if line.strip()]
        new = _lines(request)
        # What it summarizes as the ledger's gate counts it: each message at its cost
        # in a prompt (its framing included), the previous summary as text.
        input_tokens = count(request.previous_summary or "") + sum(
            counter.count_message(m) for m in request.messages
        )
        # Never longer than what it summarizes (the ledger's quality gate refuses that).
        budget = max(8, min(request.max_summary_tokens, input_tokens))
        # Each line is counted once: what the choices below cost is kept as running
        # sums, so a range of n messages costs n counts, not n squared.
        new_costs = [count(text) + 1 for _, text in new]
        previous_costs = [count(line) + 1 for line in previous]
        # Up to half the budget keeps the previous summary (its newest lines); the new
        # lines get the rest, dropping the least salient first (the newest of equally
        # salient ones first: the order never changes as lines go, so it is sorted once).
        reserve = min(sum(previous_costs), budget // 2)
        dropped: set[int] = set()
        total = sum(new_costs)
        for index in sorted(range(len(new)), key=lambda i: (new[i][0], -i)):
            if total <= budget - reserve:
                break
            dropped.add(index)
            total -= new_costs[index]
        chosen_new = [line for i, line in enumerate(new) if i not in dropped]
        kept_previous: list[str] = []
        room = budget - total
        for line, cost in zip(reversed(previous), reversed(previous_costs), strict=True):
            if cost > room:
                break
            kept_previous.insert(0, line)
            room -= cost
        lines = kept_previous + [text for _, text in chosen_new]
        text = "\n".join(lines).strip()
        # Joined, the lines may count a little more than their costs summed (an
        # estimating counter rounds each count up and scales the newlines too).
        tokens = count(text)
        while len(lines) > 1 and tokens > budget:
            lines.pop(0)
            text = "\n".join(lines).strip()
            tokens = count(text)
        if not text or tokens > budget:
            text = _fallback(request, budget, count)
            tokens = count(text)
        return SummaryResult(
            text=text,
            model=self.model,
            prompt_version=PROMPT_VERSION,
            input_tokens=input_tokens,
            output_tokens=tokens,
            latency_ms=(time.perf_counter() - started) * 1000,
        )


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    first = _SENTENCE.split(text, maxsplit=1)[0] if text else ""
    return first[:_LINE_CHARS].rstrip() + ("..." if len(first) > _LINE_CHARS else "")


def _lines(request: SummaryRequest) -> list[tuple[int, str]]:
    """(salience, line) for the new messages, in order."""
    out: list[tuple[int, str]] = []
    names: dict[str, str] = {}
    for position, message in request.positioned():
        if message.tool_calls:
            for call in message.tool_calls:
                names[call.id] = call.function.name
        text = message.text
        if message.role == "tool":
            name = names.get(message.tool_call_id or "", "tool")
            out.append((3, f"[{position}] tool {name} -> {_first_sentence(text)[:80]}"))
            continue
        if message.tool_calls and not text.strip():
            called = ", ".join(c.function.name for c in message.tool_calls)
            out.append((1, f"[{position}] assistant called {called}"))
            continue
        sentence = _first_sentence(text)
        if not sentence:
            continue
        salience = 2 if message.role == "user" else 1
        decisions = [s for s in _SENTENCE.split(" ".join(text.split())) if _DECISION.search(s)]
        if decisions and decisions[0][:_LINE_CHARS] not in sentence:
            sentence = f"{sentence} {decisions[0][:_LINE_CHARS]}"
            salience += 1
        elif _DECISION.search(sentence):
            salience += 1
        out.append((salience, f"[{position}] {message.role}: {sentence}"))
    return out


def _fallback(request: SummaryRequest, budget: int, count: Callable[[str], int]) -> str:
    """A non-empty summary that fits, whatever the messages were."""
    text = f"Messages {request.from_position}-{request.through_position}: " + " ".join(
        _first_sentence(m.text) for m in request.messages if m.text.strip()
    )
    while count(text) > budget and len(text) > 20:
        text = text[: int(len(text) * 0.8)].rstrip()
    return text
