"""Every option of the reducer design keeps the reduction invariants: over random
conversations (tool groups of parallel calls included), each policy option alone and
mixed with the others leaves a context valid in the OpenAI, Anthropic and Gemini
orders, tool-call groups whole, nothing lost from the log and no range summarized
twice."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, ReductionPolicy
from contextledger.testing import anthropic_request_violations, gemini_request_violations
from tests.properties.test_reduction_properties import SYSTEM, turns
from tests.support.invariants import RecordingSummarizer, check, check_log, summarize_now

MESSAGE_TRIGGERS = st.builds(
    lambda t, k: {"trigger_messages": t, "keep_messages": min(k, t - 1)},
    st.integers(3, 20),
    st.integers(0, 6),
)
TOKEN_TRIGGERS = st.builds(
    lambda t, share: {"trigger_tokens": t, "keep_tokens": t * share // 100, "max_summary_tokens": 64},
    st.integers(400, 1500),
    st.integers(0, 60),
)
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "strategy": st.sampled_from(["summarize", "truncate"]),
        "trigger_when": st.sampled_from(["exceeded", "reached"]),
        # (system_prompt merges the summaries into the system prompt, which the
        # invariants' check reads as the first message: it is not among these options.)
        "summary_placement": st.sampled_from(["system_message", "user_message", "assistant_message"]),
        "keep_tool_results": st.integers(1, 3),
        "summary_mode": st.sampled_from(["single", "layered"]),
    },
)


@st.composite
def policies(draw: st.DrawFn) -> ReductionPolicy:
    """A policy mixing the options; ``off()``, the token-budget preset and
    ``summarize_every`` among them."""
    kind = draw(st.sampled_from(["messages", "tokens", "both", "off", "budget"]))
    if kind == "off":
        return ReductionPolicy.off()
    options: dict[str, Any] = draw(OPTIONS)
    if "keep_tool_results" in options:
        options["tool_result_batching"] = draw(st.booleans())
    if kind == "budget":
        options.pop("summary_mode", None)
        return ReductionPolicy.token_budget(
            draw(st.integers(200, 600)), draw(st.integers(50, 400)), max_summary_tokens=64, **options
        )
    if options.get("summary_mode") == "layered":
        options.update(layered_max_tokens=80, max_summary_tokens=40)
    fields: dict[str, Any] = {}
    if kind in ("messages", "both"):
        fields.update(draw(MESSAGE_TRIGGERS))
        if options.get("strategy", "summarize") == "summarize" and draw(st.booleans()):
            fields["summarize_every"] = draw(st.integers(1, 8))
    if kind in ("tokens", "both"):
        tokens = draw(TOKEN_TRIGGERS)
        if options.get("summary_mode") == "layered":
            tokens["max_summary_tokens"] = 40
        fields.update(tokens)
    return ReductionPolicy(**{**options, **fields})


def renders_everywhere(ledger: Ledger, cid: Any) -> list[str]:
    """Violations of the Anthropic and Gemini renderings, with each summary placement."""
    problems: list[str] = []
    for summary in ("system", "user", "assistant"):
        anthropic = ledger.context(cid, format="anthropic", summary=summary)  # type: ignore[arg-type]
        request = {"model": "claude-haiku-4-5", "max_tokens": 100, **anthropic}
        problems += [f"anthropic ({summary}): {p}" for p in anthropic_request_violations(request)]
        gemini = ledger.context(cid, format="gemini", summary=summary)  # type: ignore[arg-type]
        problems += [
            f"gemini ({summary}): {p}"
            for p in gemini_request_violations(
                gemini["contents"], system_instruction=gemini["system_instruction"]
            )
        ]
    return problems


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
@given(messages=turns(), policy=policies(), timing=st.lists(st.sampled_from(["now", "later"]), min_size=1))
def test_every_option_keeps_the_context_valid_and_loses_or_resummarizes_nothing(
    messages: list[dict[str, Any]], policy: ReductionPolicy, timing: list[str]
) -> None:
    summarizer = RecordingSummarizer()
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(SYSTEM, policy=policy)
        appended: list[dict[str, Any]] = []
        for index, message in enumerate(messages):
            ledger.append(cid, message)
            appended.append(message)
            if timing[index % len(timing)] == "now":
                summarize_now(ledger, cid, summarizer)
            problems = check(ledger, cid, appended, system=SYSTEM)
            assert problems == [], problems
            if not ledger.conversation(cid).state.open_calls:
                problems = renders_everywhere(ledger, cid)
                assert problems == [], problems
        while summarize_now(ledger, cid, summarizer):
            pass
        assert check(ledger, cid, appended, system=SYSTEM) == []
        assert check_log(ledger, cid, appended) == []
        assert summarizer.resent == []  # nothing already summarized was sent again
        totals = ledger.totals(cid)
        if policy.strategy != "summarize":
            # Truncation and no reduction never call a summarizer.
            assert summarizer.ranges == [] and totals.summaries == 0
        state = ledger.conversation(cid).state
        event(f"{policy.strategy}: summaries {min(totals.summaries, 3)}+, cut {state.dropped_before > 0}")
