"""``LedgerContract``: what the ledger promises on any store (this module imports pytest)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar
from uuid import uuid4

import pytest

from contextledger.application.facade.ledger import Ledger
from contextledger.application.shared.ports import SummaryRequest, SummaryResult
from contextledger.domain.values.errors import (
    ConversationNotFoundError,
    DuplicateConversationError,
    IdempotencyConflictError,
    InvalidMessageError,
    StaleSummaryError,
)
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.testing.openai_rules import assert_valid_openai_context

__all__ = ["LedgerContract"]

CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}},
        {"id": "c2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}},
    ],
}


def _summary(request: SummaryRequest) -> SummaryResult:
    text = f"summary {request.from_position}-{request.through_position}"
    return SummaryResult(
        text=text, model="test-summarizer", prompt_version="t1", input_tokens=11, output_tokens=3
    )


class LedgerContract(ABC):
    """Abstract suite (pytest collects only subclasses): appends, contexts, transcripts,
    idempotent retries, typed errors that write nothing, past versions, summaries,
    reopening, concurrent writers, totals, policy changes and usage, on one store.

    A subclass overrides the ``url`` fixture (a fresh, empty store per test); to open
    the ledger another way (settings, a store of your own) override ``open_ledger``.
    Set ``persistent = False`` for a store that does not outlive its ledger. Run it
    against your store::

        # tests/test_my_store.py
        import pytest
        import contextledger as cl
        from contextledger.testing.contracts import LedgerContract


        class TestMyStore(LedgerContract):
            @pytest.fixture
            def url(self, tmp_path) -> str:
                return f"sqlite:///{tmp_path / 'ledger.db'}"

            def open_ledger(self, url: str) -> cl.Ledger:
                return cl.Ledger.open(url, run_policy=False, settings=cl.Settings(compress=True))
    """

    #: False for a store that lives inside one ledger (``memory://``): reopening is
    #: skipped and concurrent writers share one ledger.
    persistent: ClassVar[bool] = True

    @pytest.fixture
    @abstractmethod
    def url(self) -> str:
        """The URL of a fresh, empty store."""

    def open_ledger(self, url: str) -> Ledger:
        """A ledger on ``url`` without a background policy (the suite summarizes itself)."""
        return Ledger.open(url, run_policy=False)

    @pytest.fixture
    def ledger(self, url: str) -> Iterator[Ledger]:
        """An open ledger on the store, closed after the test."""
        with self.open_ledger(url) as ledger:
            yield ledger

    def test_start_append_and_context_show_every_message_in_order(self, ledger: Ledger) -> None:
        cid = ledger.start("You are terse.", model="gpt-4o-mini")
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "hi"},
            CALL,
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
            {"role": "tool", "tool_call_id": "c2", "content": "page"},
            {"role": "assistant", "content": "done"},
        ]
        positions = [ledger.append(cid, m) for m in messages]
        assert positions == [0, 1, 2, 3, 4]
        context = ledger.context(cid)
        assert context == [{"role": "system", "content": "You are terse."}, *messages]
        assert_valid_openai_context(context)

    def test_transcript_entries_are_typed_and_complete(self, ledger: Ledger) -> None:
        cid = ledger.start(None)
        ledger.append(cid, {"role": "user", "content": "a"}, client_message_id="m-1")
        ledger.append(cid, {"role": "assistant", "content": "b"})
        entries = ledger.transcript(cid)
        assert [e.position for e in entries] == [0, 1]
        assert [e.message for e in entries] == [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
        ]
        assert entries[0].client_message_id == "m-1" and entries[0].tokens > 0
        assert entries[1].version > entries[0].version
        with pytest.raises(AttributeError):
            entries[0].position = 5  # type: ignore[misc]

    def test_a_retried_append_with_the_same_client_id_is_a_no_op(self, ledger: Ledger) -> None:
        cid = ledger.start("s")
        first = ledger.append(cid, {"role": "user", "content": "pay 10"}, client_message_id="req-7")
        ledger.append(cid, {"role": "assistant", "content": "ok"})
        again = ledger.append(cid, {"role": "user", "content": "pay 10"}, client_message_id="req-7")
        assert first == again == 0
        assert len(ledger.transcript(cid)) == 2
        # The same id for another message is a conflict, and writes nothing.
        with pytest.raises(IdempotencyConflictError):
            ledger.append(cid, {"role": "user", "content": "pay 99"}, client_message_id="req-7")
        assert len(ledger.transcript(cid)) == 2
        other = ledger.start("s")
        assert ledger.append(other, {"role": "user", "content": "x"}, client_message_id="req-7") == 0

    def test_bad_input_gets_a_typed_error_and_writes_nothing(self, ledger: Ledger) -> None:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "a"})
        version = ledger.conversation(cid).version
        bad: list[Any] = [
            {"role": "tool", "tool_call_id": "nope", "content": "x"},
            {"role": "x"},
            "text",
            {"role": "user", "content": None},
        ]
        for message in bad:
            with pytest.raises(InvalidMessageError):
                ledger.append(cid, message)
        ledger.append(cid, CALL)
        with pytest.raises(InvalidMessageError):
            ledger.append(cid, {"role": "user", "content": "too early"})
        with pytest.raises(InvalidMessageError):
            ledger.extend(
                cid,
                [
                    {"role": "tool", "tool_call_id": "c1", "content": "r"},
                    {"role": "user", "content": "still open: c2"},
                ],
            )
        assert ledger.conversation(cid).version == version + 1
        assert len(ledger.transcript(cid)) == 2

    def test_unknown_conversations_and_versions_are_not_found(self, ledger: Ledger) -> None:
        with pytest.raises(ConversationNotFoundError):
            ledger.append(uuid4(), {"role": "user", "content": "x"})
        with pytest.raises(ConversationNotFoundError):
            ledger.context(uuid4())
        with pytest.raises(ConversationNotFoundError):
            ledger.transcript(uuid4())
        cid = ledger.start("s")
        with pytest.raises(ConversationNotFoundError):
            ledger.context(cid, version=99)
        with pytest.raises(DuplicateConversationError):
            ledger.start("s", conversation_id=cid)

    def test_context_at_a_past_version_is_what_stood_then(self, ledger: Ledger) -> None:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=6, keep_messages=2))
        seen: dict[int, list[Any]] = {}
        for i in range(30):
            if i == 15:  # versions before this keep the old policy's view
                ledger.change_policy(
                    cid, ReductionPolicy(trigger_messages=4, keep_messages=1, summary_mode="layered")
                )
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
            request = ledger.pending_summary(cid)
            if request is not None:
                ledger.record_summary(request, _summary(request))
            seen[ledger.conversation(cid).version] = ledger.context(cid)
        for version, context in seen.items():
            assert ledger.context(cid, version=version) == context

    def test_summaries_are_recorded_once_with_provenance_and_digests_verify(self, ledger: Ledger) -> None:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=8, keep_messages=3))
        for i in range(12):
            ledger.append(cid, {"role": "user", "content": f"fact {i}"})
        request = ledger.pending_summary(cid)
        assert request is not None and request.previous_summary is None
        expected = [f"fact {i}" for i in range(request.through_position + 1)]
        assert [m.text for m in request.messages] == expected
        ledger.record_summary(request, _summary(request))
        with pytest.raises(StaleSummaryError):
            ledger.record_summary(request, _summary(request))
        [summary] = ledger.summaries(cid)
        assert (summary.from_position, summary.model, summary.input_tokens) == (0, "test-summarizer", 11)
        totals = ledger.totals(cid)
        assert totals.summaries == 1 and totals.summarizer_calls == 1
        assert totals.messages == 12 and totals.context_tokens < totals.full_history_tokens
        assert ledger.verify(cid).ok

    def test_reopening_the_store_changes_nothing(self, url: str) -> None:
        if not self.persistent:
            pytest.skip("this store does not outlive its ledger")
        with self.open_ledger(url) as first:
            cid = first.start("s", policy=ReductionPolicy(trigger_messages=5, keep_messages=1))
            for i in range(9):
                first.append(cid, {"role": "user", "content": f"m{i}"})
            before = (first.context(cid), first.transcript(cid), first.totals(cid))
        with self.open_ledger(url) as second:
            after = (second.context(cid), second.transcript(cid), second.totals(cid))
        assert after == before

    def test_concurrent_threads_all_land_with_gap_free_positions(self, url: str) -> None:
        # Two ledgers on one store (a store inside one ledger is shared instead).
        with self.open_ledger(url) as a, self.open_ledger(url) if self.persistent else a as b:
            cid = a.start("s")
            errors: list[BaseException] = []

            def writer(ledger: Ledger, name: str) -> None:
                try:
                    for i in range(25):
                        ledger.append(cid, {"role": "user", "content": f"{name}-{i}"})
                except BaseException as exc:  # surfaced below
                    errors.append(exc)

            threads = [
                threading.Thread(target=writer, args=(ledger, f"w{n}"))
                for n, ledger in enumerate([a, b, a, b])
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            transcript = a.transcript(cid)
            assert [e.position for e in transcript] == list(range(100))
            assert sorted(e.message["content"] for e in transcript) == sorted(
                f"w{n}-{i}" for n in range(4) for i in range(25)
            )

    def test_conversation_ids_and_global_totals_cover_every_conversation(self, ledger: Ledger) -> None:
        ids = [ledger.start("s") for _ in range(3)]
        for cid in ids:
            ledger.append(cid, {"role": "user", "content": "x"})
        assert set(ids) <= set(ledger.conversation_ids())
        totals = ledger.totals()
        assert totals.conversations >= 3 and totals.messages >= 3

    def test_policy_changes_are_versioned_and_used_from_then_on(self, ledger: Ledger) -> None:
        cid = ledger.start("s")
        for i in range(6):
            ledger.append(cid, {"role": "user", "content": f"m{i}"})
        assert ledger.pending_summary(cid) is None
        assert ledger.change_policy(cid, ReductionPolicy(trigger_messages=4, keep_messages=1))
        request = ledger.pending_summary(cid)
        assert request is not None and request.through_position == 4

    def test_provider_usage_is_recorded_against_the_estimate(self, ledger: Ledger) -> None:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "hello there"})
        estimate = ledger.totals(cid).context_tokens
        ledger.record_usage(cid, prompt_tokens=estimate, completion_tokens=7)
        events = [e for e in ledger.replay(cid) if e.kind == "UsageRecorded"]
        assert events[0].data["estimated_prompt_tokens"] == estimate
        assert ledger.totals(cid).provider_prompt_tokens == estimate
