"""The Conversation aggregate: given events, when a command, then events (pure, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from contextledger.domain import (
    ContextOverflowError,
    Conversation,
    InvalidMessageError,
    InvalidPolicyError,
    Message,
    ReductionPolicy,
    StaleSummaryError,
    SummaryProvenance,
    SummaryQualityError,
)
from contextledger.domain.conversation import ConversationSnapshot, SummaryFailure
from contextledger.testing import assert_valid_openai_context

AT = datetime(2026, 1, 1, tzinfo=UTC)
PROVENANCE = SummaryProvenance(model="m", prompt_version="p1")


def new(policy: ReductionPolicy | None = None, system: str | None = "sys") -> Conversation:
    conversation = Conversation.start(
        uuid4(),
        system_prompt=system,
        system_tokens=8 if system else 0,
        model="gpt-4o-mini",
        policy=policy or ReductionPolicy(),
        reply_priming=3,
        at=AT,
    )
    conversation.collect_events()
    return conversation


def add(c: Conversation, data: dict[str, Any], tokens: int = 10) -> int:
    message = Message.from_openai(data)
    return c.append(
        message,
        tokens=tokens,
        placeholder_tokens=4 if message.role == "tool" else None,
        client_message_id=None,
        at=AT,
    )


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_messages_get_gap_free_positions_and_chained_digests() -> None:
    c = new()
    assert [add(c, user(str(i))) for i in range(3)] == [0, 1, 2]
    events = c.collect_events()
    assert kinds(events) == ["MessageAppended"] * 3
    assert len({e.digest for e in events}) == 3
    assert c.version == 4


def test_a_tool_result_without_an_open_call_is_refused_and_emits_nothing() -> None:
    c = new()
    add(c, user())
    c.collect_events()
    with pytest.raises(InvalidMessageError, match="none is open"):
        add(c, result("c1"))
    assert c.collect_events() == []
    assert c.state.next_position == 1


def test_a_group_must_close_before_any_other_message() -> None:
    c = new()
    add(c, calls("a", "b"))
    add(c, result("a"))
    with pytest.raises(InvalidMessageError, match="must all be answered"):
        add(c, user())
    with pytest.raises(InvalidMessageError, match="already answered"):
        add(c, result("a"))
    with pytest.raises(InvalidMessageError, match="does not name an open call"):
        add(c, result("zzz"))
    add(c, result("b"))
    add(c, user())
    assert c.state.open_calls == []


def test_a_call_id_may_be_reused_by_a_later_group() -> None:
    c = new()
    add(c, calls("x"))
    add(c, result("x"))
    add(c, calls("x"))
    add(c, result("x"))
    assert c.state.next_position == 4


def test_the_threshold_fires_once_per_crossing_with_a_range_on_a_group_boundary() -> None:
    c = new(ReductionPolicy(trigger_messages=5, keep_messages=2))
    for data in [user(), calls("a"), result("a"), user(), calls("b"), result("b")]:
        add(c, data)
    events = c.collect_events()
    assert kinds(events).count("ThresholdReached") == 1
    threshold = next(e for e in events if isinstance(e, Conversation.ThresholdReached))
    # keep at most 2 messages without splitting the group b (positions 4-5): cut before 4
    assert (threshold.from_position, threshold.through_position) == (0, 3)
    for _ in range(10):
        add(c, user())
    assert "ThresholdReached" not in kinds(c.collect_events())  # still pending: no second event


def test_an_open_group_is_never_cut() -> None:
    c = new(ReductionPolicy(trigger_messages=3, keep_messages=0))
    add(c, user())
    add(c, user())
    add(c, calls("a", "b"))
    add(c, result("a"))
    events = c.collect_events()
    threshold = [e for e in events if isinstance(e, Conversation.ThresholdReached)]
    assert threshold and threshold[0].through_position == 1


def test_recording_the_summary_moves_the_window_and_a_duplicate_is_rejected() -> None:
    c = new(ReductionPolicy(trigger_messages=4, keep_messages=1))
    for i in range(5):
        add(c, user(f"m{i}"))
    pending = c.state.pending
    assert pending is not None and (pending.from_position, pending.through_position) == (0, 3)
    c.collect_events()
    summary = {"from_position": 0, "through_position": 3, "text": "four greetings", "tokens": 3,
               "message_tokens": 12, "source_digest": "d", "provenance": PROVENANCE, "at": AT}
    c.record_summary(**summary)
    assert kinds(c.collect_events()) == ["SummaryCreated"]
    assert c.state.summarized_through == 3 and [e.position for e in c.state.window] == [4]
    with pytest.raises(StaleSummaryError):
        c.record_summary(**summary)
    assert c.collect_events() == []
    context, tokens = c.working_memory()
    assert [m.role for m in context] == ["system", "system", "user"]
    assert "four greetings" in str(context[1].content)
    assert tokens == 3 + 8 + 12 + 10


@pytest.mark.parametrize(
    ("text", "tokens", "message_tokens", "why"),
    [
        ("   ", 1, 5, "empty"),
        ("Error: upstream failed", 4, 9, "error"),
        ("I'm sorry, I can't help", 6, 11, "error"),
        ("fine", 2000, 2010, "max_summary_tokens"),
        ("long " * 50, 60, 70, "longer than its input"),
    ],
)
def test_a_summary_failing_the_quality_gate_is_rejected_and_nothing_changes(
    text: str, tokens: int, message_tokens: int, why: str
) -> None:
    c = new(ReductionPolicy(trigger_messages=4, keep_messages=1))
    for i in range(5):
        add(c, user(f"m{i}"))
    c.collect_events()
    with pytest.raises(SummaryQualityError, match=why):
        c.record_summary(from_position=0, through_position=3, text=text, tokens=tokens,
                         message_tokens=message_tokens, source_digest="d", provenance=PROVENANCE, at=AT)
    assert c.collect_events() == [] and c.state.pending is not None


def test_a_failure_is_recorded_against_the_pending_range_and_counts_attempts() -> None:
    c = new(ReductionPolicy(trigger_messages=4, keep_messages=1))
    for i in range(5):
        add(c, user(f"m{i}"))
    c.collect_events()
    failure = SummaryFailure(kind="timeout", error="slow", retryable=True, called_provider=True)
    kwargs = {"from_position": 0, "through_position": 3, "at": AT}
    assert c.record_summarization_failure(failure, **kwargs) == 1
    assert c.record_summarization_failure(failure, **kwargs) == 2
    assert c.state.summarizer_failures == 2 and c.state.pending is not None
    with pytest.raises(StaleSummaryError):
        c.record_summarization_failure(failure, **{**kwargs, "through_position": 2})


def test_old_tool_results_become_placeholders_in_batches_and_pairing_holds() -> None:
    c = new(ReductionPolicy(keep_tool_results=2))
    prefixes = []
    for i in range(8):
        add(c, user())
        add(c, calls(f"c{i}"))
        add(c, result(f"c{i}"), tokens=100)
        messages, _ = c.working_memory()
        prefixes.append(c.state.placeholder_before)
        assert_valid_openai_context([m.to_openai() for m in messages])
    full = [m for m in c.working_memory()[0] if m.role == "tool" and m.content == "r"]
    assert 2 <= len(full) <= 4
    assert len(set(prefixes)) < len(prefixes)  # the placeholder line moved in batches
    placeholder = next(m for m in c.working_memory()[0] if m.role == "tool" and m.content != "r")
    assert "f result omitted" in str(placeholder.content)


def test_the_cap_drops_oldest_turns_from_the_view_only_and_the_newest_turn_stays() -> None:
    c = new(ReductionPolicy(max_context_tokens=200, max_summary_tokens=50))
    for i in range(40):
        add(c, user(f"u{i}"))
        _, tokens = c.working_memory()
        assert tokens <= 200
    messages, _ = c.working_memory()
    assert messages[-1].content == "u39"
    assert c.state.next_position == 40 and len(c.state.window) == 40  # nothing lost from state


def test_a_message_that_cannot_fit_under_the_cap_is_refused() -> None:
    c = new(ReductionPolicy(max_context_tokens=100, max_summary_tokens=50))
    with pytest.raises(ContextOverflowError, match="truncate"):
        add(c, user(), tokens=95)
    assert c.collect_events() == []


def test_a_cap_below_the_system_prompt_is_refused_at_start() -> None:
    with pytest.raises(InvalidPolicyError):
        Conversation.start(uuid4(), system_prompt="long", system_tokens=90, model="m",
                           policy=ReductionPolicy(max_context_tokens=90, max_summary_tokens=16),
                           reply_priming=3, at=AT)


def test_an_open_group_is_left_out_of_the_context_until_answered() -> None:
    c = new()
    add(c, user())
    add(c, calls("a", "b"))
    add(c, result("a"))
    assert [m.role for m in c.working_memory()[0]] == ["system", "user"]
    add(c, result("b"))
    assert [m.role for m in c.working_memory()[0]] == ["system", "user", "assistant", "tool", "tool"]


def test_an_unchanged_policy_emits_nothing_and_a_new_one_is_versioned() -> None:
    c = new(ReductionPolicy(trigger_messages=50, keep_messages=5))
    assert c.change_policy(ReductionPolicy(trigger_messages=50, keep_messages=5), at=AT) is False
    assert c.collect_events() == []
    assert c.change_policy(ReductionPolicy(trigger_messages=3, keep_messages=1), at=AT) is True
    assert c.state.policy_version == 2


def test_a_new_policy_can_fire_at_once() -> None:
    c = new()
    for _ in range(5):
        add(c, user())
    c.collect_events()
    c.change_policy(ReductionPolicy(trigger_messages=3, keep_messages=1), at=AT)
    assert kinds(c.collect_events()) == ["PolicyChanged", "ThresholdReached"]


def test_layered_summaries_accumulate_then_consolidate() -> None:
    policy = ReductionPolicy(trigger_messages=4, keep_messages=1, summary_mode="layered",
                             layered_max_tokens=40, max_summary_tokens=30)
    c = new(policy)
    for i in range(5):
        add(c, user(f"m{i}"))
    for round_ in range(4):
        p = c.state.pending
        assert p is not None
        c.record_summary(from_position=p.from_position, through_position=p.through_position,
                         text=f"layer {round_}", tokens=15, message_tokens=20,
                         source_digest="d", provenance=PROVENANCE, at=AT)
        for _ in range(4):
            add(c, user())
    layers = c.state.summaries
    assert len(layers) <= 3
    assert any(e for e in c.collect_events() if isinstance(e, Conversation.SummaryCreated) and e.consolidated)


def test_a_snapshot_restores_the_same_state() -> None:
    c = new(ReductionPolicy(trigger_messages=4, keep_messages=1, keep_tool_results=1))
    for data in [user(), calls("a"), result("a"), user(), user(), user()]:
        add(c, data)
    restored = ConversationSnapshot.take(c).mutate(None)
    assert restored.state == c.state and restored.version == c.version
    assert restored.working_memory() == c.working_memory()


def test_a_restored_state_shares_nothing_that_changes_with_its_snapshot() -> None:
    c = new(ReductionPolicy(trigger_messages=40, keep_messages=1, keep_tool_results=1))
    for data in [user(), calls("a", "b"), result("a")]:
        add(c, data)
    snapshot = ConversationSnapshot.take(c)
    before = snapshot.state.model_dump()
    restored = snapshot.mutate(None)
    assert restored.state == c.state
    # the lists and dicts are its own; the frozen models in them are shared (cheap to load)
    for name in ("window", "summaries", "open_calls", "group_calls", "retracted"):
        assert getattr(restored.state, name) is not getattr(snapshot.state, name), name
    assert restored.state.window[0] is snapshot.state.window[0]
    add(restored, result("b"))
    add(restored, user())
    assert snapshot.state.model_dump() == before and len(restored.state.window) == len(c.state.window) + 2
    assert restored.state.open_calls == [] and c.state.open_calls == ["b"]


def test_an_append_never_fails_on_entries_a_summary_reaches_over_without_a_layer_after_them() -> None:
    """A window whose first entry lies at or before ``summarized_through`` with no layer
    beginning after it (messages a re-folding summary's range reaches over without
    having summarized them, as the copy of a fork a process folded before another
    process erased its source's subject held while it recorded a summary of the fork's
    own range: tests/integration/test_fork_remainder_elsewhere.py): the policy found no layer to bound the gap and
    the append raised ``ValueError`` from ``min()``. Now the append lands and the
    context stays valid; the entries stay in the window, where the working memory
    treats them as the layer's."""
    c = new(ReductionPolicy(trigger_messages=4, keep_messages=1))
    for i in range(5):
        add(c, user(f"m{i}"))
    early = c.state.window[1]  # position 1
    c.record_summary(from_position=0, through_position=3, text="four greetings", tokens=3,
                     message_tokens=12, source_digest="d", provenance=PROVENANCE, at=AT)
    c.collect_events()
    c.state.window.insert(0, early)  # inside the layer's range [0, 3], still in the window
    assert c.state.window[0].position == 1 <= c.state.summarized_through
    for i in range(5, 12):
        add(c, user(f"m{i}"))
    assert [e.position for e in c.state.window][:2] == [1, 4]
    context, _ = c.working_memory()
    assert context[-1].content == "m11"
    assert_valid_openai_context([m.to_openai() for m in context])
