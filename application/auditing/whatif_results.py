"""Typed, frozen results of a what-if replay (``Ledger.simulate``), and the price table.

Figures are over *turns*: the appends after which the model would be called (see
``contextledger.application.auditing.whatif``). A side's figures hold what each turn's context
cost (sum, median, 95th percentile, largest), how many turns began with the previous
turn's context (prefix-stable: a provider's prompt cache stays warm), how many turns
the hard cap dropped unsummarized messages from the view, and the summarizer's calls
and tokens, with an estimated cost from a price table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from contextledger.domain.values.errors import InvalidArgumentError
from contextledger.domain.values.policy import ReductionPolicy

__all__ = [
    "DEFAULT_PRICES",
    "ConversationWhatIf",
    "ModelPrice",
    "RunFigures",
    "SummarizerUsage",
    "Tally",
    "WhatIfReport",
    "combine",
    "parse_prices",
    "price_for",
]


@dataclass(frozen=True)
class ModelPrice:
    """What a model charges, in US dollars per million tokens."""

    input_per_million: float
    output_per_million: float = 0.0


#: An example table (US dollars per million tokens, list prices as published in 2025),
#: not an authority: pass your own (``prices=``, ``--prices FILE``) for real estimates.
#: Models are matched by the longest prefix of their name, as context windows are.
DEFAULT_PRICES: Mapping[str, ModelPrice] = {
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-5-mini": ModelPrice(0.25, 2.00),
    "gpt-5": ModelPrice(1.25, 10.00),
    "offline-extractive": ModelPrice(0.0, 0.0),
}


def price_for(prices: Mapping[str, ModelPrice], model: str) -> ModelPrice | None:
    """The price of ``model`` in ``prices`` (longest prefix, after any ``provider/``)."""
    name = model.lower().rsplit("/", 1)[-1]
    best = max((p for p in prices if name.startswith(p.lower())), key=len, default=None)
    return prices[best] if best is not None else None


def parse_prices(raw: Any) -> dict[str, ModelPrice]:
    """A price table from JSON: ``{"model": {"input": 0.15, "output": 0.6}}`` or
    ``{"model": [0.15, 0.6]}`` (dollars per million tokens). ``InvalidArgumentError``
    on anything else."""
    if isinstance(raw, Mapping) and all(isinstance(v, ModelPrice) for v in raw.values()):
        return {str(k): v for k, v in raw.items()}
    if not isinstance(raw, Mapping):
        raise InvalidArgumentError("prices must be an object of model name -> price", argument="prices")
    table: dict[str, ModelPrice] = {}
    for model, value in raw.items():
        if isinstance(value, Mapping) and set(value) <= {"input", "output"} and "input" in value:
            pair = (value["input"], value.get("output", 0.0))
        elif isinstance(value, list | tuple) and len(value) == 2:
            pair = (value[0], value[1])
        else:
            raise InvalidArgumentError(
                f'the price of {model!r} must be {{"input": X, "output": Y}} or [X, Y] '
                "(dollars per million tokens)",
                argument="prices",
            )
        if not all(isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 for x in pair):
            raise InvalidArgumentError(
                f"the price of {model!r} must be numbers of 0 or more", argument="prices"
            )
        table[str(model)] = ModelPrice(float(pair[0]), float(pair[1]))
    return table


@dataclass(frozen=True)
class SummarizerUsage:
    """The summarizer calls of one model: tokens in and out, and their estimated cost
    (None: the model is not in the price table)."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None


@dataclass(frozen=True)
class RunFigures:
    """One side (recorded or simulated) of a what-if, over the same turns."""

    turns: int
    tokens_sent: int
    p50_tokens: int
    p95_tokens: int
    max_tokens: int
    #: Turns (after the first of each conversation) whose context begins with the
    #: previous turn's whole context.
    prefix_stable_turns: int
    #: Turns whose context left out unsummarized messages because of the hard cap
    #: (under ``strategy="truncate"``, also those truncation left out: both cut the view).
    cap_hits: int
    summaries: int
    summarizer_calls: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    summarizer_usage: tuple[SummarizerUsage, ...]
    #: Estimated cost of the contexts sent (input price of each conversation's model;
    #: models without a price are left out and named in ``unpriced_models``).
    context_cost: float
    summarizer_cost: float
    unpriced_models: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if k != "summarizer_usage"}
        data["summarizer_usage"] = [vars(u) for u in self.summarizer_usage]
        data["unpriced_models"] = list(self.unpriced_models)
        return data


