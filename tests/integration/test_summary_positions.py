"""Summaries cite the transcript positions of the messages they summarize, also when
retractions left gaps in the range: the request carries each message's position."""

from __future__ import annotations

import re
from uuid import uuid4

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult
from contextledger.domain import InvalidArgumentError, Message
from contextledger.infrastructure.summarizers.offline_summarizer import OfflineSummarizer
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import FakeOpenAIServer, Reply

POLICY = ReductionPolicy(trigger_messages=5, keep_messages=1)


def gapped(ledger: Ledger) -> object:
    """Positions 0-7, 1 and 3 retracted before the policy fires: the pinned range
    0-6 holds 0, 2, 4, 5 and 6."""
    cid = ledger.start("You are brief.", policy=POLICY)
    ledger.extend(cid, [{"role": "user", "content": f"Fact number {n} is decided."} for n in range(2)])
    ledger.retract(cid, 1)
    ledger.extend(cid, [{"role": "user", "content": f"Fact number {n} is decided."} for n in range(2, 4)])
    ledger.retract(cid, 3)
    ledger.extend(cid, [{"role": "user", "content": f"Fact number {n} is decided."} for n in range(4, 8)])
    return cid


def cited(text: str) -> dict[int, int]:
    """Which fact each ``[position]`` label of a summary or prompt names."""
    return {int(p): int(n) for p, n in re.findall(r"\[(\d+)\] user: Fact number (\d+)", text)}


class Recording:
    """A summarizer that keeps the requests it was sent."""

    model = "recording"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text="Facts were decided.", model=self.model, prompt_version="r1")


def test_the_request_carries_each_message_at_its_position() -> None:
    recording = Recording()
    with Ledger.open("memory://", summarizer=recording) as ledger:
        gapped(ledger)
        assert ledger.wait_idle(20)
    [request] = recording.requests
    assert (request.from_position, request.through_position) == (0, 6)
    assert request.positions == (0, 2, 4, 5, 6)
    assert [(p, m.text) for p, m in request.positioned()] == [
        (n, f"Fact number {n} is decided.") for n in (0, 2, 4, 5, 6)
    ]


def test_the_offline_summary_cites_the_transcript_positions() -> None:
    with Ledger.open("memory://", summarizer=OfflineSummarizer()) as ledger:
        cid = gapped(ledger)
        assert ledger.wait_idle(20)
        [summary] = ledger.summaries(cid)
    # The summary keeps what fits its budget, each line labelled with its position.
    labels = cited(summary.text)
    assert len(labels) >= 3 and set(labels) <= {0, 2, 4, 5, 6}
    assert all(position == fact for position, fact in labels.items())


def test_the_openai_prompt_cites_the_transcript_positions(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply("Facts 0, 2, 4 and 5 were decided."))
    summarizer = OpenAISummarizer(api_key="sk-test-0123456789", base_url=fake_openai.base_url, timeout=5)
    settings = Settings(database_url="memory://", poll_interval=0.02, fallback_after_attempts=None)
    with Ledger.open(settings=settings, summarizer=summarizer) as ledger:
        gapped(ledger)
        assert ledger.wait_idle(20)
    [sent] = fake_openai.requests
    prompt = sent.body["messages"][-1]["content"]
    assert cited(prompt) == {0: 0, 2: 2, 4: 4, 5: 5, 6: 6}


def test_a_request_without_positions_takes_its_messages_as_consecutive() -> None:
    # A request built as before positions existed (a custom caller or summarizer).
    messages = tuple(Message.from_openai({"role": "user", "content": f"Fact number {n} is decided."})
                     for n in range(3))
    request = SummaryRequest(conversation_id=uuid4(), from_position=7, through_position=9, messages=messages,
                             previous_summary=None, model="m", max_summary_tokens=100, idempotency_key="k")
    assert [p for p, _ in request.positioned()] == [7, 8, 9]
    labels = cited(OfflineSummarizer().summarize(request).text)
    assert labels and all(position - 7 == fact for position, fact in labels.items())


def test_positions_must_match_the_messages() -> None:
    message = Message.from_openai({"role": "user", "content": "hi"})
    with pytest.raises(InvalidArgumentError, match="2 positions for 1 messages"):
        SummaryRequest(conversation_id=uuid4(), from_position=0, through_position=1, messages=(message,),
                       previous_summary=None, model="m", max_summary_tokens=100, idempotency_key="k",
                       positions=(0, 1))
