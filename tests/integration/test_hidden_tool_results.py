"""A tool result a framework filtered from the model (``append(..., hidden=True)``) is
shown as its placeholder, and the summarizer is given that placeholder too, unless the
policy's ``summarize_hidden`` is set; the log keeps it, covered by the digest chain."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult
from contextledger.domain import InvalidMessageError, Message
from contextledger.domain.values.reduction import Entry
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import FakeOpenAIServer, Reply
from contextledger.testing.openai_rules import assert_valid_openai_context

SECRET = "ACCOUNT-NUMBER-99817 " * 20
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2)


class Recording:
    """A summarizer that keeps the requests it was sent."""

    model = "recording"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text="The account was looked up.", model=self.model, prompt_version="r1")


def call(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}


def converse(ledger: Ledger, policy: ReductionPolicy = POLICY) -> Any:
    """A turn whose tool result (position 2) is hidden, then enough turns to summarize it."""
    cid = ledger.start("You look things up.", policy=policy)
    ledger.append(cid, {"role": "user", "content": "Look up my account."})
    ledger.append(cid, call(0))
    ledger.append(cid, {"role": "tool", "tool_call_id": "call_0", "content": SECRET}, hidden=True)
    ledger.append(cid, {"role": "assistant", "content": "Found it."})
    return cid


def more_turns(ledger: Ledger, cid: Any, n: int = 4) -> None:
    for i in range(n):
        ledger.append(cid, {"role": "user", "content": f"Question {i}."})
        ledger.append(cid, {"role": "assistant", "content": f"Answer {i}."})


def test_the_context_shows_a_placeholder_and_the_group_stays_valid(shared_url: str) -> None:
    with Ledger.open(shared_url, summarizer=Recording()) as ledger:
        cid = converse(ledger)
        context = ledger.context(cid)
        assert_valid_openai_context(context)
        assert SECRET not in json.dumps(context)
        [tool] = [m for m in context if m["role"] == "tool"]
        assert tool["tool_call_id"] == "call_0"
        assert "lookup result omitted from context" in str(tool["content"])
        assert ledger.totals(cid).context_tokens == ledger.working_memory(cid).tokens
        # the log keeps the whole result
        assert ledger.transcript(cid)[2].message["content"] == SECRET


def test_the_summarizer_gets_the_placeholder_not_the_hidden_content(shared_url: str) -> None:
    recording = Recording()
    with Ledger.open(shared_url, summarizer=recording) as ledger:
        cid = converse(ledger)
        more_turns(ledger, cid)
        assert ledger.wait_idle(30)
        assert recording.requests
        sent = [m for r in recording.requests for m in r.messages]
        assert any(m.role == "tool" and m.tool_call_id == "call_0" for m in sent)
        assert all(SECRET not in str(m.content) for m in sent)
        assert ledger.summaries(cid)
        assert ledger.verify(cid).ok


def test_with_summarize_hidden_the_summarizer_gets_the_content(shared_url: str) -> None:
    recording = Recording()
    policy = ReductionPolicy(trigger_messages=6, keep_messages=2, summarize_hidden=True)
    with Ledger.open(shared_url, summarizer=recording) as ledger:
        cid = converse(ledger, policy)
        more_turns(ledger, cid)
        assert ledger.wait_idle(30)
        sent = [m for r in recording.requests for m in r.messages]
        assert any(m.content == SECRET for m in sent)
        assert SECRET not in json.dumps(ledger.context(cid))
        assert ledger.verify(cid).ok


def test_the_openai_summarizer_prompt_leaves_the_hidden_content_out(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply("The account was looked up."), Reply("Questions were answered."))
    summarizer = OpenAISummarizer(api_key="sk-test-0123456789", base_url=fake_openai.base_url, timeout=5)
    settings = Settings(database_url="memory://", poll_interval=0.02, fallback_after_attempts=None)
    with Ledger.open(settings=settings, summarizer=summarizer) as ledger:
        cid = converse(ledger)
        more_turns(ledger, cid)
        assert ledger.wait_idle(20)
        assert ledger.summaries(cid)
    assert fake_openai.requests
    for sent in fake_openai.requests:
        assert "ACCOUNT-NUMBER" not in json.dumps(sent.body)


def test_the_flag_is_in_the_log_and_only_a_tool_result_can_carry_it(sqlite_url: str) -> None:
    with Ledger.open(sqlite_url, summarizer=Recording()) as ledger:
        cid = converse(ledger)
        with pytest.raises(InvalidMessageError):
            ledger.append(cid, {"role": "user", "content": "hi"}, hidden=True)
        appended = [e.data for e in ledger.replay(cid) if e.kind == "MessageAppended"]
        # a message appended without it is stored exactly as before the flag existed
        assert [e.get("hidden") for e in appended] == [None, None, True, None]
    # reopened, the fold shows the same context
    with Ledger.open(sqlite_url, summarizer=Recording()) as ledger:
        assert SECRET not in json.dumps(ledger.context(cid))
        assert ledger.verify(cid).ok


def test_the_dumps_of_what_was_stored_before_are_unchanged() -> None:
    """Seals and snapshots cover these dumps: without the new options they are as before."""
    assert "summarize_hidden" not in ReductionPolicy(trigger_messages=6).model_dump()
    assert ReductionPolicy(trigger_messages=6, summarize_hidden=True).model_dump()["summarize_hidden"]
    entry = Entry(position=0, version=2, message=Message(role="user", content="hi"), tokens=5)
    assert "hidden" not in entry.model_dump() and "hidden" not in entry.model_dump_json()
    assert Entry.model_validate(entry.model_dump()) == entry


def test_a_what_if_asks_the_summarizer_what_the_live_policy_asked(sqlite_url: str) -> None:
    """A replay builds its requests as the live policy does: a hidden result's
    placeholder, the transcript positions of what it covers after a retraction."""
    live = Recording()
    with Ledger.open(sqlite_url, summarizer=live) as ledger:
        cid = converse(ledger)
        ledger.retract(cid, 3, reason="wrong answer")
        more_turns(ledger, cid)
        ledger.wait_idle()
        replayed = Recording()
        report = ledger.simulate(POLICY, summarizer=replayed)
    assert live.requests and replayed.requests
    assert SECRET not in repr(replayed.requests)
    asked = [(r.from_position, r.through_position, r.positions, r.messages) for r in live.requests]
    assert [(r.from_position, r.through_position, r.positions, r.messages) for r in replayed.requests] == asked
    assert report.simulated.summarizer_calls == report.recorded.summarizer_calls
