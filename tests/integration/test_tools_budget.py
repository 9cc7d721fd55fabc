"""Tool definitions are part of every prompt: the token trigger and the cap count them.

By example here; tests/properties/test_tools_budget_properties.py checks the same rules
over generated conversations."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.application import Ledger, ReductionPolicy
from contextledger.domain.values.errors import InvalidPolicyError

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
TURNS = [
    {"role": "user", "content": "What is the weather in Paris today?"},
    {"role": "assistant", "content": "Sunny and 21 degrees in Paris."},
    {"role": "user", "content": "And in Lisbon, tomorrow morning?"},
    {"role": "assistant", "content": "Cloudy, 17 degrees, light wind from the west."},
]


def message_tokens_after(ledger: Ledger) -> list[int]:
    """Unsummarized message tokens after each of TURNS (no tools, no trigger)."""
    cid = ledger.start("Weather.")
    out = []
    for message in TURNS:
        ledger.append(cid, message)
        out.append(ledger.conversation(cid).state.appended_tokens)
    return out


def tools_tokens(ledger: Ledger) -> int:
    return ledger.totals(ledger.start("Weather.", tools=[WEATHER_TOOL])).tools_tokens


def test_the_token_trigger_fires_on_messages_plus_tools_where_messages_alone_stay_below() -> None:
    with Ledger.open("memory://", run_policy=False) as ledger:
        after = message_tokens_after(ledger)
        tools = tools_tokens(ledger)
        assert tools > 0
        # Messages alone never cross it in these turns; with the tools, the last turn does.
        policy = ReductionPolicy(trigger_tokens=after[-1] + tools - 1)
        with_tools = ledger.start("Weather.", policy=policy, tools=[WEATHER_TOOL])
        without = ledger.start("Weather.", policy=policy)
        for index, message in enumerate(TURNS):
            ledger.append(with_tools, message)
            ledger.append(without, message)
            fired = ledger.pending_summary(with_tools) is not None
            assert fired == (index == len(TURNS) - 1)
            assert ledger.pending_summary(without) is None
        pending = ledger.conversation(with_tools).state.pending
        assert pending is not None and (pending.from_position, pending.through_position) == (0, 2)
        # The event keeps its meaning: unsummarized_tokens are the messages' tokens alone.
        threshold = [e.data for e in ledger.replay(with_tools) if e.kind == "ThresholdReached"]
        assert [(e["limit"], e["unsummarized_tokens"]) for e in threshold] == [("tokens", after[-1])]


def test_changing_tools_moves_the_trigger_and_the_cap_counts_them() -> None:
    with Ledger.open("memory://", run_policy=False) as ledger:
        after = message_tokens_after(ledger)
        tools = tools_tokens(ledger)
        cid = ledger.start("Weather.", policy=ReductionPolicy(trigger_tokens=after[-1] + tools - 1))
        for message in TURNS:
            ledger.append(cid, message)
        assert ledger.pending_summary(cid) is None
        # The same messages plus the tools now sent with them cross the trigger.
        assert ledger.change_tools(cid, [WEATHER_TOOL]) is True
        assert ledger.pending_summary(cid) is not None

        cap = ReductionPolicy(max_context_tokens=tools + 200, max_summary_tokens=64)
        capped = ledger.start("Weather.", policy=cap, tools=[WEATHER_TOOL])
        for _ in range(20):
            for message in TURNS:
                ledger.append(capped, message)
                totals = ledger.totals(capped)
                assert totals.tools_tokens == tools
                assert totals.context_tokens <= cap.max_context_tokens  # type: ignore[operator]


def test_tools_that_leave_the_token_trigger_no_room_are_refused_and_nothing_is_written() -> None:
    with Ledger.open("memory://", run_policy=False) as ledger:
        tools = tools_tokens(ledger)
        # token_scope="messages": the tools alone against the trigger (with "prompt", the
        # system prompt and priming count too: tests/integration/test_prompt_budget.py).
        tight = ReductionPolicy(trigger_tokens=tools + 50, keep_tokens=50, token_scope="messages")
        with pytest.raises(InvalidPolicyError, match="trigger_tokens"):
            ledger.start("Weather.", policy=tight, tools=[WEATHER_TOOL])
        cid = ledger.start("Weather.", policy=tight)
        version = ledger.conversation(cid).version
        with pytest.raises(InvalidPolicyError, match="tool definitions"):
            ledger.change_tools(cid, [WEATHER_TOOL])
        assert ledger.conversation(cid).version == version and ledger.tools(cid) == []
        roomy = ledger.start("Weather.", policy=ReductionPolicy(trigger_tokens=tools + 51, keep_tokens=50,
                                                                    token_scope="messages"),
                             tools=[WEATHER_TOOL])
        version = ledger.conversation(roomy).version
        with pytest.raises(InvalidPolicyError, match="keep_tokens"):
            ledger.change_policy(roomy, tight)
        assert ledger.conversation(roomy).version == version
