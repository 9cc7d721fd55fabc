"""The Anthropic summarizer with the real anthropic SDK against the local fake server,
and the fake server's own checks."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

import contextledger as cl
from contextledger.application import SummaryRequest
from contextledger.domain import (
    ConfigurationError,
    SummarizerAuthenticationError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerRequestError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
)
from contextledger.infrastructure.summarizers.anthropic_summarizer import AnthropicSummarizer
from contextledger.infrastructure.summarizers.summary_prompt import PROMPT_VERSION
from contextledger.testing import (
    Blocks,
    Call,
    Delay,
    Drop,
    Empty,
    FakeAnthropicServer,
    Malformed,
    Reply,
    Status,
)
from tests.support.summary_requests import seat_change_request

KEY = "sk-ant-very-secret-key-0123456789"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as running:
        yield running


def request() -> SummaryRequest:
    return seat_change_request(model="claude-haiku-4-5", previous="Ada flies on 12 May.")


def summarizer(server: FakeAnthropicServer, timeout: float = 5.0) -> AnthropicSummarizer:
    return AnthropicSummarizer(api_key=KEY, base_url=server.base_url, timeout=timeout)


def test_the_summary_comes_back_with_usage_counting_cached_input(server: FakeAnthropicServer) -> None:
    server.script(
        Blocks(
            [{"type": "text", "text": "Ada flies 12 May; seat 12A."}],
            input_tokens=20,
            output_tokens=9,
            cache_read_input_tokens=100,
            cache_creation_input_tokens=5,
            model="claude-haiku-4-5-20251001",
        )
    )
    result = summarizer(server).summarize(request())
    assert (result.text, result.model, result.prompt_version) == (
        "Ada flies 12 May; seat 12A.",
        "claude-haiku-4-5-20251001",
        PROMPT_VERSION,
    )
    assert (result.input_tokens, result.output_tokens) == (125, 9)
    sent = server.requests[0]
    assert sent.header("Idempotency-Key") == "conv:17" and KEY in (
        sent.header("x-api-key") or sent.header("Authorization") or ""
    )
    assert sent.body["max_tokens"] == 300 and "at most 300 tokens" in sent.body["system"]
    user = sent.body["messages"][0]["content"]
    assert "Ada flies on 12 May." in user and "[42] tool result for c9: seat 12A confirmed" in user
    assert "temperature" not in sent.body and server.violations == []


def test_a_given_temperature_is_sent(server: FakeAnthropicServer) -> None:
    AnthropicSummarizer(api_key=KEY, base_url=server.base_url, temperature=0.0).summarize(request())
    assert server.requests[0].body["temperature"] == 0.0


def _timeout_for(behaviour: object) -> float:
    """A short timeout for the answer that comes late (it must time out); time enough
    for every other answer on a busy machine, where the short one made a prompt
    error answer look like a timeout."""
    return 0.5 if isinstance(behaviour, Delay) else 10.0


@pytest.mark.parametrize(
    ("behaviour", "error", "retry_after"),
    [
        (Status(429, headers={"retry-after": "7"}), SummarizerRateLimitedError, 7.0),
        (Status(429), SummarizerRateLimitedError, None),
        (Status(529), SummarizerUnavailableError, None),
        (Status(500), SummarizerUnavailableError, None),
        (Drop(), SummarizerUnavailableError, None),
        (Status(401), SummarizerAuthenticationError, None),
        (Malformed(), SummarizerOutputError, None),
        (Empty(), SummarizerOutputError, None),
        (Blocks([{"type": "text", "text": "cut"}], stop_reason="max_tokens"), SummarizerOutputError, None),
        (Blocks([{"type": "text", "text": "no"}], stop_reason="refusal"), SummarizerOutputError, None),
        (Delay(2.0), SummarizerTimeoutError, None),
    ],
)
def test_failures_are_mapped_to_the_summarizer_errors(
    server: FakeAnthropicServer, behaviour: object, error: type[Exception], retry_after: float | None
) -> None:
    server.script(behaviour)  # type: ignore[arg-type]
    with pytest.raises(error) as caught:
        summarizer(server, timeout=_timeout_for(behaviour)).summarize(request())
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)
    if isinstance(caught.value, SummarizerRateLimitedError):
        assert caught.value.retry_after == retry_after


def test_a_rejected_request_says_why_without_the_key(server: FakeAnthropicServer) -> None:
    server.script(
        Status(
            400,
            body={
                "type": "error",
                "error": {"type": "invalid_request_error", "message": f"bad model for key {KEY}"},
            },
        )
    )
    with pytest.raises(SummarizerRequestError, match=r"\(400\): bad model for key \*\*\*") as caught:
        summarizer(server).summarize(request())
    assert caught.value.status == 400 and caught.value.retryable is False


def test_the_sdk_s_own_retries_can_ride_out_a_429(server: FakeAnthropicServer) -> None:
    server.script(Status(429, headers={"retry-after": "0"}), Reply("fine"))
    done = AnthropicSummarizer(api_key=KEY, base_url=server.base_url, max_retries=1).summarize(request())
    assert done.text == "fine" and len(server.requests) == 2


def test_it_is_a_summarizer_exported_lazily_and_never_shows_its_key() -> None:
    made = cl.AnthropicSummarizer(api_key=KEY)
    assert isinstance(made, cl.Summarizer) and KEY not in repr(made)
    with pytest.raises(ConfigurationError):
        AnthropicSummarizer(api_key="")
    with pytest.raises(ConfigurationError):
        AnthropicSummarizer(api_key=KEY, timeout=0)


# ------------------------------------------------------------------ the server's own checks


def test_the_server_answers_400_to_a_request_that_breaks_the_rules(server: FakeAnthropicServer) -> None:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="first message must be from the user"):
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "assistant", "content": "hi"}])
    with pytest.raises(anthropic.BadRequestError, match="never answered"):
        client.messages.create(
            model="m",
            max_tokens=5,
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
                },
            ],
        )
    assert [index for index, _ in server.violations] == [0, 1]


def test_the_server_counts_tokens_and_scripts_parallel_calls_and_thinking(
    server: FakeAnthropicServer,
) -> None:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
    counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "x" * 40}])
    assert counted.input_tokens == 14
    server.script(
        Reply("Both.", tool_calls=[Call("f", {"a": 1}), Call("g", "{}")], reasoning="plan", cached_tokens=3)
    )
    reply = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "go"}])
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert reply.content[0].signature and reply.stop_reason == "tool_use"  # type: ignore[union-attr]
    assert reply.usage.cache_read_input_tokens == 3
    assert len({b.id for b in reply.content if b.type == "tool_use"}) == 2
