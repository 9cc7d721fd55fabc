"""A fork's summaries show the summaries of the history it shares, marked as inherited
(the log that holds each), as its transcript shows the shared messages; they count in
the fork's totals and once in the global totals; the read models and the async twin
answer alike."""

from __future__ import annotations

import asyncio
from uuid import UUID

from contextledger.application import AsyncLedger, Ledger, ReductionPolicy, SummaryRequest, SummaryResult
from contextledger.infrastructure.readmodels import attach_read_models
from tests.support.readmodel_checks import assert_read_models_equal_ledger

POLICY = ReductionPolicy(trigger_messages=4, keep_messages=1)


class Brief:
    model = "brief"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        words = " ".join(str(m.content) for m in request.messages)
        return SummaryResult(text=f"Said: {words}", model=self.model, prompt_version="v1")


def say(ledger: Ledger, cid: UUID, words: list[str]) -> None:
    for word in words:
        ledger.append(cid, {"role": "user", "content": word})
        assert ledger.wait_idle(20)


def stored_summaries(ledger: Ledger) -> int:
    return sum(1 for cid in ledger.conversation_ids() for e in ledger.replay(cid) if e.kind == "SummaryCreated")


def test_a_fork_lists_and_counts_the_summaries_it_inherited() -> None:
    with Ledger.open("memory://", summarizer=Brief()) as ledger:
        models = attach_read_models(ledger)
        source = ledger.start("You are brief.", policy=POLICY)
        say(ledger, source, ["apples", "pears", "plums", "figs", "dates", "kiwis", "limes", "nuts", "yams", "oats"])
        made = ledger.summaries(source)
        assert len(made) >= 2
        past = made[0].version  # the version of the first summary: a fork from there has one
        fork = ledger.fork(source)
        fork_past = ledger.fork(source, past)
        grandchild = ledger.fork(fork)
        say(ledger, fork, ["olives", "grapes", "melons", "limes"])
        assert ledger.wait_idle(20)

        inherited = [s for s in ledger.summaries(fork) if s.inherited_from is not None]
        assert [(s.version, s.text, s.inherited_from) for s in inherited] == [
            (s.version, s.text, source) for s in made
        ]
        own = [s for s in ledger.summaries(fork) if s.inherited_from is None]
        assert own and ledger.summaries(fork) == inherited + own
        # What the fork's context rests on is among them.
        assert any(s.text in str(ledger.context(fork)) for s in ledger.summaries(fork) if s.valid)
        assert [(s.version, s.inherited_from) for s in ledger.summaries(fork_past)] == [(past, source)]
        # A fork of a fork names the log that holds each summary.
        assert [s.inherited_from for s in ledger.summaries(grandchild)] == [source] * len(made)

        assert ledger.totals(fork).summaries == len(made) + len(own)
        assert ledger.totals(fork_past).summaries == 1
        assert ledger.totals(grandchild).summaries == len(made)
        assert ledger.totals().summaries == stored_summaries(ledger)
        assert ledger.wait_idle(20)
        assert_read_models_equal_ledger(models, ledger)
        assert models.token_totals.global_totals().summaries == stored_summaries(ledger)


def test_an_edit_in_the_fork_takes_back_an_inherited_summary_there_only() -> None:
    with Ledger.open("memory://", summarizer=Brief()) as ledger:
        models = attach_read_models(ledger)
        source = ledger.start("You are brief.", policy=POLICY)
        say(ledger, source, ["apples", "pears", "plums", "figs", "dates"])
        fork = ledger.fork(source)
        ledger.retract(fork, 1, reason="not pears")  # inside the inherited summary
        assert ledger.wait_idle(20)
        [taken_back] = [s for s in ledger.summaries(fork) if s.inherited_from == source]
        assert not taken_back.valid and taken_back.invalidated_in == fork
        assert taken_back.invalidated_reason == "retracted"
        assert all(s.valid for s in ledger.summaries(source))
        assert "pears" not in str(ledger.context(fork))
        # The source's own later edit leaves the fork's copy as it stood at the fork.
        other = ledger.fork(source)
        ledger.retract(source, 2, reason="not plums")
        assert ledger.wait_idle(20)
        [mark] = [s for s in ledger.summaries(source) if not s.valid]
        assert mark.invalidated_in == source and mark.inherited_from is None
        assert all(s.valid for s in ledger.summaries(other) if s.inherited_from == source)
        assert_read_models_equal_ledger(models, ledger)


def test_the_async_twin_lists_and_counts_them_alike() -> None:
    async def run() -> None:
        async with AsyncLedger.open("memory://", summarizer=Brief()) as ledger:
            source = await ledger.start("You are brief.", policy=POLICY)
            for word in ["apples", "pears", "plums", "figs", "dates"]:
                await ledger.append(source, {"role": "user", "content": word})
                await ledger.wait_idle()
            fork = await ledger.fork(source)
            listed = await ledger.summaries(fork)
            assert listed and listed == ledger.sync.summaries(fork)
            assert all(s.inherited_from == source for s in listed)
            assert (await ledger.totals(fork)).summaries == len(listed)

    asyncio.run(run())
