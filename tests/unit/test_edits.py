"""Edits on the Conversation aggregate: given events, when an edit command, then events.

The aggregate keeps only its window; what an edit needs from summarized history comes
from a ``History`` — here one folded from the events the test collected.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from contextledger.domain import (
    Conversation,
    ConversationState,
    InvalidEditError,
    Message,
    ReductionPolicy,
    RetractedPositionError,
    StaleSummaryError,
    SummaryProvenance,
    SystemPromptEditError,
    UnknownPositionError,
    UsageError,
)
from contextledger.domain.commands.edits import HistoryFold
from contextledger.domain.conversation import ConversationSnapshot
from contextledger.domain.events import DomainEvent, SummaryCreated
from contextledger.domain.values.digests import summary_source_digest
from contextledger.domain.values.reduction import Entry, SummaryLink
from contextledger.testing import assert_valid_openai_context as assert_valid

AT = datetime(2026, 1, 1, tzinfo=UTC)
PROVENANCE = SummaryProvenance(model="m", prompt_version="p1")


class Given:
    """A conversation and every event it emitted (its log), with a History over it."""

    def __init__(self, policy: ReductionPolicy | None = None) -> None:
        self.c = Conversation.start(
            uuid4(),
            system_prompt="sys",
            system_tokens=8,
            model="gpt-4o-mini",
            policy=policy or ReductionPolicy(),
            reply_priming=3,
            at=AT,
        )
        self.log: list[DomainEvent] = list(self.c.collect_events())

    def new_events(self) -> list[DomainEvent]:
        events = self.c.collect_events()
        self.log.extend(events)
        return events

    # History
    def entries(self, from_position: int, through_position: int) -> list[Entry]:
        fold = HistoryFold()
        for event in self.log:
            fold.apply(event)
        return fold.range(from_position, through_position)

    def summary_text(self, link: SummaryLink) -> str:
        event = next(e for e in self.log if e.originator_version == link.version)
        assert isinstance(event, SummaryCreated)
        return event.text

    def add(self, data: dict[str, Any], tokens: int = 10) -> int:
        message = Message.from_openai(data)
        position = self.c.append(
            message,
            tokens=tokens,
            placeholder_tokens=4 if message.role == "tool" else None,
            client_message_id=None,
            at=AT,
        )
        self.new_events()
        return position

    def summarize(self) -> None:
        pending = self.c.state.pending
        assert pending is not None
        messages = [e.message for e in self.c.pending_messages_for_summary()]
        previous = self.c.previous_summary_text()
        self.c.record_summary(
            from_position=pending.from_position,
            through_position=pending.through_position,
            text=f"S{pending.from_position}-{pending.through_position}",
            tokens=2,
            message_tokens=12,
            source_digest=summary_source_digest(previous, messages),
            provenance=PROVENANCE,
            at=AT,
            threshold_version=pending.threshold_version,
        )
        self.new_events()

    def context(self) -> list[dict[str, Any]]:
        messages = [m.to_openai() for m in self.c.working_memory()[0]]
        assert_valid(messages)
        return messages


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids],
    }


def result(call_id: str, text: str = "r") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def texts(context: list[dict[str, Any]]) -> list[Any]:
    return [m.get("content") for m in context]


def test_retracting_a_message_removes_it_from_the_context_in_one_event() -> None:
    g = Given()
    for text in ("a", "b", "c"):
        g.add(user(text))
    assert g.c.retract(1, reason="typo", history=g, at=AT) == [1]
    events = g.new_events()
    assert kinds(events) == ["MessagesRetracted"]
    assert events[0].positions == (1,) and events[0].reason == "typo"  # type: ignore[attr-defined]
    assert texts(g.context()) == ["sys", "a", "c"]
    assert g.add(user("d")) == 3  # positions are never reused


def test_retracting_a_tool_call_message_retracts_its_results() -> None:
    g = Given()
    g.add(user("q"))
    g.add(calls("x", "y"))
    g.add(result("x"))
    g.add(result("y"))
    g.add(said("done"))
    assert g.c.retract(1, history=g, at=AT) == [1, 2, 3]
    assert texts(g.context()) == ["sys", "q", "done"]


def test_retracting_one_tool_result_retracts_its_whole_group() -> None:
    g = Given()
    g.add(calls("x", "y"))
    g.add(result("x"))
    g.add(result("y"))
    assert g.c.retract(2, history=g, at=AT) == [0, 1, 2]
    assert texts(g.context()) == ["sys"]


def test_retracting_an_open_group_lets_any_message_follow() -> None:
    g = Given()
    g.add(user("q"))
    g.add(calls("x", "y"))
    g.add(result("x"))
    g.c.retract(1, history=g, at=AT)
    g.new_events()
    assert g.c.state.open_calls == []
    g.add(user("again"))
    assert texts(g.context()) == ["sys", "q", "again"]


@pytest.mark.parametrize(
    ("position", "error"),
    [(-1, SystemPromptEditError), (7, UnknownPositionError), (-5, UnknownPositionError)],
)
def test_retracting_the_system_prompt_or_an_unknown_position_is_refused_and_writes_nothing(
    position: int, error: type[UsageError]
) -> None:
    g = Given()
    g.add(user("a"))
    with pytest.raises(error) as raised:
        g.c.retract(position, history=g, at=AT)
    assert isinstance(raised.value, InvalidEditError)
    assert g.new_events() == []


def test_retracting_or_editing_a_retracted_message_is_refused_and_writes_nothing() -> None:
    g = Given()
    g.add(user("a"))
    g.c.retract(0, history=g, at=AT)
    g.new_events()
    with pytest.raises(RetractedPositionError) as raised:
        g.c.retract(0, history=g, at=AT)
    assert raised.value.position == 0
    with pytest.raises(RetractedPositionError):
        g.c.edit(0, Message(role="user", content="b"), tokens=5, placeholder_tokens=None, history=g, at=AT)
    assert g.new_events() == []


def test_an_edit_replaces_the_message_and_keeps_the_original_in_the_log() -> None:
    g = Given()
    g.add(user("a"))
    g.add(said("b"))
    changed = g.c.edit(0, Message(role="user", content="A"), tokens=12, placeholder_tokens=None,
                       history=g, at=AT)
    events = g.new_events()
    assert changed and kinds(events) == ["MessageEdited"]
    assert events[0].replaces_version == 2 and events[0].replaced_tokens == 10  # type: ignore[attr-defined]
    assert texts(g.context()) == ["sys", "A", "b"]
    assert g.c.state.live_tokens_delta == 2


def test_an_edit_to_the_same_message_writes_nothing() -> None:
    g = Given()
    g.add(user("a"))
    assert not g.c.edit(0, Message(role="user", content="a"), tokens=10, placeholder_tokens=None,
                        history=g, at=AT)
    assert g.new_events() == []


@pytest.mark.parametrize(
    ("position", "data", "field"),
    [
        (0, said("x"), "role"),
        (2, result("other"), "tool_call_id"),
        (1, calls("x", "z"), "tool_calls"),
        (1, said("no calls"), "tool_calls"),
    ],
)
def test_an_edit_that_breaks_the_role_or_the_tool_call_group_is_refused(
    position: int, data: dict[str, Any], field: str
) -> None:
    g = Given()
    g.add(user("q"))
    g.add(calls("x", "y"))
    g.add(result("x"))
    g.add(result("y"))
    with pytest.raises(InvalidEditError) as raised:
        g.c.edit(position, Message.from_openai(data), tokens=5, placeholder_tokens=None, history=g, at=AT)
    assert raised.value.field == field
    assert g.new_events() == []


def test_editing_a_tool_call_message_may_change_its_arguments_but_not_its_ids() -> None:
    g = Given()
    g.add(calls("x"))
    g.add(result("x"))
    edited = calls("x")
    edited["tool_calls"][0]["function"]["arguments"] = '{"q": 1}'
    assert g.c.edit(0, Message.from_openai(edited), tokens=11, placeholder_tokens=None, history=g, at=AT)
    g.new_events()
    assert g.context()[1]["tool_calls"][0]["function"]["arguments"] == '{"q": 1}'


def test_rewind_retracts_everything_after_the_position() -> None:
    g = Given()
    for text in "abcde":
        g.add(user(text))
    assert g.c.rewind(1, history=g, at=AT) == [2, 3, 4]
    events = g.new_events()
    assert kinds(events) == ["MessagesRetracted"] and events[0].command == "rewind"  # type: ignore[attr-defined]
    assert texts(g.context()) == ["sys", "a", "b"]
    assert g.c.rewind(1, history=g, at=AT) == []
    assert g.new_events() == []


def test_rewind_into_a_tool_call_group_is_refused() -> None:
    g = Given()
    g.add(calls("x", "y"))
    g.add(result("x"))
    g.add(result("y"))
    with pytest.raises(InvalidEditError, match="split the tool-call group"):
        g.c.rewind(1, history=g, at=AT)
    with pytest.raises(UnknownPositionError):
        g.c.rewind(3, history=g, at=AT)
    assert g.new_events() == []


def test_pop_retracts_the_newest_group_and_returns_it() -> None:
    g = Given()
    g.add(user("q"))
    g.add(calls("x"))
    g.add(result("x"))
    popped = g.c.pop(history=g, at=AT)
    assert [e.position for e in popped] == [1, 2]
    assert [e.position for e in g.c.pop(history=g, at=AT)] == [0]
    with pytest.raises(InvalidEditError, match="no message left"):
        g.c.pop(history=g, at=AT)
    assert kinds(g.new_events()) == ["MessagesRetracted", "MessagesRetracted"]


def test_clear_retracts_every_message_but_keeps_the_system_prompt() -> None:
    g = Given()
    g.add(user("a"))
    g.add(said("b"))
    assert g.c.clear(history=g, at=AT) == [0, 1]
    assert texts(g.context()) == ["sys"]
    assert g.c.clear(history=g, at=AT) == []
    assert kinds(g.new_events()) == ["MessagesRetracted"]


def test_the_system_prompt_changes_by_its_own_event() -> None:
    g = Given()
    g.add(user("a"))
    assert g.c.change_system_prompt("new rules", tokens=9, at=AT)
    assert not g.c.change_system_prompt("new rules", tokens=9, at=AT)
    events = g.new_events()
    assert kinds(events) == ["SystemPromptChanged"]
    assert texts(g.context()) == ["new rules", "a"]


def test_retracting_a_summarized_message_in_single_mode_falls_back_to_the_newest_valid_summary() -> None:
    g = Given(ReductionPolicy(trigger_messages=4, keep_messages=2))
    for i in range(5):
        g.add(user(f"m{i}"))
    g.summarize()  # S0-2
    for i in range(5, 9):
        g.add(user(f"m{i}"))
    g.summarize()  # re-folds S0-2: S0-6
    _first, second = [e for e in g.log if isinstance(e, SummaryCreated)]
    g.c.retract(4, history=g, at=AT)
    events = g.new_events()
    assert kinds(events)[:2] == ["MessagesRetracted", "SummaryInvalidated"]
    invalidated = events[1]
    assert invalidated.trigger_version == events[0].originator_version  # type: ignore[attr-defined]
    assert invalidated.invalidated_versions == (second.originator_version,)  # type: ignore[attr-defined]
    context = texts(g.context())
    assert context[1].endswith("S0-2")  # the older summary stands again
    assert context[2:] == ["m3", "m5", "m6", "m7", "m8"]
    assert all("m4" not in str(t) for t in context)


def test_a_change_before_every_summary_in_single_mode_invalidates_them_all() -> None:
    g = Given(ReductionPolicy(trigger_messages=4, keep_messages=2))
    for i in range(5):
        g.add(user(f"m{i}"))
    g.summarize()
    for i in range(5, 9):
        g.add(user(f"m{i}"))
    g.summarize()
    g.c.edit(0, Message(role="user", content="M0"), tokens=10, placeholder_tokens=None, history=g, at=AT)
    events = g.new_events()
    assert len(events[1].invalidated_versions) == 2  # type: ignore[attr-defined]
    context = texts(g.context())
    assert context[:3] == ["sys", "M0", "m1"] and "m0" not in context


def test_in_layered_mode_only_the_touched_layer_is_invalidated() -> None:
    policy = ReductionPolicy(trigger_messages=4, keep_messages=2, summary_mode="layered")
    g = Given(policy)
    for i in range(5):
        g.add(user(f"m{i}"))
    g.summarize()  # 0-2
    for i in range(5, 9):
        g.add(user(f"m{i}"))
    g.summarize()  # 3-5
    g.c.retract(1, history=g, at=AT)
    events = g.new_events()
    assert kinds(events)[:2] == ["MessagesRetracted", "SummaryInvalidated"]
    context = texts(g.context())
    # The reopened messages stand where their range was, before the later layer.
    assert context[1:3] == ["m0", "m2"]
    assert context[3].endswith("S3-5")
    assert context[4:] == ["m6", "m7", "m8"]


def test_an_edit_inside_the_pending_range_clears_it_and_the_late_summary_is_stale() -> None:
    g = Given(ReductionPolicy(trigger_messages=4, keep_messages=2))
    for i in range(5):
        g.add(user(f"m{i}"))
    pending = g.c.state.pending
    assert pending is not None
    g.c.edit(1, Message(role="user", content="M1"), tokens=10, placeholder_tokens=None, history=g, at=AT)
    events = g.new_events()
    assert kinds(events) == ["MessageEdited", "ThresholdReached"]  # pinned again at once
    repinned = g.c.state.pending
    assert repinned is not None and repinned.threshold_version != pending.threshold_version
    with pytest.raises(StaleSummaryError):
        g.c.record_summary(
            from_position=pending.from_position, through_position=pending.through_position, text="old",
            tokens=1, message_tokens=5, source_digest="x", provenance=PROVENANCE, at=AT,
            threshold_version=pending.threshold_version,
        )
    assert g.new_events() == []


def test_a_fork_starts_from_the_source_state_and_continues_its_digest_chain() -> None:
    g = Given(ReductionPolicy(trigger_messages=4, keep_messages=2))
    for i in range(5):
        g.add(user(f"m{i}"))
    g.summarize()
    fork = Conversation.fork(g.c, uuid4(), key="branch", at=AT)
    events = fork.collect_events()
    assert kinds(events) == ["Forked"]
    forked = events[0]
    assert forked.origin.conversation_id == g.c.id and forked.origin.version == g.c.version  # type: ignore[attr-defined]
    assert forked.key == "branch" and forked.digest == g.c.state.digest  # type: ignore[attr-defined]
    assert [m.to_openai() for m in fork.working_memory()[0]] == g.context()
    assert fork.state.summaries[0].link is not None and fork.state.summaries[0].link.origin == g.c.id
    assert fork.state.summarizer_calls == 0


def test_a_snapshot_of_a_state_from_before_edits_still_loads() -> None:
    old = {"system_prompt": "s", "system_tokens": 3, "model": "m",
           "policy": ReductionPolicy().model_dump(mode="json"), "digest": "d",
           "summaries": [{"from_position": 0, "through_position": 3, "text": "t", "message_tokens": 5}]}
    state = ConversationState.model_validate(old)
    assert state.retracted == [] and state.summaries[0].link is None
    snapshot = ConversationSnapshot(originator_id=uuid4(), originator_version=9, timestamp=AT,
                                    created_on=AT, state=state)
    assert snapshot.mutate(None).state.fork_of is None


def test_a_reopened_gap_between_layers_is_summarized_as_a_layer_of_its_own() -> None:
    policy = ReductionPolicy(trigger_messages=4, keep_messages=2, summary_mode="layered")
    g = Given(policy)
    for i in range(9):
        g.add(user(f"m{i}"))
        if g.c.state.pending is not None:
            g.summarize()
    assert [(s.from_position, s.through_position) for s in g.c.state.summaries] == [(0, 2), (3, 5)]
    g.c.retract(1, history=g, at=AT)  # reopens 0 and 2 between the valid layer 3-5 and nothing
    events = g.new_events()
    assert kinds(events) == ["MessagesRetracted", "SummaryInvalidated", "ThresholdReached"]
    assert (events[2].from_position, events[2].through_position) == (0, 2)  # type: ignore[attr-defined]
    g.summarize()
    assert [(s.from_position, s.through_position) for s in g.c.state.summaries] == [(0, 2), (3, 5)]
    context = texts(g.context())
    assert context[1].endswith("S0-2") and context[2].endswith("S3-5") and context[3:] == ["m6", "m7", "m8"]
