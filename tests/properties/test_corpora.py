"""Every conversation of the shared corpora, through several policies: zero violations."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from contextledger.application import Ledger, ReductionPolicy
from tests.conftest import CORPORA
from tests.support.invariants import RecordingSummarizer, check, check_log, summarize_now

FILES = ["tools/taubench_airline_gpt4o.jsonl", "tools/tooltalk.jsonl", "tools/sgd_tools.jsonl",
         "tools/taskmaster4_coffee.jsonl", "plain/hh_rlhf_harmless_test.jsonl", "plain/sgd_plain.jsonl"]

POLICIES = {
    "messages": ReductionPolicy(trigger_messages=8, keep_messages=3, keep_tool_results=2),
    # token_scope="messages": budgets below some corpora's system prompts, which the
    # whole prompt's scope refuses (tests/properties/test_prompt_budget_properties.py).
    "tokens+cap": ReductionPolicy(trigger_tokens=300, keep_tokens=100, max_summary_tokens=200,
                                  max_context_tokens=4500, keep_tool_results=1, token_scope="messages"),
    "layered-hybrid": ReductionPolicy(trigger_messages=10, keep_messages=2, trigger_tokens=900,
                                      keep_tokens=250, summary_mode="layered",
                                      layered_max_tokens=120, max_summary_tokens=60, token_scope="messages"),
}


def load(name: str) -> list[dict[str, Any]]:
    path = CORPORA / name
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"corpus missing in CI: {path}")
        pytest.skip(f"corpus missing: {path}")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def split_system(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    if messages and messages[0]["role"] == "system":
        return messages[0]["content"], messages[1:]
    return None, messages


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@pytest.mark.parametrize("name", FILES)
def test_every_corpus_conversation_keeps_every_invariant(name: str, policy_name: str) -> None:
    records = load(name)
    plain = name.startswith("plain/")
    summarizer = RecordingSummarizer()
    checked = 0
    with Ledger.open("memory://", run_policy=False) as ledger:
        for number, record in enumerate(records):
            system, messages = split_system(record["messages"])
            cid = ledger.start(system, model="gpt-4o", policy=POLICIES[policy_name])
            appended: list[dict[str, Any]] = []
            for index, message in enumerate(messages):
                ledger.append(cid, message)
                appended.append(message)
                # Summaries land late every third turn, as a slow summarizer's would.
                if index % 3 != 1:
                    summarize_now(ledger, cid, summarizer)
                if not plain or index % 4 == 0:
                    problems = check(ledger, cid, appended, system=system)
                    assert problems == [], (record["id"], index, problems)
                    checked += 1
            while summarize_now(ledger, cid, summarizer):
                pass
            assert check(ledger, cid, appended, system=system) == [], record["id"]
            if not plain or number % 10 == 0:
                assert check_log(ledger, cid, appended) == [], record["id"]
    assert summarizer.resent == []
    assert checked > len(records)
    assert summarizer.ranges, "the policy never fired: the corpus did not exercise reduction"
