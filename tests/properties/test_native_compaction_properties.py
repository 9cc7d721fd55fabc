"""Whatever a conversation holds and wherever the providers compact it, a native
compaction keeps the log whole and every format valid: every message stays in the
transcript, nothing is retracted, the digests verify, the Responses input carries the
newest compaction item as it came, and no other format carries an opaque payload."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.testing import (
    ScriptedSummarizer,
    anthropic_request_violations,
    openai_context_violations,
    responses_input_violations,
)

STEPS = st.lists(st.sampled_from(["user", "assistant", "call", "compact"]), min_size=1, max_size=16)


def _append(ledger: cl.Ledger, cid: Any, step: str, n: int) -> None:
    if step in ("user", "assistant"):
        ledger.append(cid, {"type": "message", "role": step, "content": f"{step} {n}"})
    elif step == "call":
        ledger.extend(
            cid,
            [
                {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n}"},
            ],
        )
    else:
        item = {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"opaque-{n}-payload"}
        ledger.append(cid, {"object": "response", "model": "gpt-4.1", "output": [item]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_native_compaction_keeps_the_log_whole_and_every_format_valid(steps: list[str]) -> None:
    with cl.Ledger.open("memory://", summarizer=ScriptedSummarizer(), run_policy=False) as ledger:
        cid = ledger.start("s", model="gpt-4.1")
        for n, step in enumerate(steps):
            _append(ledger, cid, step, n)
        messages = sum({"user": 1, "assistant": 1, "call": 2, "compact": 0}[s] for s in steps)
        assert len(ledger.transcript(cid)) == messages
        assert ledger.totals(cid).retracted_messages == 0
        assert ledger.verify(cid).ok
        summaries = ledger.summaries(cid)
        assert all(s.native == "responses" for s in summaries)
        items = ledger.context(cid, format="responses")["input"]
        assert responses_input_violations(items) == []
        payloads = [s.payload[0]["encrypted_content"] for s in summaries if s.payload]
        if summaries:
            assert items[0]["encrypted_content"] == payloads[-1]
        chat = ledger.context(cid)
        assert openai_context_violations(chat) == []
        body = ledger.context(cid, format="anthropic")
        if body["messages"]:  # an empty conversation has no request to send
            assert anthropic_request_violations({"model": "m", "max_tokens": 5, **body}) == []
        others = json.dumps([chat, body, ledger.context(cid, format="gemini")])
        assert "opaque-" not in others and "[compaction]" not in others
