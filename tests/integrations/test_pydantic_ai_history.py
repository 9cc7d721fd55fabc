"""``LedgerHistory`` keeps Pydantic AI's messages losslessly: any sequence of
``ModelMessage``\\ s added comes back equal, on SQLite and PostgreSQL, while the ledger
counts, summarizes and sends the chat messages they stand for."""

from __future__ import annotations

import uuid
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

import contextledger as cl
from contextledger.domain.events import MessageAppended
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.integrations.pydantic_ai import FORMAT, VERSION, LedgerHistory
from contextledger.testing import assert_valid_openai_context

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
times = st.integers(0, 10**9).map(lambda s: EPOCH + timedelta(seconds=s, microseconds=s % 997))
names = st.sampled_from(["weather", "lookup", "search_docs"])
details = st.none() | st.dictionaries(st.sampled_from(["finish_reason", "id", "region"]), text, max_size=2)


@st.composite
def user_parts(draw: st.DrawFn) -> list[Any]:
    parts: list[Any] = []
    if draw(st.booleans()):
        parts.append(SystemPromptPart(draw(text), timestamp=draw(times)))
    content: Any = draw(text)
    if draw(st.booleans()):
        content = [draw(text)]
        if draw(st.booleans()):
            content.append(ImageUrl(url=f"https://example.com/{draw(st.integers(0, 99))}.png"))
        if draw(st.booleans()):
            content.append(BinaryContent(data=draw(st.binary(min_size=1, max_size=24)), media_type="image/png"))
    parts.append(UserPromptPart(content, timestamp=draw(times)))
    return parts


@st.composite
def usages(draw: st.DrawFn) -> RequestUsage:
    return RequestUsage(
        input_tokens=draw(st.integers(0, 10**6)),
        output_tokens=draw(st.integers(0, 10**5)),
        cache_read_tokens=draw(st.integers(0, 1000)),
        details=draw(st.dictionaries(st.sampled_from(["reasoning_tokens", "audio"]), st.integers(0, 99), max_size=2)),
    )


@st.composite
def turns(draw: st.DrawFn, number: int) -> list[ModelMessage]:
    """One user turn: a request, then responses and tool returns until a text answer."""
    out: list[ModelMessage] = [ModelRequest(parts=draw(user_parts()), timestamp=draw(times), run_id=f"run-{number}")]
    for step in range(draw(st.integers(0, 2))):
        calls = [
            ToolCallPart(draw(names), draw(st.dictionaries(st.sampled_from("abc"), text | st.integers(), max_size=2)),
                         tool_call_id=f"call_{number}_{step}_{n}")
            for n in range(draw(st.integers(1, 3)))
        ]
        head: list[Any] = []
        if draw(st.booleans()):
            head.append(ThinkingPart(draw(text), signature=draw(st.none() | text), provider_name="openai"))
        if draw(st.booleans()):
            head.append(TextPart(draw(text)))
        out.append(ModelResponse(parts=[*head, *calls], usage=draw(usages()), model_name="gpt-4o-mini",
                                 timestamp=draw(times), provider_name="openai", provider_details=draw(details),
                                 run_id=f"run-{number}"))
        returns: list[Any] = []
        for call in calls:
            if draw(st.integers(0, 4)) == 0:  # a failed call answered with a retry
                returns.append(ToolReturnPart(call.tool_name, "bad arguments", tool_call_id=call.tool_call_id,
                                              outcome="retried", timestamp=draw(times)))
            else:
                returns.append(ToolReturnPart(call.tool_name, draw(text | st.dictionaries(st.just("v"), st.integers())),
                                              tool_call_id=call.tool_call_id, timestamp=draw(times)))
        out.append(ModelRequest(parts=returns, timestamp=draw(times), run_id=f"run-{number}"))
    answer: list[Any] = [TextPart(draw(text))]
    if draw(st.booleans()):
        answer.insert(0, ThinkingPart(draw(text), id="rs_1", signature=draw(text), provider_name="openai"))
    out.append(ModelResponse(parts=answer, usage=draw(usages()), model_name=draw(st.none() | st.just("gpt-4o")),
                             timestamp=draw(times), provider_details=draw(details), run_id=f"run-{number}"))
    if draw(st.integers(0, 3)) == 0:  # the answer failed output validation: feedback, then a new answer
        cause = draw(st.sampled_from(["validation_error", "model_retry"]))
        out.append(ModelRequest(parts=[RetryFeedbackPart(draw(text), retry=RetryInfo(cause, attempt=1, max_retries=2),
                                                         timestamp=draw(times))], run_id=f"run-{number}"))
        out.append(ModelResponse(parts=[TextPart(draw(text))], timestamp=draw(times), run_id=f"run-{number}"))
    return out


@st.composite
def histories(draw: st.DrawFn) -> list[list[ModelMessage]]:
    """Batches of whole turns, as ``result.new_messages()`` hands them over."""
    return [draw(turns(n)) for n in range(draw(st.integers(1, 4)))]


