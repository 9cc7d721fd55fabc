"""Limits with typed errors: message size in bytes and tokens (system prompts too),
a default context cap derived from the model's window when the policy sets none
(written into the stored policy, so old logs replay as they were), a message larger
than the window refused, and contexts kept under the cap when summaries lag."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.application.shared.limits import check_message_bytes, message_bytes
from contextledger.domain import (
    ContextOverflowError,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    MessageTooLargeError,
)
from contextledger.domain.values.windows import DEFAULT_CONTEXT_WINDOW, context_window, default_context_cap


def events(ledger: Ledger) -> int:
    return ledger.recorder.max_notification_id() or 0


def test_a_message_over_max_message_bytes_is_refused_before_counting_and_writes_nothing() -> None:
    with Ledger.open(settings=Settings(database_url="memory://", run_policy=False)) as ledger:
        cid = ledger.start("s")
        before = events(ledger)
        huge = "x" * 2_000_000  # over the default 1,000,000 bytes
        with pytest.raises(MessageTooLargeError) as caught:
            ledger.append(cid, {"role": "user", "content": huge})
        error = caught.value
        assert (error.unit, error.limit, error.setting) == ("bytes", 1_000_000, "max_message_bytes")
        assert error.size is not None and error.size > 2_000_000
        with pytest.raises(MessageTooLargeError):
            ledger.extend(cid, [{"role": "user", "content": "fine"}, {"role": "user", "content": huge}])
        assert events(ledger) == before and ledger.transcript(cid) == []


def test_multibyte_text_counts_in_utf8_bytes() -> None:
    settings = Settings(database_url="memory://", run_policy=False, max_message_bytes=3000)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "é" * 1400})  # 2,800 bytes
        with pytest.raises(MessageTooLargeError, match="max_message_bytes"):
            ledger.append(cid, {"role": "user", "content": "é" * 1600})  # 3,200 bytes
        assert len(ledger.transcript(cid)) == 1


def test_a_message_over_max_message_tokens_is_refused() -> None:
    settings = Settings(database_url="memory://", run_policy=False, max_message_tokens=100)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        with pytest.raises(MessageTooLargeError) as caught:
            ledger.append(cid, {"role": "user", "content": "word " * 300})
        assert (caught.value.unit, caught.value.limit) == ("tokens", 100)
        assert caught.value.size is not None and caught.value.size > 100
        assert ledger.transcript(cid) == []


def test_a_system_prompt_over_the_limits_is_refused_and_starts_nothing() -> None:
    settings = Settings(database_url="memory://", run_policy=False, max_message_bytes=1024)
    with Ledger.open(settings=settings) as ledger:
        with pytest.raises(MessageTooLargeError) as caught:
            ledger.start("p" * 5000)
        assert caught.value.field == "system_prompt"
        assert events(ledger) == 0 and list(ledger.conversation_ids()) == []


def test_the_window_table_and_the_default_for_unknown_models() -> None:
    assert context_window("gpt-4") == 8_192 and context_window("gpt-4o-mini-2024-07-18") == 128_000
    assert context_window("openai/gpt-4o") == 128_000
    assert context_window("some-local-model") == DEFAULT_CONTEXT_WINDOW
    assert default_context_cap("gpt-4") == 8_192 - 1_024
    assert default_context_cap("gpt-4.1") == 1_047_576 - 16_384


def test_a_policy_without_a_cap_gets_the_models_and_a_message_over_the_window_is_refused() -> None:
    with Ledger.open(settings=Settings(database_url="memory://", run_policy=False)) as ledger:
        cid = ledger.start("s", model="gpt-4", policy=ReductionPolicy(trigger_messages=50, keep_messages=5))
        assert ledger.conversation(cid).policy.max_context_tokens == default_context_cap("gpt-4")
        with pytest.raises(ContextOverflowError):
            ledger.append(cid, {"role": "user", "content": "word " * 9000})  # about 9,000 tokens
        assert ledger.transcript(cid) == []
        explicit = ledger.start("s", model="gpt-4", policy=ReductionPolicy(max_context_tokens=3000))
        assert ledger.conversation(explicit).policy.max_context_tokens == 3000
        ledger.change_policy(explicit, ReductionPolicy(trigger_messages=10, keep_messages=2))
        assert ledger.conversation(explicit).policy.max_context_tokens == default_context_cap("gpt-4")


def test_contexts_stay_under_the_cap_while_summaries_lag_behind_back_to_back_turns() -> None:
    # No summarizer runs (run_policy=False): summaries lag without end; the derived
    # cap still bounds every context by dropping the oldest unsummarized turns.
    with Ledger.open(settings=Settings(database_url="memory://", run_policy=False)) as ledger:
        cid = ledger.start("s", model="gpt-4", policy=ReductionPolicy(trigger_messages=20, keep_messages=4))
        cap = default_context_cap("gpt-4")
        for i in range(60):
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 300})
            assert ledger.working_memory(cid).tokens <= cap
        assert ledger.pending_summary(cid) is not None  # the summary is still due
        assert sum(r.tokens for r in ledger.transcript(cid)) > 2 * cap  # the full history is not


def test_edits_and_new_system_prompts_obey_the_same_limits() -> None:
    settings = Settings(database_url="memory://", run_policy=False, max_message_bytes=2048, max_message_tokens=200)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "short"})
        before = events(ledger)
        with pytest.raises(MessageTooLargeError, match="max_message_bytes"):
            ledger.edit(cid, 0, {"role": "user", "content": "x" * 4000})
        with pytest.raises(MessageTooLargeError, match="max_message_tokens"):
            ledger.edit(cid, 0, {"role": "user", "content": "word " * 300})
        with pytest.raises(MessageTooLargeError) as caught:
            ledger.change_system_prompt(cid, "word " * 300)
        assert caught.value.field == "system_prompt" and caught.value.unit == "tokens"
        assert events(ledger) == before
        assert ledger.transcript(cid)[0].message["content"] == "short"


@pytest.mark.parametrize("reason", ["x" * 2001, "why " * 5_000_000], ids=["just-over", "20MB"])
def test_a_retraction_reason_over_the_reason_limit_is_refused_and_retracts_nothing(
    store_url: str, reason: str
) -> None:
    with Ledger.open(store_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "user", "content": "short"})
        ledger.append(cid, {"role": "user", "content": "typo"})
        before = events(ledger)
        with pytest.raises(InvalidArgumentError, match="reason must be at most 2000 characters") as caught:
            ledger.retract(cid, 1, reason=reason)
        assert caught.value.argument == "reason"
        assert events(ledger) == before and not ledger.transcript(cid)[1].retracted
        assert ledger.retract(cid, 1, reason="r" * 2000) == [1]  # the same limit as an erasure's reason
        assert ledger.transcript(cid)[1].retracted_reason == "r" * 2000


@settings(max_examples=300, deadline=None)
@given(
    role=st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
    text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=400)
    | st.text(st.sampled_from('"\\\x00\x1f\né😀a'), min_size=100, max_size=250)
    | st.text(st.sampled_from("\x00\x1f\x7f😀"), min_size=100, max_size=300),
    ident=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=64),
    limit=st.integers(min_value=1024, max_value=1600),
)
def test_the_byte_limit_refuses_exactly_the_messages_whose_json_is_over_it(
    role: str, text: str, ident: str, limit: int
) -> None:
    """A text message well under the limit is not serialized to be measured; the
    shortcut must never let through a message whose stored JSON is over the limit, nor
    refuse one under it."""
    data = {"role": role, "content": text}
    if role == "tool":
        data["tool_call_id"] = ident
    elif role != "system":
        data["name"] = ident[:64]
    try:
        message = Message(**data)
    except InvalidMessageError:
        return
    over = message_bytes(message) > limit
    try:
        check_message_bytes(message, Settings(database_url="memory://", max_message_bytes=limit))
    except MessageTooLargeError as exc:
        assert over and exc.size == message_bytes(message)
    else:
        assert not over
