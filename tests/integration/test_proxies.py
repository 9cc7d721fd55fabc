"""Behind an HTTP proxy (``HTTP_PROXY``/``HTTPS_PROXY`` set, ``NO_PROXY`` not), the
summarizers and the Anthropic counter reach a server on this machine directly, and a
provider's own endpoint still through the proxy.

A second fake server stands in for the proxy: a request sent through it arrives
with the whole URL as its path, and it records it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contextledger.domain import Message, SummarizerError
from contextledger.infrastructure.counting.anthropic_counter import AnthropicCountingCounter
from contextledger.infrastructure.loopback import is_loopback
from contextledger.infrastructure.summarizers.anthropic_summarizer import AnthropicSummarizer
from contextledger.infrastructure.summarizers.gemini_summarizer import GeminiSummarizer
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer, Status
from tests.support.summary_requests import seat_change_request


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A proxy every SDK is told to use, and no host exempt from it."""
    with FakeOpenAIServer(default=Status(502)) as server:
        url = server.base_url.removesuffix("/v1")
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        yield server


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("api.localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("10.0.0.1", False),
        ("api.openai.com", False),
        ("localhost.example.com", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_hosts_are_told_from_others(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_openai_summarizer_reaches_a_loopback_server_directly_and_others_through_the_proxy(
    proxy: FakeOpenAIServer,
) -> None:
    with FakeOpenAIServer() as local:
        result = OpenAISummarizer(api_key="sk-test", base_url=local.base_url).summarize(
            seat_change_request(model="gpt-4o-mini", previous=None)
        )
        assert result.text and local.request_count == 1 and proxy.request_count == 0
    remote = OpenAISummarizer(api_key="sk-test", base_url="http://api.example.invalid/v1")
    with pytest.raises(SummarizerError):
        remote.summarize(seat_change_request(model="gpt-4o-mini", previous=None))
    assert [r.path for r in proxy.requests] == ["http://api.example.invalid/v1/chat/completions"]


def test_the_anthropic_summarizer_and_counter_reach_a_loopback_server_directly(
    proxy: FakeOpenAIServer,
) -> None:
    with FakeAnthropicServer() as local:
        result = AnthropicSummarizer(api_key="sk-ant-test", base_url=local.base_url).summarize(
            seat_change_request(model="claude-haiku-4-5", previous=None)
        )
        assert result.text
        counter = AnthropicCountingCounter("claude-haiku-4-5", api_key="sk-ant-test", base_url=local.base_url)
        assert counter.count_message(Message(role="user", content="hello there")) > 0
        assert counter.failures == 0 and local.request_count == 2 and proxy.request_count == 0
    remote = AnthropicSummarizer(api_key="sk-ant-test", base_url="http://api.example.invalid")
    with pytest.raises(SummarizerError):
        remote.summarize(seat_change_request(model="claude-haiku-4-5", previous=None))
    assert [r.path for r in proxy.requests] == ["http://api.example.invalid/v1/messages"]


def test_the_gemini_summarizer_reaches_a_loopback_server_directly(proxy: FakeOpenAIServer) -> None:
    with FakeGeminiServer() as local:
        result = GeminiSummarizer(api_key="test", base_url=local.url).summarize(
            seat_change_request(model="gemini-2.5-flash", previous=None)
        )
        assert result.text and local.request_count == 1 and proxy.request_count == 0
    remote = GeminiSummarizer(api_key="test", base_url="http://api.example.invalid")
    with pytest.raises(SummarizerError):
        remote.summarize(seat_change_request(model="gemini-2.5-flash", previous=None))
    assert [r.path.split("?")[0] for r in proxy.requests] == [
        "http://api.example.invalid/v1/models/gemini-2.5-flash:generateContent"
    ]
