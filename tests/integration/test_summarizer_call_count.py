"""The number of summarizer calls docs/concepts.md gives for a message trigger is the
number a real ledger makes: one per crossing, each summary landing before the next
append."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.testing import ScriptedSummarizer

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def documented_calls(messages: int, trigger: int, keep: int) -> int:
    """The formula of docs/concepts.md."""
    return (messages - keep) // (trigger - keep + 1) if messages > trigger else 0


def calls_made(messages: int, policy: cl.ReductionPolicy) -> int:
    summarizer = ScriptedSummarizer()
    with cl.Ledger.open("memory://", run_policy=False, summarizer=summarizer) as ledger:
        cid = ledger.start("s", policy=policy)
        for n in range(messages):
            ledger.append(cid, {"role": "user", "content": f"note {n}"})
            request = ledger.pending_summary(cid)
            if request is not None:  # the summary lands before the next append
                ledger.record_summary(request, summarizer.summarize(request))
        kinds = [event.kind for event in ledger.replay(cid)]
        assert kinds.count("ThresholdReached") == kinds.count("SummaryCreated") == len(ledger.summaries(cid))
        return len(ledger.summaries(cid))


def test_the_page_gives_this_formula() -> None:
    text = " ".join(CONCEPTS.read_text(encoding="utf-8").split())
    assert "`floor((N - keep_messages) / (trigger_messages - keep_messages + 1))`" in text
    assert "300 messages under a 25/20 policy make 46" in text
    assert "2,000 under the default 100/10 make 21" in text
    assert not re.search(r"ceil\(\(N - trigger", text)


@pytest.mark.parametrize(("messages", "trigger", "keep", "expected"), [
    (300, 25, 20, 46),
    (2000, 100, 10, 21),
    (30, 10, 2, 3),
    (10, 10, 2, 0),
    (11, 10, 2, 1),
    (20, 10, 0, 1),
    (22, 10, 0, 2),
])
def test_a_real_ledger_makes_the_documented_number_of_calls(messages: int, trigger: int, keep: int,
                                                            expected: int) -> None:
    policy = cl.ReductionPolicy(trigger_messages=trigger, keep_messages=keep)
    assert documented_calls(messages, trigger, keep) == expected
    assert calls_made(messages, policy) == expected
