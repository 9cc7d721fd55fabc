"""The OpenAI summarizer with the real openai client against a local server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from contextledger.application import Summarizer, SummaryRequest
from contextledger.domain import (
    ConfigurationError,
    SummarizerAuthenticationError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerRequestError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
)
from contextledger.infrastructure.summarizers.openai_summarizer import PROMPT_VERSION, OpenAISummarizer
from contextledger.testing import (
    Delay,
    Drop,
    Empty,
    FakeOpenAIServer,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)
from contextledger.testing.contracts import SummarizerContract
from tests.support.summary_requests import seat_change_request

KEY = "sk-test-very-secret-key-0123456789"


def request() -> SummaryRequest:
    return seat_change_request(model="gpt-4o-mini", previous="The user is Ada; she flies on 12 May.")


def summarizer(server: FakeOpenAIServer, timeout: float = 5.0) -> OpenAISummarizer:
    return OpenAISummarizer(api_key=KEY, base_url=server.base_url, timeout=timeout)


def test_a_scripted_answer_is_returned_with_usage_and_provenance(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(
        Reply(
            "Ada flies 12 May; seat 12A confirmed.",
            prompt_tokens=120,
            completion_tokens=11,
            model="gpt-4o-mini-2024-07-18",
        )
    )
    result = summarizer(fake_openai).summarize(request())
    assert result.text == "Ada flies 12 May; seat 12A confirmed."
    assert (result.input_tokens, result.output_tokens) == (120, 11)
    assert result.model == "gpt-4o-mini-2024-07-18" and result.prompt_version == PROMPT_VERSION
    assert result.latency_ms > 0


def test_the_request_holds_the_previous_summary_and_only_the_new_messages(
    fake_openai: FakeOpenAIServer,
) -> None:
    summarizer(fake_openai).summarize(request())
    [received] = fake_openai.requests
    body = received.body
    assert body["model"] == "gpt-4o-mini" and body["max_tokens"] == 300
    prompt = body["messages"][1]["content"]
    assert "The user is Ada; she flies on 12 May." in prompt
    assert "[40] user: Change my seat to a window seat." in prompt
    assert 'calls set_seat({"seat": "12A"})' in prompt and "tool result for c9: seat 12A confirmed" in prompt
    assert "decision" in body["messages"][0]["content"] and "tool outcome" in body["messages"][0]["content"]
    headers = {name.lower(): value for name, value in received.headers.items()}  # names are case-blind
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["idempotency-key"] == "conv:17"


def test_a_429_with_retry_after_becomes_a_rate_limited_error(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Status(429, headers={"Retry-After": "0.25"}))
    with pytest.raises(SummarizerRateLimitedError) as caught:
        summarizer(fake_openai).summarize(request())
    assert caught.value.retry_after == 0.25


@pytest.mark.parametrize("code", [500, 502, 503])
def test_a_server_error_becomes_unavailable(fake_openai: FakeOpenAIServer, code: int) -> None:
    fake_openai.script(Status(code))
    with pytest.raises(SummarizerUnavailableError):
        summarizer(fake_openai).summarize(request())


def test_a_dropped_connection_becomes_unavailable(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Drop())
    with pytest.raises(SummarizerUnavailableError):
        summarizer(fake_openai).summarize(request())


def test_a_refused_connection_becomes_unavailable() -> None:
    dead = OpenAISummarizer(api_key=KEY, base_url="http://127.0.0.1:9/v1", timeout=2)
    with pytest.raises(SummarizerUnavailableError):
        dead.summarize(request())


def test_a_slow_answer_becomes_a_timeout(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Delay(2.0))
    started = time.monotonic()
    with pytest.raises(SummarizerTimeoutError):
        summarizer(fake_openai, timeout=0.3).summarize(request())
    assert time.monotonic() - started < 1.9  # the 2 s answer was not awaited


@pytest.mark.parametrize(
    "behaviour",
    [Malformed(), Empty(""), Empty(None), Reply("cut off", finish_reason="length")],
    ids=["malformed-json", "empty", "null", "cut-off"],
)
def test_bad_output_becomes_an_output_error(fake_openai: FakeOpenAIServer, behaviour: object) -> None:
    fake_openai.script(behaviour)  # type: ignore[arg-type]
    with pytest.raises(SummarizerOutputError):
        summarizer(fake_openai).summarize(request())


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (400, SummarizerRequestError),
        (401, SummarizerAuthenticationError),
        (403, SummarizerAuthenticationError),
        (404, SummarizerRequestError),
        (422, SummarizerRequestError),
    ],
)
def test_a_client_error_is_classified_and_not_retryable(
    fake_openai: FakeOpenAIServer, code: int, kind: type[SummarizerError]
) -> None:
    fake_openai.script(
        Status(code, body={"error": {"message": f"bad key {KEY}", "type": "invalid_request_error"}})
    )
    with pytest.raises(SummarizerError) as caught:
        summarizer(fake_openai).summarize(request())
    assert caught.value.retryable is False
    assert type(caught.value) is kind
    assert caught.value.status == code
    assert KEY not in str(caught.value)


def test_the_api_key_never_appears_in_errors_or_reprs(fake_openai: FakeOpenAIServer) -> None:
    s = summarizer(fake_openai)
    assert KEY not in repr(s)
    for behaviour in (Status(401), Status(500), Status(429), Malformed(), Empty("")):
        fake_openai.script(behaviour)
        with pytest.raises(SummarizerError) as caught:
            s.summarize(request())
        assert KEY not in str(caught.value) and KEY not in repr(caught.value)
        assert KEY not in json.dumps(caught.value.context, default=str)


def test_a_missing_api_key_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="API key"):
        OpenAISummarizer(api_key=None)


class TestOpenAISummarizerContract(SummarizerContract):
    """The contract, with a local server that answers like a well-behaved model."""

    server: FakeOpenAIServer

    @pytest.fixture(autouse=True)
    def _server(self) -> Iterator[None]:
        def answer(request: RecordedRequest) -> Reply:
            prompt = request.body["messages"][1]["content"]
            previous = prompt.split("\n\n")[0].removeprefix("Current summary:\n")
            return Reply(f"{previous} Vegetarian peanut-free meal (book_meal VGML) confirmed.")

        with FakeOpenAIServer(default=Func(answer)) as server:
            self.server = server
            yield

    def make_summarizer(self) -> Summarizer:
        return OpenAISummarizer(api_key=KEY, base_url=self.server.base_url, timeout=5)
