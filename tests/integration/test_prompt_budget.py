"""``token_scope="prompt"`` (the default of new policies): the token trigger and
``keep_tokens`` count what the prompt costs, system prompt, summaries, tools and
per-message overhead included, as the cap counts it. Policies stored before the option
(v1 ``Started``, ``PolicyChanged``, ``Forked`` and snapshots) are read back with
``token_scope="messages"`` and replay as they were recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.persistence import StoredEvent

from contextledger.application import Ledger, ReductionPolicy
from contextledger.domain import Conversation
from contextledger.domain.conversation import ConversationSnapshot
from contextledger.domain.events import Forked, PolicyChanged, Started
from contextledger.domain.values.errors import InvalidPolicyError
from contextledger.infrastructure.keys.mapper import JSONBytesTranscoder, PydanticMapper

SYSTEM = "You are a careful travel agent. " * 40  # about 280 tokens
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
V1_POLICY: dict[str, Any] = {
    "trigger_messages": None, "keep_messages": None, "trigger_tokens": 600, "keep_tokens": 100,
    "summary_mode": "single", "layered_max_tokens": 2000, "keep_tool_results": None,
    "max_context_tokens": None, "summarizer_model": None, "max_summary_tokens": 1000,
    "summary_placement": "system_message",
}


def turn(n: int) -> dict[str, str]:
    return {"role": "user" if n % 2 == 0 else "assistant", "content": f"Turn {n}: " + "details of the trip " * 6}


def pinned_after(ledger: Ledger, policy: ReductionPolicy) -> tuple[int, int, int]:
    """Append turns until the policy pins a range: (turns, prompt tokens before the last
    append, prompt tokens after it)."""
    cid = ledger.start(SYSTEM, policy=policy)
    before = ledger.totals(cid).context_tokens
    for n in range(200):
        ledger.append(cid, turn(n))
        after = ledger.totals(cid).context_tokens
        if ledger.pending_summary(cid) is not None:
            return n + 1, before, after
        before = after
    raise AssertionError("the policy never fired")


def test_new_policies_count_the_whole_prompt_in_the_token_trigger() -> None:
    policy = ReductionPolicy(trigger_tokens=600, keep_tokens=100)
    assert policy.token_scope == "prompt"
    with Ledger.open("memory://", run_policy=False) as ledger:
        turns, before, after = pinned_after(ledger, policy)
        # It fires on the append that takes the prompt over trigger_tokens, not later.
        assert before <= 600 < after
        old_turns, _, old_after = pinned_after(ledger, policy.model_copy(update={"token_scope": "messages"}))
        assert old_turns > turns and old_after > 600 + 250  # the system prompt was left out


def test_keep_tokens_counts_the_fixed_part_of_the_prompt() -> None:
    policy = ReductionPolicy(trigger_tokens=900, keep_tokens=450)
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(SYSTEM, policy=policy)
        for n in range(40):
            ledger.append(cid, turn(n))
            if ledger.pending_summary(cid) is not None:
                break
        state = ledger.conversation(cid).state
        assert state.pending is not None
        kept = [e for e in state.window if e.position > state.pending.through_position]
        base = state.system_tokens + state.reply_priming
        assert base < 450 and base + sum(e.tokens for e in kept) <= 450
        # The newest summarized message would not have fit beside them.
        [last] = [e for e in state.window if e.position == state.pending.through_position]
        assert base + sum(e.tokens for e in kept) + last.tokens > 450


def test_a_system_prompt_the_trigger_cannot_hold_is_refused_and_nothing_is_written() -> None:
    with Ledger.open("memory://", run_policy=False) as ledger:
        with pytest.raises(InvalidPolicyError, match="system prompt"):
            ledger.start(SYSTEM * 3, policy=ReductionPolicy(trigger_tokens=600))
        assert ledger.conversation_ids() == []
        cid = ledger.start(SYSTEM, policy=ReductionPolicy(trigger_tokens=600))
        version = ledger.conversation(cid).version
        with pytest.raises(InvalidPolicyError, match="system prompt"):
            ledger.change_system_prompt(cid, SYSTEM * 3)
        with pytest.raises(InvalidPolicyError, match="keep_tokens"):
            ledger.change_policy(cid, ReductionPolicy(trigger_tokens=600, keep_tokens=400))
        assert ledger.conversation(cid).version == version
        # The scope that counts the messages only lets the same system prompt in.
        ledger.start(SYSTEM * 3, policy=ReductionPolicy(trigger_tokens=600, token_scope="messages"))


def test_a_longer_system_prompt_pins_a_range_at_once_when_the_prompt_crosses() -> None:
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("You are brief.", policy=ReductionPolicy(trigger_tokens=600, keep_tokens=100))
        n = 0
        while ledger.totals(cid).context_tokens < 450:
            ledger.append(cid, turn(n))
            n += 1
        assert ledger.pending_summary(cid) is None
        ledger.change_system_prompt(cid, SYSTEM)  # about 280 tokens more: over 600
        assert ledger.totals(cid).context_tokens > 600
        assert ledger.pending_summary(cid) is not None


def load(cls: type[Any], state: dict[str, Any], version: int = 1) -> Any:
    """A v1 stored event of ``cls`` (no class_version) through today's mapper."""
    mapper = PydanticMapper(transcoder=JSONBytesTranscoder())
    stored = StoredEvent(originator_id=CID, originator_version=version, topic=cls.TOPIC,
                         state=json.dumps({"timestamp": AT.isoformat(), **state}).encode())
    return mapper.to_domain_event(stored)


CID = uuid4()


def test_policies_stored_before_token_scope_are_read_back_counting_messages() -> None:
    started = load(Started, {"system_prompt": "sys", "system_tokens": 5, "model": "gpt-4o-mini",
                             "policy": V1_POLICY, "reply_priming": 3, "digest": "0" * 64})
    assert started.policy.token_scope == "messages"
    changed = load(PolicyChanged, {"policy": V1_POLICY, "policy_version": 2}, version=2)
    assert changed.policy.token_scope == "messages"
    state = Conversation.apply(None, started).state.model_dump(mode="json")
    state["policy"] = dict(V1_POLICY)
    forked = load(Forked, {"origin": {"conversation_id": str(uuid4()), "version": 3, "through_position": -1},
                           "key": None, "state": state, "digest": "0" * 64})
    assert Conversation.apply(None, forked).state.policy.token_scope == "messages"
    snapshot = load(ConversationSnapshot, {"created_on": AT.isoformat(), "state": state}, version=5)
    assert snapshot.state.policy.token_scope == "messages"
    # A v1 policy without a token trigger is read as new ones are made: the scope is moot.
    plain = load(PolicyChanged, {"policy": {**V1_POLICY, "trigger_tokens": None, "keep_tokens": None},
                                 "policy_version": 2}, version=2)
    assert plain.policy == ReductionPolicy()


def test_new_events_round_trip_with_their_scope() -> None:
    mapper = PydanticMapper(transcoder=JSONBytesTranscoder())
    for scope in ("messages", "prompt"):
        event = PolicyChanged(originator_id=CID, originator_version=2, timestamp=AT,
                              policy=ReductionPolicy(trigger_tokens=600, token_scope=scope), policy_version=2)
        assert mapper.to_domain_event(mapper.to_stored_event(event)) == event
