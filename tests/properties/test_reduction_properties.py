"""Reduction invariants over random conversations, policies and summarizer timing."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, ReductionPolicy
from contextledger.domain.conversation import SummaryFailure
from tests.support.invariants import RecordingSummarizer, check, check_log, summarize_now

WORDS = ["alpha", "beta", "gamma", "delta", "order", "ticket", "refund", "Lisbon", "42", "ok"]
SYSTEM = "You are a careful assistant."


def text(size: int, seed: int) -> str:
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(size))


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Messages with tool groups of 1-3 parallel calls and results of varied size."""
    out: list[dict[str, Any]] = []
    for t in range(draw(st.integers(5, 60))):
        kind = draw(st.sampled_from(["user", "user", "assistant", "assistant", "tools"]))
        size = draw(st.integers(1, 60))
        if kind != "tools":
            out.append({"role": kind, "content": text(size, t)})
            continue
        ids = [f"c{t}_{k}" for k in range(draw(st.integers(1, 3)))]
        out.append(
            {
                "role": "assistant",
                "content": draw(st.sampled_from([None, "checking"])),
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
                    for i in ids
                ],
            }
        )
        for i in ids:
            out.append({"role": "tool", "tool_call_id": i, "content": text(draw(st.integers(1, 200)), t)})
    return out


POLICIES = st.one_of(
    st.builds(
        lambda t, k: ReductionPolicy(trigger_messages=t, keep_messages=k),
        st.integers(4, 20),
        st.integers(0, 3),
    ),
    st.builds(
        lambda t, k: ReductionPolicy(trigger_tokens=t, keep_tokens=k, max_summary_tokens=64),
        st.integers(300, 1500),
        st.integers(0, 250),
    ),
    st.builds(
        lambda t, k, tt: ReductionPolicy(
            trigger_messages=t, keep_messages=k, trigger_tokens=tt, keep_tokens=tt // 4, max_summary_tokens=64
        ),
        st.integers(6, 20),
        st.integers(1, 4),
        st.integers(400, 1500),
    ),
    st.builds(
        lambda t, k, n: ReductionPolicy(
            trigger_messages=t,
            keep_messages=k,
            summary_mode="layered",
            layered_max_tokens=80,
            max_summary_tokens=40,
            keep_tool_results=n,
        ),
        st.integers(4, 12),
        st.integers(0, 3),
        st.integers(1, 3),
    ),
    st.builds(
        lambda cap, n: ReductionPolicy(
            trigger_messages=12,
            keep_messages=3,
            keep_tool_results=n,
            max_context_tokens=cap,
            max_summary_tokens=64,
        ),
        st.integers(800, 2000),
        st.integers(1, 3),
    ),
    st.builds(
        lambda cap: ReductionPolicy(max_context_tokens=cap, max_summary_tokens=64), st.integers(700, 1500)
    ),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=turns(),
    policy=POLICIES,
    timing=st.lists(st.sampled_from(["now", "later", "fail"]), min_size=1, max_size=20),
)
def test_every_context_stays_valid_and_nothing_is_lost_or_summarized_twice(
    messages: list[dict[str, Any]], policy: ReductionPolicy, timing: list[str]
) -> None:
    summarizer = RecordingSummarizer()
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(SYSTEM, policy=policy)
        appended: list[dict[str, Any]] = []
        previous: list[dict[str, Any]] | None = None
        previous_summaries = previous_dropped = previous_placeholder = -1
        for index, message in enumerate(messages):
            ledger.append(cid, message)
            appended.append(message)
            when = timing[index % len(timing)]
            request = ledger.pending_summary(cid)
            if request is not None and when == "fail":
                ledger.record_summary_failure(
                    request,
                    SummaryFailure(
                        kind="SummarizerUnavailableError", error="503", retryable=True, called_provider=True
                    ),
                )
            elif when == "now":
                summarize_now(ledger, cid, summarizer)
            # One copy of the aggregate per step (each is a deep copy), checked and read
            # here: nothing writes between these reads (one thread, no policy running).
            conversation = ledger.conversation(cid)
            problems = check(ledger, cid, appended, system=SYSTEM, conversation=conversation)
            assert problems == [], problems
            context = ledger.context(cid)
            summaries = ledger.totals(cid).summaries
            state = conversation.state
            if (
                previous is not None
                and previous_summaries == summaries
                and state.dropped_before == previous_dropped
            ):
                # Between reductions the context only grows at its end, except for a
                # placeholder batch.
                changed = context[: len(previous)] != previous
                placeholder_moved = state.placeholder_before != previous_placeholder
                assert not changed or placeholder_moved
            previous, previous_summaries = context, summaries
            previous_dropped = state.dropped_before
            previous_placeholder = state.placeholder_before
        while summarize_now(ledger, cid, summarizer):
            pass
        assert check(ledger, cid, appended, system=SYSTEM) == []
        assert check_log(ledger, cid, appended) == []
        totals = ledger.totals(cid)
        event(f"summaries: {min(totals.summaries, 3)}+")
        state = ledger.conversation(cid).state
        event(f"the cap hides turns now: {state.dropped_before > state.summarized_through + 1}")
        assert summarizer.resent == []  # nothing already summarized was sent again
        assert ledger.totals(cid).summarizer_calls >= len(summarizer.ranges)
