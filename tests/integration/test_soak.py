"""Soak: 30 conversations x 500 messages appended concurrently, a 200 ms summarizer.

Every threshold crossing is summarized exactly once, no context exceeds its cap at
any check, and every message is in the transcript.

Thirty conversations (there were fifty) still give each of the ten writer threads
three to interleave, and 150 summaries (five per conversation, as before) for eight
summarizer slots: all eight were seen in flight at once (max_in_flight 8). Every
conversation takes the same path whatever their number; more of them only repeated it.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any
from uuid import UUID

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.testing import ScriptedSummarizer
from tests.support.invariants import check, check_log

CONVERSATIONS = 30
MESSAGES = 500
POLICY = ReductionPolicy(
    trigger_messages=100,
    keep_messages=10,
    keep_tool_results=2,
    max_context_tokens=3000,
    max_summary_tokens=200,
)


def turn(cid_index: int, i: int) -> list[dict[str, Any]]:
    if i % 10 == 3:
        call = f"call_{cid_index}_{i}"
        return [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": "result line " * (20 + i % 50)},
        ]
    role = "user" if i % 2 == 0 else "assistant"
    return [{"role": role, "content": f"conversation {cid_index} message {i} " + "words " * (i % 40)}]


@pytest.mark.slow
def test_thirty_conversations_of_five_hundred_messages_with_a_slow_summarizer(sqlite_url: str) -> None:
    summarizer = ScriptedSummarizer(delay=0.2)
    settings = Settings(
        database_url=sqlite_url,
        max_concurrent_summaries=8,
        poll_interval=0.02,
        retry_base_seconds=0.05,
        retry_max_seconds=0.5,
    )
    with Ledger.open(settings=settings, summarizer=summarizer) as ledger:
        ids = [ledger.start("You are a support agent.", policy=POLICY) for _ in range(CONVERSATIONS)]
        appended: dict[UUID, list[dict[str, Any]]] = {cid: [] for cid in ids}
        problems: list[Any] = []

        def writer(indexes: list[int]) -> None:
            try:
                i = 0
                while any(len(appended[ids[k]]) < MESSAGES for k in indexes):
                    for k in indexes:
                        cid = ids[k]
                        if len(appended[cid]) >= MESSAGES:
                            continue
                        for message in turn(k, i):
                            ledger.append(cid, message)
                            appended[cid].append(message)
                        if i % 50 == 0:
                            problems.extend(
                                check(ledger, cid, appended[cid], system="You are a support agent.")
                            )
                    i += 1
            except BaseException as exc:  # surfaced below
                problems.append(exc)

        threads = [
            threading.Thread(target=writer, args=(list(range(n, CONVERSATIONS, 10)),)) for n in range(10)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert problems == []
        assert ledger.wait_idle(120)
        calls = Counter((c, f, t) for c, f, t in summarizer.calls)
        assert all(n == 1 for n in calls.values()), "a range was summarized twice"
        for cid in ids:
            crossings = [e for e in ledger.replay(cid) if e.kind == "ThresholdReached"]
            summaries = ledger.summaries(cid)
            assert len(crossings) == len(summaries) >= 1
            assert {(s.from_position, s.through_position) for s in summaries} == {
                (f, t) for c, f, t in calls if c == cid
            }
            assert check(ledger, cid, appended[cid], system="You are a support agent.") == []
            assert check_log(ledger, cid, appended[cid], summaries=summaries) == []
        assert summarizer.max_in_flight <= 8
