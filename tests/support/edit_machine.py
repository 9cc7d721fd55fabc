"""A hypothesis state machine over a ledger: appends, edits, forks and summaries
(on time, late and stale), checking after every step that nothing retracted reaches
the model and that every past version replays exactly."""

from __future__ import annotations

import copy
import re
from typing import Any
from uuid import UUID, uuid4

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from contextledger.application import Ledger, ReductionPolicy, SummaryRequest, SummaryResult
from contextledger.application.projections import ReadModelRunner
from contextledger.domain import (
    InvalidEditError,
    RetractedPositionError,
    StaleSummaryError,
    SummaryQualityError,
    UnknownPositionError,
)
from contextledger.domain.folding.queries import fixed_tokens, tail_index, view_tokens
from contextledger.domain.folding.sums import full_tool_results, tail_tokens, visible_sum
from contextledger.infrastructure.readmodels import SQLReadModels
from contextledger.testing import assert_valid_openai_context as assert_valid
from tests.support.readmodel_checks import assert_conversation_matches, catch_up_through_committed

WORD = re.compile(r"w\d+")

POLICIES = [
    ReductionPolicy(trigger_messages=4, keep_messages=2),
    ReductionPolicy(trigger_messages=3, keep_messages=1, summary_mode="layered",
                    max_summary_tokens=40, layered_max_tokens=60),
    ReductionPolicy(trigger_messages=6, keep_messages=2, keep_tool_results=1),
    # A cap small enough to drop whole groups from the view between summaries.
    ReductionPolicy(trigger_messages=14, keep_messages=2, max_context_tokens=150, max_summary_tokens=40),
]


class Model:
    """What one conversation should hold: its live messages by position."""

    def __init__(self) -> None:
        self.live: dict[int, dict[str, Any]] = {}
        self.next_position = 0
        #: Words that must never reach the model again (retracted or replaced).
        self.dead: set[str] = set()

    def group_of(self, position: int) -> list[int]:
        positions = sorted(self.live)
        index = positions.index(position)
        start = index
        while start > 0 and self.live[positions[start]]["role"] == "tool":
            start -= 1
        end = start + 1
        while end < len(positions) and self.live[positions[end]]["role"] == "tool":
            end += 1
        return positions[start:end]

    def kill(self, positions: list[int]) -> None:
        for position in positions:
            self.dead.update(WORD.findall(str(self.live.pop(position))))


