"""ReductionPolicy validation: contradictions get InvalidPolicyError."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.domain import InvalidPolicyError, ReductionPolicy, UsageError


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"trigger_messages": 10, "keep_messages": 10}, "must be smaller"),
        ({"trigger_messages": 10, "keep_messages": 20}, "must be smaller"),
        ({"trigger_tokens": 1000, "keep_tokens": 1000}, "must be smaller"),
        ({"trigger_messages": -1}, "positive"),
        ({"trigger_messages": 0}, "positive"),
        ({"trigger_messages": 10, "keep_messages": -1}, "negative"),
        ({"keep_messages": 5}, "needs trigger_messages"),
        ({"keep_tokens": 5}, "needs trigger_tokens"),
        ({"keep_tool_results": 0}, "at least 1"),
        ({"max_context_tokens": 500}, "max_summary_tokens"),
        ({"max_context_tokens": 3000, "trigger_tokens": 5000, "keep_tokens": 2500}, "keep_tokens plus"),
        ({"summary_mode": "rolling"}, "summary_mode"),
        ({"max_summary_tokens": 4}, "at least 16"),
        ({"trigger_messages": "many"}, "trigger_messages"),
        ({"unknown": 1}, "unknown"),
        ({"strategy": "off", "trigger_messages": 10}, "reduces nothing"),
        ({"strategy": "off", "max_context_tokens": 5000}, "reduces nothing"),
        ({"strategy": "truncate"}, "needs trigger_messages or trigger_tokens"),
        ({"strategy": "drop"}, "strategy"),
        ({"trigger_messages": 10, "summarize_every": 0}, "at least 1"),
        ({"trigger_tokens": 1000, "summarize_every": 5}, "needs trigger_messages"),
        ({"strategy": "truncate", "trigger_messages": 10, "summarize_every": 5}, "strategy 'summarize'"),
        ({"tool_result_batching": False}, "needs keep_tool_results"),
        ({"trigger_when": "at"}, "trigger_when"),
        ({"summary_placement": "tool_message"}, "summary_placement"),
    ],
)
def test_an_invalid_policy_is_refused_with_a_clear_error(fields: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidPolicyError) as caught:
        ReductionPolicy(**fields)
    assert fragment in str(caught.value)
    assert isinstance(caught.value, UsageError)


def test_hybrid_policy_keeps_both_limits() -> None:
    policy = ReductionPolicy(trigger_messages=100, keep_messages=10, trigger_tokens=8000, keep_tokens=2000)
    assert policy.keep_messages_limit == 10
    assert policy.keep_tokens_limit == 2000
    assert policy.summarizes


def test_a_policy_without_triggers_never_summarizes_and_round_trips_as_json() -> None:
    policy = ReductionPolicy(max_context_tokens=4000, keep_tool_results=2)
    assert not policy.summarizes
    assert ReductionPolicy.model_validate_json(policy.model_dump_json()) == policy


def test_the_options_at_their_defaults_dump_as_policies_stored_before_them() -> None:
    # What a policy stored before the options seals and replays as: the same keys.
    before = {
        "trigger_messages",
        "keep_messages",
        "trigger_tokens",
        "keep_tokens",
        "summary_mode",
        "layered_max_tokens",
        "keep_tool_results",
        "max_context_tokens",
        "summarizer_model",
        "max_summary_tokens",
        "summary_placement",
        "token_scope",
    }
    policy = ReductionPolicy(trigger_messages=100, keep_messages=10)
    assert set(policy.model_dump()) == before
    assert ReductionPolicy.model_validate_json(policy.model_dump_json()) == policy
    chosen = ReductionPolicy(
        trigger_messages=100,
        keep_messages=10,
        trigger_when="reached",
        summarize_every=10,
        keep_tool_results=2,
        tool_result_batching=False,
    )
    assert set(chosen.model_dump()) - before == {"trigger_when", "summarize_every", "tool_result_batching"}
    assert ReductionPolicy.model_validate_json(chosen.model_dump_json()) == chosen


def test_the_presets() -> None:
    off = ReductionPolicy.off()
    assert off.strategy == "off" and not off.summarizes and off.max_context_tokens is None
    budget = ReductionPolicy.token_budget()
    assert (budget.trigger_tokens, budget.keep_tokens) == (5000, 4000)
    assert ReductionPolicy.token_budget(2000, 500, keep_tool_results=3).keep_tool_results == 3
    # Given only trigger_tokens, keep_tokens is 0 (the newest group is kept).
    assert ReductionPolicy(trigger_tokens=1000).keep_tokens_limit == 0
