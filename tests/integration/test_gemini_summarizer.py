"""GeminiSummarizer against the local fake Gemini API through the real google-genai
client: the prompt it sends, the result it reads, and every failure mapped to the
summarizer error a policy retries (or not) on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import contextledger as cl
from contextledger.application.shared.ports import SummaryRequest
from contextledger.domain.values.messages import Message
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import (
    Delay,
    Drop,
    Empty,
    FakeGeminiServer,
    GeminiReply,
    Malformed,
    Status,
    rate_limited,
)

REQUEST = SummaryRequest(
    conversation_id=uuid.uuid4(),
    from_position=4,
    through_position=6,
    messages=(
        Message(role="user", content="Book a table for two."),
        Message(role="assistant", content="Booked for 8 pm."),
    ),
    previous_summary="They discussed dinner.",
    model="",
    max_summary_tokens=120,
    idempotency_key="k-1",
    positions=(4, 6),
)


@pytest.fixture
def server() -> Iterator[FakeGeminiServer]:
    with FakeGeminiServer() as fake:
        yield fake


def summarizer(server: FakeGeminiServer, **options: float) -> cl.GeminiSummarizer:
    return cl.GeminiSummarizer(api_key="gm-secret-key", base_url=server.url, **options)  # type: ignore[arg-type]


def test_it_asks_what_the_openai_summarizer_asks_and_reads_the_answer(server: FakeGeminiServer) -> None:
    server.script(
        GeminiReply(
            "Dinner booked for two at 8 pm.",
            thought="Let me think.",
            prompt_tokens=90,
            completion_tokens=9,
            model="gemini-2.5-flash-001",
        )
    )
    result = summarizer(server).summarize(REQUEST)
    assert (result.text, result.model, result.input_tokens, result.output_tokens) == (
        "Dinner booked for two at 8 pm.",
        "gemini-2.5-flash-001",
        90,
        9,
    )
    assert result.prompt_version == "extend-v1" and result.latency_ms > 0
    (sent,) = server.requests
    assert sent.path.endswith("/models/gemini-2.5-flash:generateContent")
    openai_prompt = OpenAISummarizer(api_key="sk-x").messages_for(REQUEST)
    assert sent.body["systemInstruction"]["parts"] == [{"text": openai_prompt[0]["content"]}]
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": openai_prompt[1]["content"]}]}]
    assert sent.body["generationConfig"]["maxOutputTokens"] == 120
    assert sent.header("x-goog-api-key") == "gm-secret-key"


def _timeout_for(behaviour: object) -> float:
    """A short timeout for the answer that comes late (it must time out); time enough
    for every other answer on a busy machine, where the short one made a prompt
    error answer look like a timeout."""
    return 0.5 if isinstance(behaviour, Delay) else 10.0


@pytest.mark.parametrize(
    ("behaviour", "error", "retryable"),
    [
        (rate_limited(1.5), cl.SummarizerRateLimitedError, True),
        (Status(500), cl.SummarizerUnavailableError, True),
        (Status(503), cl.SummarizerUnavailableError, True),
        (Drop(), cl.SummarizerUnavailableError, True),
        (Malformed(b'{"candidates": [ {'), cl.SummarizerOutputError, True),
        (Empty(""), cl.SummarizerOutputError, True),
        (Empty(None), cl.SummarizerOutputError, True),
        (GeminiReply("Dinner booked", finish_reason="MAX_TOKENS"), cl.SummarizerOutputError, True),
        (Delay(1.5), cl.SummarizerTimeoutError, True),
        (Status(401), cl.SummarizerAuthenticationError, False),
        (
            Status(
                404,
                body={
                    "error": {"code": 404, "message": "model gm-secret-key not found", "status": "NOT_FOUND"}
                },
            ),
            cl.SummarizerRequestError,
            False,
        ),
    ],
)
def test_each_failure_is_a_typed_summarizer_error(
    server: FakeGeminiServer, behaviour: object, error: type[cl.SummarizerError], retryable: bool
) -> None:
    server.script(behaviour)  # type: ignore[arg-type]
    with pytest.raises(error) as caught:
        summarizer(server, timeout=_timeout_for(behaviour)).summarize(REQUEST)
    assert type(caught.value) is error and caught.value.retryable is retryable
    assert "gm-secret-key" not in str(caught.value) and "gm-secret-key" not in repr(caught.value)
    assert server.request_count == 1  # no retry inside the SDK unless asked for


def test_a_rate_limit_carries_the_delay_google_asks_for(server: FakeGeminiServer) -> None:
    server.script(rate_limited(2.5), Status(429, headers={"Retry-After": "3"}), Status(429))
    gemini = summarizer(server)
    delays = []
    for _ in range(3):
        with pytest.raises(cl.SummarizerRateLimitedError) as caught:
            gemini.summarize(REQUEST)
        assert caught.value.status == 429
        delays.append(caught.value.retry_after)
    assert delays == [2.5, 3.0, None]


def test_asked_for_retries_the_sdk_retries_a_503(server: FakeGeminiServer) -> None:
    server.script(Status(503), GeminiReply("Dinner booked."))
    assert summarizer(server, max_retries=2).summarize(REQUEST).text == "Dinner booked."
    assert server.request_count == 2


def test_a_bad_configuration_is_refused_and_the_key_never_shows() -> None:
    with pytest.raises(cl.ConfigurationError):
        cl.GeminiSummarizer(api_key=None)
    with pytest.raises(cl.ConfigurationError):
        cl.GeminiSummarizer(api_key="k", timeout=0)
    assert "secret" not in repr(cl.GeminiSummarizer(api_key="secret", base_url="http://127.0.0.1:9"))


def test_an_unreachable_server_is_unavailable() -> None:
    with FakeGeminiServer() as fake:
        url = fake.url
    with pytest.raises(cl.SummarizerUnavailableError):
        cl.GeminiSummarizer(api_key="k", base_url=url, timeout=2).summarize(REQUEST)
