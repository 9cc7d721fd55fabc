"""An edit races a summarizer call in flight: the late summary is rejected, never
applied, and the summary made afterwards holds nothing retracted."""

from __future__ import annotations

import threading

import pytest

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult
from contextledger.testing import assert_valid_openai_context as assert_valid


class BlockedSummarizer:
    """The first call blocks until released; every call's input is kept."""

    model = "blocked"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.inputs: list[list[str]] = []

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.inputs.append([str(m.content) for m in request.messages])
        if len(self.inputs) == 1:
            self.entered.set()
            assert self.release.wait(60), "the test never released the summarizer"
        text = "Summary: " + ", ".join(str(m.content) for m in request.messages)
        return SummaryResult(text=text, model=self.model, prompt_version="b1")


@pytest.mark.parametrize("how", ["retract", "edit", "rewind"])
def test_an_edit_during_a_summarizer_call_rejects_the_late_summary(sqlite_url: str, how: str) -> None:
    summarizer = BlockedSummarizer()
    settings = Settings(database_url=sqlite_url, poll_interval=0.02, fallback_after_attempts=None)
    policy = ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)
    with Ledger.open(settings=settings, summarizer=summarizer) as ledger:
        cid = ledger.start("sys", policy=policy)
        for i in range(7):
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"note-{i}"})
        assert summarizer.entered.wait(30), "the summarizer was never called"
        assert "note-1" in summarizer.inputs[0]
        if how == "retract":
            ledger.retract(cid, 1, reason="wrong")
            assert ledger.pending_summary(cid) is None  # 6 messages left: under the trigger
            ledger.append(cid, {"role": "user", "content": "note-7"})  # crosses it again
        elif how == "edit":
            ledger.edit(cid, 1, {"role": "assistant", "content": "fixed-1"})
        else:
            ledger.rewind(cid, 0)
            for i in range(1, 8):
                ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"redo-{i}"})
        summarizer.release.set()
        assert ledger.wait_idle(30)

        kinds = [e.kind for e in ledger.replay(cid)]
        assert kinds.count("SummaryCreated") == 1  # the late one was rejected, a new one made
        [summary] = ledger.summaries(cid)
        assert "note-1" not in summary.text
        assert len(summarizer.inputs) == 2 and "note-1" not in summarizer.inputs[1]
        context = ledger.context(cid)
        assert_valid(context)
        assert "note-1" not in str(context)
        assert ledger.verify(cid).ok
