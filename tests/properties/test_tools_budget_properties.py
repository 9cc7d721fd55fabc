"""Tool definitions cost tokens in every prompt: over generated conversations, the token
trigger settles only once the unsummarized messages plus the tools fit it, and the cap
holds the context with the tools in it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, ReductionPolicy
from contextledger.domain.values.errors import InvalidPolicyError
from tests.support.invariants import RecordingSummarizer, summarize_now

WORDS = ["alpha", "beta", "gamma", "delta", "order", "ticket", "refund", "Lisbon", "42", "ok"]


def text(size: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(size))


def tool(index: int, size: int) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": f"tool_{index}", "description": text(size, index),
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": text(size // 2, index)}}},
    }}


TOOLS = st.lists(st.integers(1, 50), max_size=3).map(lambda sizes: [tool(i, n) for i, n in enumerate(sizes)])
MESSAGES = st.lists(st.integers(1, 80), min_size=10, max_size=50)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tools=TOOLS, sizes=MESSAGES, trigger=st.integers(150, 900), keep=st.integers(0, 300),
       cap=st.one_of(st.none(), st.integers(600, 2000)))
def test_the_token_trigger_and_the_cap_see_messages_plus_tools(
    tools: list[dict[str, Any]], sizes: list[int], trigger: int, keep: int, cap: int | None
) -> None:
    keep = min(keep, trigger - 1)
    if cap is not None:
        keep = min(keep, max(0, cap - 64 - 1))
    # token_scope="messages": the trigger counts the messages and the tools (the whole
    # prompt's scope: tests/properties/test_prompt_budget_properties.py).
    policy = ReductionPolicy(trigger_tokens=trigger, keep_tokens=keep, max_summary_tokens=64,
                             max_context_tokens=cap, token_scope="messages")
    summarizer = RecordingSummarizer()
    with Ledger.open("memory://", run_policy=False) as ledger:
        base = ledger.totals(ledger.start("s")).context_tokens  # priming and system prompt
        cost = ledger.totals(ledger.start("s", tools=tools or None)).tools_tokens
        refused = (cost > 0 and keep + cost >= trigger) or (cap is not None and base + cost >= cap)
        try:
            cid = ledger.start("s", policy=policy, tools=tools or None)
        except InvalidPolicyError:
            assert refused
            event("refused at start")
            return
        assert not refused
        for index, size in enumerate(sizes):
            role = "user" if index % 2 == 0 else "assistant"
            ledger.append(cid, {"role": role, "content": text(size, index)})
            while summarize_now(ledger, cid, summarizer):
                pass
            state = ledger.conversation(cid).state
            unsummarized = [e for e in state.window if e.position > state.summarized_through]
            if state.pending is None and len(unsummarized) > 1:
                # Settled: what is left unsummarized, sent with the tools, fits the trigger.
                assert sum(e.tokens for e in unsummarized) + cost <= trigger
            totals = ledger.totals(cid)
            assert totals.tools_tokens == cost
            if cap is not None:
                assert totals.context_tokens <= cap
        event(f"summaries: {min(ledger.totals(cid).summaries, 3)}+")


def test_a_conversation_without_tools_keeps_its_trigger_as_before() -> None:
    # No tools, token_scope="messages": the trigger counts messages alone, exactly as
    # stored logs were written.
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_tokens=40, token_scope="messages"))
        total = 0
        for index in range(20):
            ledger.append(cid, {"role": "user" if index % 2 == 0 else "assistant", "content": text(3, index)})
            total = ledger.conversation(cid).state.appended_tokens
            if ledger.pending_summary(cid) is not None:
                break
        assert total > 40
        assert ledger.conversation(cid).state.appended_tokens - ledger.conversation(cid).state.window[-1].tokens <= 40


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