class EditMachine(RuleBasedStateMachine):
    """Subclass with ``ledger`` set (one ledger serves every example); with
    ``read_models`` and ``runner`` set too, the SQL read models are brought up to date
    at the end of every example and must answer what the ledger answers."""

    ledger: Ledger
    read_models: SQLReadModels | None = None
    runner: ReadModelRunner | None = None

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[UUID, Model] = {}
        self.cid: UUID | None = None
        self.counter = 0
        #: Context by (conversation, version), as ``context()`` returned it then.
        self.seen: dict[tuple[UUID, int], list[dict[str, Any]]] = {}
        #: Words each recorded summary was made from (its own input and what it re-folded).
        self.inputs: dict[tuple[UUID, int], set[str]] = {}
        self.in_flight: list[tuple[SummaryRequest, set[str]]] = []
        #: The model as it stood at each remembered version (forks at a past version).
        self.model_at: dict[tuple[UUID, int], Model] = {}

    # -- helpers ------------------------------------------------------------------------

    @property
    def model(self) -> Model:
        assert self.cid is not None
        return self.models[self.cid]

    def word(self) -> str:
        self.counter += 1
        return f"w{self.counter}"

    def remember(self) -> None:
        assert self.cid is not None
        memory = self.ledger.working_memory(self.cid)
        self.seen[(self.cid, memory.version)] = memory.messages
        self.model_at[(self.cid, memory.version)] = copy.deepcopy(self.model)

    def request_words(self, request: SummaryRequest) -> set[str]:
        assert self.cid is not None
        words = {w for m in request.messages for w in WORD.findall(str(m.to_openai()))}
        if request.previous_summary is not None:
            for layer in self.ledger.conversation(self.cid).state.summaries:
                if layer.link is not None:
                    words |= self.inputs.get((layer.link.origin or self.cid, layer.link.version), set())
        return words

    def record(self, request: SummaryRequest, words: set[str]) -> bool:
        assert self.cid is not None
        result = SummaryResult(text=f"sum{self.counter}", model="scripted", prompt_version="m1")
        try:
            self.ledger.record_summary(request, result)
        except (StaleSummaryError, SummaryQualityError) as exc:
            event(f"summary rejected: {type(exc).__name__}")
            return False
        event("summary recorded")
        version = self.ledger.conversation(self.cid).version
        created = [e for e in self.ledger.replay(self.cid) if e.kind == "SummaryCreated"][-1].version
        self.inputs[(self.cid, created)] = words
        assert version >= created
        return True

    # -- rules --------------------------------------------------------------------------

    @initialize(policy=st.sampled_from(POLICIES))
    def start(self, policy: ReductionPolicy) -> None:
        self.cid = self.ledger.start("system", policy=policy)
        self.models[self.cid] = Model()
        self.remember()

    @rule(role=st.sampled_from(["user", "assistant"]))
    def append_text(self, role: str) -> None:
        message = {"role": role, "content": self.word()}
        assert self.cid is not None
        position = self.ledger.append(self.cid, message)
        self.model.live[position] = message
        self.model.next_position = position + 1
        self.remember()

    @rule(turns=st.integers(1, 4))
    def append_turns(self, turns: int) -> None:
        messages = [
            {"role": role, "content": self.word()} for _ in range(turns) for role in ("user", "assistant")
        ]
        assert self.cid is not None
        positions = self.ledger.extend(self.cid, messages)
        for position, message in zip(positions, messages, strict=True):
            self.model.live[position] = message
        self.model.next_position = positions[-1] + 1
        self.remember()

    @rule(calls=st.integers(1, 2))
    def append_tool_group(self, calls: int) -> None:
        ids = [f"c{self.word()}" for _ in range(calls)]
        group = [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
                ],
            },
            *({"role": "tool", "tool_call_id": i, "content": self.word()} for i in ids),
        ]
        assert self.cid is not None
        positions = self.ledger.extend(self.cid, group)
        for position, message in zip(positions, group, strict=True):
            self.model.live[position] = message
        self.model.next_position = positions[-1] + 1
        self.remember()

    @precondition(lambda self: self.model.live)
    @rule(data=st.data())
    def retract(self, data: st.DataObject) -> None:
        position = data.draw(st.sampled_from(sorted(self.model.live)))
        expected = self.model.group_of(position)
        assert self.cid is not None
        assert self.ledger.retract(self.cid, position, reason="test") == expected
        self.model.kill(expected)
        self.remember()

    @precondition(lambda self: any(m.get("content") for m in self.model.live.values()))
    @rule(data=st.data())
    def edit(self, data: st.DataObject) -> None:
        choices = sorted(p for p, m in self.model.live.items() if m.get("content"))
        position = data.draw(st.sampled_from(choices))
        # one to four words: an edit changes what the message costs, too
        words = data.draw(st.integers(1, 4))
        new = {**self.model.live[position], "content": " ".join(self.word() for _ in range(words))}
        assert self.cid is not None
        assert self.ledger.edit(self.cid, position, new)
        self.model.dead.update(WORD.findall(str(self.model.live[position].get("content"))))
        self.model.live[position] = new
        self.remember()

    @precondition(lambda self: self.model.live)
    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        position = data.draw(st.sampled_from(sorted(self.model.live)))
        after = sorted(p for p in self.model.live if p > position)
        assert self.cid is not None
        if after and self.model.live[after[0]]["role"] == "tool":
            try:
                self.ledger.rewind(self.cid, position)
            except InvalidEditError:
                return
            raise AssertionError("a rewind that splits a group was accepted")
        assert self.ledger.rewind(self.cid, position) == after
        self.model.kill(after)
        self.remember()

    @precondition(lambda self: self.model.live)
    @rule()
    def pop(self) -> None:
        expected = self.model.group_of(max(self.model.live))
        messages = [self.model.live[p] for p in expected]
        assert self.cid is not None
        popped = self.ledger.pop(self.cid)
        assert [m.get("content") for m in popped] == [m.get("content") for m in messages]
        self.model.kill(expected)
        self.remember()

    @precondition(lambda self: len(self.model.live) > 3)
    @rule()
    def clear(self) -> None:
        assert self.cid is not None
        assert self.ledger.clear(self.cid) == sorted(self.model.live)
        self.model.kill(sorted(self.model.live))
        self.remember()

    @rule(data=st.data())
    def refused_edits_write_nothing(self, data: st.DataObject) -> None:
        assert self.cid is not None
        before = self.ledger.conversation(self.cid).version
        dead = sorted(set(range(self.model.next_position)) - set(self.model.live))
        position = data.draw(st.sampled_from([*dead, self.model.next_position + 3]))
        expected = RetractedPositionError if position in dead else UnknownPositionError
        try:
            self.ledger.retract(self.cid, position)
        except expected:
            pass
        else:
            raise AssertionError(f"retract({position}) was accepted")
        assert self.ledger.conversation(self.cid).version == before

    @precondition(lambda self: len(self.models) < 3)
    @rule(data=st.data(), switch=st.booleans())
    def fork(self, data: st.DataObject, switch: bool) -> None:
        assert self.cid is not None
        versions = sorted(v for c, v in self.model_at if c == self.cid)
        version = data.draw(st.sampled_from(versions))
        fork = self.ledger.fork(self.cid, version, key=f"fork-{uuid4().hex}-{self.word()}")
        assert self.ledger.context(fork) == self.seen[(self.cid, version)]
        self.models[fork] = copy.deepcopy(self.model_at[(self.cid, version)])
        if switch:
            self.cid = fork
        self.remember()

    @rule()
    def summarize_now(self) -> None:
        assert self.cid is not None
        request = self.ledger.pending_summary(self.cid)
        if request is not None:
            self.record(request, self.request_words(request))
            self.remember()

    @rule()
    def start_a_summary(self) -> None:
        assert self.cid is not None
        request = self.ledger.pending_summary(self.cid)
        if request is not None:
            self.in_flight.append((request, self.request_words(request)))

    @precondition(lambda self: self.in_flight)
    @rule()
    def a_late_summary_arrives(self) -> None:
        request, words = self.in_flight.pop(0)
        if request.conversation_id != self.cid:
            return
        if self.record(request, words):
            assert not words & self.model.dead, "a summary of retracted text was accepted"
        self.remember()

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def nothing_retracted_reaches_the_model(self) -> None:
        if self.cid is None:
            return
        context = self.ledger.context(self.cid)
        assert_valid(context)
        words = set(WORD.findall(str(context)))
        assert not words & self.model.dead
        state = self.ledger.conversation(self.cid).state
        for layer in state.summaries:
            assert layer.link is not None
            made_from = self.inputs.get((layer.link.origin or self.cid, layer.link.version), set())
            assert not made_from & self.model.dead, "a valid summary was made from retracted text"

    @invariant()
    def every_summary_the_context_rests_on_is_listed_and_valid(self) -> None:
        # An auditor finds each summary of the working memory in summaries(), a
        # fork's inherited ones marked with the log that holds them.
        if self.cid is None:
            return
        summaries = self.ledger.summaries(self.cid)  # one read: nothing writes between
        listed = {(s.inherited_from, s.version): s for s in summaries}
        assert len(listed) == len(summaries)
        for layer in self.ledger.conversation(self.cid).state.summaries:
            assert layer.link is not None
            found = listed.get((layer.link.origin, layer.link.version))
            assert found is not None and found.valid, layer.link
            assert found.text == layer.text
        assert self.ledger.totals(self.cid).summaries == len(listed)

    @invariant()
    def every_live_message_is_in_the_window_or_one_valid_summary(self) -> None:
        if self.cid is None:
            return
        state = self.ledger.conversation(self.cid).state
        window = {e.position: e.message.to_openai() for e in state.window}
        assert set(window) <= set(self.model.live)
        for position, message in self.model.live.items():
            covering = [s for s in state.summaries if s.from_position <= position <= s.through_position]
            if position in window:
                assert not covering and window[position] == message
            else:
                assert len(covering) == 1, (position, covering)

    @invariant()
    def the_running_sums_are_what_a_full_pass_finds(self) -> None:
        # The fold carries the view's cost and the unsummarized tokens on from append
        # to append; every other change must start them afresh.
        if self.cid is None:
            return
        s = self.ledger.conversation(self.cid).state
        end = s.open_group_index if s.open_group_index is not None else len(s.window)
        carried = "view" in s._sums and s._sums["view"][0] is s.window
        full = view_tokens(s, [e for e in s.window[:end] if e.position >= s.dropped_before])
        assert fixed_tokens(s) + visible_sum(s, end) == full
        if carried:
            event("view sum carried on")
        start = tail_index(s)
        assert tail_tokens(s, start) == sum(e.tokens for e in s.window[start:])
        assert full_tool_results(s, end) == [
            e.position for e in s.window[:end]
            if e.message.role == "tool" and e.position >= s.placeholder_before and e.placeholder_tokens is not None
        ]

    def teardown(self) -> None:
        for cid in self.models:
            kinds = {e.kind for e in self.ledger.replay(cid)}
            for kind in ("SummaryInvalidated", "Forked", "MessageEdited"):
                if kind in kinds:
                    event(f"log has {kind}")
        for (cid, version), context in self.seen.items():
            assert self.ledger.context(cid, version=version) == context, (cid, version)
        for cid in self.models:
            assert self.ledger.verify(cid).ok
        if self.read_models is not None and self.runner is not None:
            catch_up_through_committed(self.runner)
            for cid in self.models:
                assert_conversation_matches(self.read_models, self.ledger, cid)
