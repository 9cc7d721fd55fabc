"""``token_scope="prompt"``: over generated conversations, once the policy has fired and
its summary has landed, what the context's prompt costs (system prompt, summaries, tool
definitions, messages, overhead and priming: ``totals().context_tokens``) stays within
``trigger_tokens``, unless the newest message alone leaves nothing to cut."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, ReductionPolicy
from contextledger.domain.folding.budget import keep_offset
from contextledger.domain.values.errors import InvalidPolicyError
from tests.properties.test_tools_budget_properties import TOOLS, text
from tests.support.invariants import RecordingSummarizer, summarize_now

MESSAGES = st.lists(st.integers(1, 80), min_size=10, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tools=TOOLS, sizes=MESSAGES, system=st.integers(0, 120), trigger=st.integers(150, 900),
       keep=st.integers(0, 300), mode=st.sampled_from(["single", "layered"]), later=st.integers(0, 200),
       placement=st.sampled_from(["system_message", "system_prompt", "user_message"]))
# keep_tokens leaves the summary too little room under the trigger: the kept part must
# make room for it, or the prompt stays over the trigger with nothing pinned.
@example(tools=[], sizes=[1, 1, 1, 1, 1, 1, 73, 2, 12, 1], system=0, trigger=150, keep=129,
         mode="single", later=11, placement="system_message")
def test_once_a_summary_landed_the_whole_prompt_stays_within_the_trigger(
    tools: list[dict[str, Any]], sizes: list[int], system: int, trigger: int, keep: int, later: int,
    mode: Literal["single", "layered"], placement: Literal["system_message", "system_prompt", "user_message"],
) -> None:
    keep = min(keep, trigger - 1)
    policy = ReductionPolicy(trigger_tokens=trigger, keep_tokens=keep, max_summary_tokens=64,
                             layered_max_tokens=128, summary_mode=mode, summary_placement=placement)
    assert policy.token_scope == "prompt"
    prompt = text(system, 7) if system else None
    summarizer = RecordingSummarizer()
    with Ledger.open("memory://", run_policy=False) as ledger:
        # What no summary can shrink: priming, the system prompt and the tools.
        base = ledger.totals(ledger.start(prompt, tools=tools or None)).context_tokens
        try:
            cid = ledger.start(prompt, policy=policy, tools=tools or None)
        except InvalidPolicyError:
            assert base + keep >= trigger
            event("refused at start")
            return
        assert base + keep < trigger
        for index, size in enumerate(sizes):
            ledger.append(cid, {"role": "user" if index % 2 == 0 else "assistant", "content": text(size, index)})
            if index == len(sizes) // 2:
                # Halfway, the system prompt changes (refused if the budget cannot hold it).
                try:
                    ledger.change_system_prompt(cid, text(later, 3) if later else None)
                except InvalidPolicyError:
                    event("system prompt change refused")
            while summarize_now(ledger, cid, summarizer):
                pass
            state = ledger.conversation(cid).state
            unsummarized = [e for e in state.window if e.position > state.summarized_through]
            if state.pending is None and state.summaries_created and len(unsummarized) > 1:
                # Fired, landed and settled: the prompt is what the policy promises.
                assert ledger.totals(cid).context_tokens <= trigger
        event(f"summaries: {min(ledger.totals(cid).summaries, 3)}+")


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 60), min_size=6, max_size=30), trigger=st.integers(300, 1500),
       share=st.integers(0, 90), scope=st.sampled_from(["prompt", "messages"]))
def test_a_provider_counting_three_times_the_estimate_holds_the_keep_budget(
    sizes: list[int], trigger: int, share: int, scope: Literal["prompt", "messages"]
) -> None:
    # A Claude conversation is counted by estimate; here the provider reports three
    # times it on every call. Each time its count crosses the trigger, the range pinned
    # leaves kept messages that cost at most keep_tokens by the provider's count (with
    # the prompt's fixed part, when the policy counts the whole prompt), unless the
    # newest message alone is over it: the budget holds by the count that fired.
    keep = trigger * share // 100
    policy = ReductionPolicy(trigger_tokens=trigger, keep_tokens=keep, max_summary_tokens=64, token_scope=scope)
    summarizer = RecordingSummarizer()
    with Ledger.open("memory://", run_policy=False) as ledger:
        try:
            cid = ledger.start("Keep notes.", model="claude-haiku-4-5", policy=policy)
        except InvalidPolicyError:
            event("refused at start")
            return
        for index, size in enumerate(sizes):
            ledger.append(cid, {"role": "user" if index % 2 == 0 else "assistant", "content": text(size, index)})
            estimate = ledger.conversation(cid).context_tokens()  # ours, with no report
            ledger.commands.record_usage(cid, 3 * estimate, 1)
            state = ledger.conversation(cid).state
            unsummarized = [e for e in state.window if e.position > state.summarized_through]
            offset = keep_offset(state)
            # What the trigger counts: the provider's count of the prompt, or (counting
            # the messages only) the messages plus what the provider counted above us.
            counted = 3 * estimate if scope == "prompt" else sum(e.tokens for e in unsummarized) + 2 * estimate
            if counted > trigger and len(unsummarized) > 1:
                # Crossed by the provider's count: what stays unsummarized once the
                # pinned range (if any: the kept part may fit already) is summarized
                # costs at most keep_tokens by that count.
                through = state.pending.through_position if state.pending else state.summarized_through
                kept = [e for e in unsummarized if e.position > through]
                event("pinned" if state.pending else "nothing to pin")
                if len(kept) > 1:
                    assert 3 * (sum(e.tokens for e in kept) + offset) <= keep
                else:
                    event("only the newest message kept")
            while summarize_now(ledger, cid, summarizer):
                pass
        event(f"summaries: {min(ledger.totals(cid).summaries, 3)}+")