def _percentile(sorted_values: list[int], p: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class Tally:
    """What one side of the replay counts as it goes (mutable; ``figures`` freezes it)."""

    tokens: list[int] = field(default_factory=list)
    prefix_stable: int = 0
    cap_hits: int = 0
    summaries: int = 0
    #: model -> [calls, input tokens, output tokens]
    usage: dict[str, list[int]] = field(default_factory=dict)
    #: conversation model -> tokens sent
    sent_by_model: dict[str, int] = field(default_factory=dict)

    def turn(self, model: str, tokens: int, *, prefix_stable: bool, cap_hit: bool) -> None:
        self.tokens.append(tokens)
        self.prefix_stable += prefix_stable
        self.cap_hits += cap_hit
        self.sent_by_model[model] = self.sent_by_model.get(model, 0) + tokens

    def call(self, model: str, input_tokens: int | None, output_tokens: int | None) -> None:
        row = self.usage.setdefault(model, [0, 0, 0])
        row[0] += 1
        row[1] += input_tokens or 0
        row[2] += output_tokens or 0

    def merge(self, other: Tally) -> None:
        self.tokens.extend(other.tokens)
        self.prefix_stable += other.prefix_stable
        self.cap_hits += other.cap_hits
        self.summaries += other.summaries
        for model, (calls, tin, tout) in other.usage.items():
            row = self.usage.setdefault(model, [0, 0, 0])
            row[0] += calls
            row[1] += tin
            row[2] += tout
        for model, tokens in other.sent_by_model.items():
            self.sent_by_model[model] = self.sent_by_model.get(model, 0) + tokens

    def figures(self, prices: Mapping[str, ModelPrice]) -> RunFigures:
        ordered = sorted(self.tokens)
        unpriced: set[str] = set()
        context_cost = 0.0
        for model, tokens in self.sent_by_model.items():
            price = price_for(prices, model)
            if price is None:
                unpriced.add(model)
            else:
                context_cost += tokens * price.input_per_million / 1e6
        usage: list[SummarizerUsage] = []
        for model, (calls, tin, tout) in sorted(self.usage.items()):
            price = price_for(prices, model)
            cost = None
            if price is None:
                unpriced.add(model)
            else:
                cost = (tin * price.input_per_million + tout * price.output_per_million) / 1e6
            usage.append(SummarizerUsage(model, calls, tin, tout, cost))
        return RunFigures(
            turns=len(self.tokens),
            tokens_sent=sum(self.tokens),
            p50_tokens=_percentile(ordered, 50),
            p95_tokens=_percentile(ordered, 95),
            max_tokens=ordered[-1] if ordered else 0,
            prefix_stable_turns=self.prefix_stable,
            cap_hits=self.cap_hits,
            summaries=self.summaries,
            summarizer_calls=sum(u.calls for u in usage),
            summarizer_input_tokens=sum(u.input_tokens for u in usage),
            summarizer_output_tokens=sum(u.output_tokens for u in usage),
            summarizer_usage=tuple(usage),
            context_cost=round(context_cost, 6),
            summarizer_cost=round(sum(u.cost or 0.0 for u in usage), 6),
            unpriced_models=tuple(sorted(unpriced)),
        )


@dataclass(frozen=True)
class ConversationWhatIf:
    """One conversation, recorded against simulated, turn by turn.

    ``simulated`` is None when the conversation could not be simulated (``reason``
    says why: a fork, a message the candidate cap cannot hold, an edit that does not replay) or
    was not reached before the call budget ran out. ``complete`` is False when the
    budget stopped the replay inside it: both sides then cover the turns replayed."""

    conversation_id: UUID
    key: str | None
    model: str
    recorded: RunFigures
    simulated: RunFigures | None
    recorded_turn_tokens: tuple[int, ...]
    simulated_turn_tokens: tuple[int, ...]
    turns_in_log: int
    complete: bool = True
    reason: str | None = None

    @property
    def difference(self) -> int:
        """Simulated minus recorded tokens sent over the replayed turns (0 if not simulated)."""
        return 0 if self.simulated is None else self.simulated.tokens_sent - self.recorded.tokens_sent

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": str(self.conversation_id),
            "key": self.key,
            "model": self.model,
            "complete": self.complete,
            "reason": self.reason,
            "turns_in_log": self.turns_in_log,
            "difference": self.difference,
            "recorded": self.recorded.to_dict(),
            "simulated": None if self.simulated is None else self.simulated.to_dict(),
            "recorded_turn_tokens": list(self.recorded_turn_tokens),
            "simulated_turn_tokens": list(self.simulated_turn_tokens),
        }