def _json(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


PROPERTY = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@PROPERTY
@given(batches=histories())
def _round_trip(ledger: cl.Ledger, batches: list[list[ModelMessage]]) -> None:
    history = LedgerHistory(f"chat-{uuid.uuid4()}", ledger, system_prompt="Be brief.")
    added: list[ModelMessage] = []
    for batch in batches:
        history.extend(batch)
        added.extend(batch)
    back = history.all_messages()
    # Equal as Pydantic AI itself stores and loads messages (its JSON), field by field.
    assert _json(back) == _json(added)
    assert back == ModelMessagesTypeAdapter.validate_json(_json(added))
    # No reduction: the working memory is the system prompt, then every message.
    memory = history.messages()
    assert memory[0] == ModelRequest(parts=[SystemPromptPart("Be brief.", timestamp=memory[0].parts[0].timestamp)])
    assert _json(memory[1:]) == _json(added)
    assert_valid_openai_context(ledger.context(history.conversation_id))
    assert ledger.verify(history.conversation_id).ok


def test_any_messages_come_back_equal(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        _round_trip(ledger)


def test_the_working_memory_is_summarized_and_keeps_calls_with_their_returns(sqlite_url: str) -> None:
    policy = cl.ReductionPolicy(trigger_messages=16, keep_messages=12, keep_tool_results=1)
    with cl.Ledger.open(sqlite_url) as ledger:
        history = LedgerHistory("chat-7", ledger, policy=policy, system_prompt="Be brief.")
        added: list[ModelMessage] = []
        for turn in range(12):
            batch: list[ModelMessage] = [
                ModelRequest(parts=[UserPromptPart(f"question {turn}")]),
                ModelResponse(parts=[ToolCallPart("lookup", {"q": turn}, tool_call_id=f"c{turn}")]),
                ModelRequest(parts=[ToolReturnPart("lookup", "found " * 50, tool_call_id=f"c{turn}")]),
                ModelResponse(parts=[TextPart(f"answer {turn}")]),
            ]
            history.extend(batch)
            added.extend(batch)
        ledger.wait_idle()
        memory = history.messages()
        first = memory[0]
        assert isinstance(first, ModelRequest)
        assert first.parts[0].content == "Be brief."
        assert str(first.parts[1].content).startswith("Summary of the earlier conversation")
        assert len(memory) < len(added)
        calls = [p.tool_call_id for m in memory for p in m.parts if isinstance(p, ToolCallPart)]
        returns = [p for m in memory for p in m.parts if isinstance(p, ToolReturnPart)]
        assert calls == [p.tool_call_id for p in returns]
        sent = ledger.context(history.conversation_id)
        assert [p.content for p in returns] == [m["content"] for m in sent if m["role"] == "tool"]
        assert any("found" not in str(p.content) for p in returns)  # an old return as a placeholder
        assert str(returns[-1].content).startswith("found")
        assert _json(history.all_messages()) == _json(added)
        assert_valid_openai_context(ledger.context(history.conversation_id))


def test_bad_input_is_refused_and_nothing_is_written(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerHistory("chat-8", ledger)
        with pytest.raises(InvalidArgumentError, match="not a pydantic_ai ModelMessage"):
            history.extend([ModelRequest(parts=[UserPromptPart("hi")]), {"role": "user"}])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError, match="none of these messages"):
            history.extend([ModelRequest(parts=[])])
        # A return that answers no call breaks OpenAI's rules: the whole batch is refused.
        with pytest.raises(InvalidMessageError):
            history.extend([
                ModelRequest(parts=[UserPromptPart("hi")]),
                ModelRequest(parts=[ToolReturnPart("lookup", "x", tool_call_id="nowhere")]),
            ])
        assert history.all_messages() == []
        assert ledger.transcript(history.conversation_id) == []


def test_messages_are_kept_as_originals_chained_into_the_digests(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerHistory("chat-9", ledger)
        history.extend([ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")])])
        events = [e for e in ledger.store.events(history.conversation_id) if isinstance(e, MessageAppended)]
        assert [(e.original or {}).get("format") for e in events] == [FORMAT] * 2
        assert [(e.original or {}).get("version") for e in events] == [VERSION] * 2
        assert ledger.verify(history.conversation_id).ok


TIGHT = cl.ReductionPolicy(trigger_messages=6, keep_messages=3, keep_tool_results=1, max_context_tokens=4000)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=histories())
def test_the_working_memory_never_splits_a_call_from_its_return(batches: list[list[ModelMessage]]) -> None:
    with cl.Ledger.open("memory://") as ledger:
        history = LedgerHistory("chat", ledger, policy=TIGHT, system_prompt="Be brief.")
        for batch in batches:
            history.extend(batch)
            ledger.wait_idle()
            memory = history.messages()
            open_calls: set[str] = set()
            for m in memory:
                if isinstance(m, ModelResponse):
                    assert not open_calls, f"calls {open_calls} unanswered"
                    open_calls = {p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)}
                else:
                    for p in m.parts:
                        if isinstance(p, ToolReturnPart):
                            assert p.tool_call_id in open_calls, f"return {p.tool_call_id} answers no call"
                            open_calls.discard(p.tool_call_id)
            assert not open_calls
            # The tool returns sent are the ledger's (placeholders included), in order.
            sent = ledger.context(history.conversation_id)
            assert_valid_openai_context(sent)
            returns = [p for m in memory for p in m.parts if isinstance(p, ToolReturnPart)]
            assert [p.tool_call_id for p in returns] == [m["tool_call_id"] for m in sent if m["role"] == "tool"]


def test_legacy_retry_prompts_come_back_as_pydantic_ai_loads_them(sqlite_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RetryPromptPart is deprecated in Pydantic AI 2
        added: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart("weather?")]),
            ModelResponse(parts=[ToolCallPart("weather", {"city": 1}, tool_call_id="c1")]),
            ModelRequest(parts=[RetryPromptPart("city must be a string", tool_name="weather", tool_call_id="c1")]),
            ModelResponse(parts=[TextPart("{}")]),
            ModelRequest(parts=[RetryPromptPart("no output")]),
            ModelResponse(parts=[TextPart("sunny")]),
        ]
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerHistory("chat-legacy", ledger)
        history.extend(added)
        assert history.all_messages() == ModelMessagesTypeAdapter.validate_json(_json(added))
        sent = ledger.context(history.conversation_id)
        assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert "city must be a string" in sent[2]["content"]
