"""The what-if's figures: percentiles by nearest rank, prices by the longest model-name
prefix, price tables from JSON, and the sums over conversations."""

from __future__ import annotations

import pytest

import contextledger as cl
from contextledger.application.auditing.whatif_results import DEFAULT_PRICES, Tally, parse_prices, price_for


def test_percentiles_are_nearest_rank_over_the_turns() -> None:
    tally = Tally()
    for tokens in [50, 10, 40, 20, 30, 60, 70, 80, 90, 100]:
        tally.turn("gpt-4o", tokens, prefix_stable=tokens > 10, cap_hit=tokens == 100)
    figures = tally.figures({})
    assert (figures.turns, figures.tokens_sent) == (10, 550)
    assert (figures.p50_tokens, figures.p95_tokens, figures.max_tokens) == (50, 100, 100)
    assert (figures.prefix_stable_turns, figures.cap_hits) == (9, 1)
    assert figures.unpriced_models == ("gpt-4o",) and figures.context_cost == 0
    empty = Tally().figures({})
    assert (empty.turns, empty.p50_tokens, empty.p95_tokens) == (0, 0, 0)


def test_a_model_is_priced_by_its_longest_known_prefix() -> None:
    assert price_for(DEFAULT_PRICES, "gpt-4o-mini-2024-07-18") == cl.ModelPrice(0.15, 0.60)
    assert price_for(DEFAULT_PRICES, "openai/gpt-4o-2024-08-06") == cl.ModelPrice(2.50, 10.00)
    assert price_for(DEFAULT_PRICES, "llama-3-70b") is None


def test_costs_count_context_tokens_at_input_prices_and_summaries_at_both() -> None:
    tally = Tally()
    tally.turn("gpt-4o-mini", 1_000_000, prefix_stable=False, cap_hit=False)
    tally.call("gpt-4o-mini", 2_000_000, 500_000)
    tally.call("gpt-4o-mini", None, None)  # a failed call: counted, no tokens
    figures = tally.figures(DEFAULT_PRICES)
    assert figures.context_cost == pytest.approx(0.15)
    assert figures.summarizer_calls == 2
    assert figures.summarizer_cost == pytest.approx(2 * 0.15 + 0.5 * 0.60)
    assert figures.summarizer_usage == (cl.SummarizerUsage("gpt-4o-mini", 2, 2_000_000, 500_000, pytest.approx(0.6)),)


@pytest.mark.parametrize(
    "raw",
    [[1, 2], {"gpt-4o": "cheap"}, {"gpt-4o": [1]}, {"gpt-4o": {"in": 1}}, {"gpt-4o": [-1, 2]},
     {"gpt-4o": [True, 2]}, {"gpt-4o": {"input": 1, "output": 2, "cached": 0.5}}],
)
def test_a_bad_price_table_is_a_typed_error(raw: object) -> None:
    with pytest.raises(cl.InvalidArgumentError):
        parse_prices(raw)


def test_a_price_table_reads_both_forms() -> None:
    assert parse_prices({"a": [1, 2], "b": {"input": 0.5}}) == {
        "a": cl.ModelPrice(1.0, 2.0), "b": cl.ModelPrice(0.5, 0.0)
    }