@dataclass(frozen=True)
class WhatIfReport:
    """What a candidate policy would have done to the stored conversations.

    ``recorded`` and ``simulated`` sum the simulated conversations over the same turns;
    ``complete`` is False when the summarizer call budget stopped the replay
    (``stopped`` says where)."""

    policy: ReductionPolicy
    summarizer_model: str
    conversations: tuple[ConversationWhatIf, ...]
    recorded: RunFigures
    simulated: RunFigures
    complete: bool
    stopped: str | None
    budget_calls: int | None
    prices: Mapping[str, ModelPrice]

    @property
    def simulated_conversations(self) -> tuple[ConversationWhatIf, ...]:
        return tuple(c for c in self.conversations if c.simulated is not None)

    @property
    def not_simulated(self) -> tuple[ConversationWhatIf, ...]:
        return tuple(c for c in self.conversations if c.simulated is None)

    def largest_differences(self, n: int = 5) -> list[ConversationWhatIf]:
        """The ``n`` simulated conversations whose tokens sent change the most."""
        ranked = sorted(
            self.simulated_conversations, key=lambda c: (-abs(c.difference), str(c.conversation_id))
        )
        return ranked[:n]

    def to_dict(self, *, turns: bool = True) -> dict[str, Any]:
        """A JSON-ready form (``turns``: with every conversation's per-turn tokens)."""

        def conversation(c: ConversationWhatIf) -> dict[str, Any]:
            data = c.to_dict()
            if not turns:
                data.pop("recorded_turn_tokens")
                data.pop("simulated_turn_tokens")
            return data

        return {
            "policy": self.policy.model_dump(mode="json", exclude_defaults=True),
            "summarizer_model": self.summarizer_model,
            "complete": self.complete,
            "stopped": self.stopped,
            "budget_calls": self.budget_calls,
            "recorded": self.recorded.to_dict(),
            "simulated": self.simulated.to_dict(),
            "largest_differences": [
                {
                    "conversation_id": str(c.conversation_id),
                    "key": c.key,
                    "difference": c.difference,
                    "recorded_tokens": c.recorded.tokens_sent,
                    "simulated_tokens": c.simulated.tokens_sent if c.simulated else None,
                }
                for c in self.largest_differences()
            ],
            "conversations": [conversation(c) for c in self.conversations],
            "prices": {k: [v.input_per_million, v.output_per_million] for k, v in self.prices.items()},
        }


def combine(
    conversations: Iterable[tuple[Tally, Tally]], prices: Mapping[str, ModelPrice]
) -> tuple[RunFigures, RunFigures]:
    """The recorded and simulated figures over several conversations' tallies."""
    recorded, simulated = Tally(), Tally()
    for rec, sim in conversations:
        recorded.merge(rec)
        simulated.merge(sim)
    return recorded.figures(prices), simulated.figures(prices)
