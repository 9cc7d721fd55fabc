"""Test doubles and checks for applications built on contextledger (opt-in: ``import
contextledger`` never imports this package, and nothing here needs pytest).

- ``FakeOpenAIServer``: a local OpenAI-compatible HTTP server (chat completions, the
  Responses API with its compaction and ``responses/compact``) for the real ``openai``
  client, scripted with the behaviours ``Reply`` (with ``Call``), ``Empty``, ``Delay``,
  ``Status``, ``Malformed``, ``Drop`` and ``Func``; it records every request as a ``RecordedRequest``.
- ``FakeAnthropicServer``: a local Anthropic Messages API server (``/v1/messages``
  and ``/v1/messages/count_tokens``) for the real ``anthropic`` client, scripted with
  the same behaviours plus ``Blocks`` (any content blocks, cache usage) and
  ``AnthropicFunc``; it answers 400 to a request that breaks the API's rules, and
  compacts under the ``compact-2026-01-12`` beta (``contextledger.testing.compaction``).
- ``FakeGeminiServer``: a local Gemini API (``generateContent``, ``countTokens``) for
  the real ``google-genai`` client, scripted with ``GeminiReply`` and ``GeminiFunc`` (or the behaviours
  above; ``rate_limited`` makes a 429 with Google's retry delay); it answers 400 to
  contents that break Gemini's rules (``gemini_request_violations``,
  ``assert_valid_gemini_request``).
- ``ScriptedSummarizer``: a ``Summarizer`` that fails, waits and blocks as scripted.
- ``assert_valid_openai_context`` / ``openai_context_violations``: OpenAI's ordering
  rules for tool calls, checked on any list of messages;
  ``assert_valid_responses_input`` / ``responses_input_violations``: the Responses
  API's rules for an ``input`` (calls answered, reasoning followed by its item);
  ``assert_valid_anthropic_request`` / ``anthropic_request_violations``: the Anthropic
  Messages API's rules, checked on a ``messages.create`` request.

Contract suites for your own summarizer, token counter or store are in
``contextledger.testing.contracts``; pytest fixtures in
``contextledger.testing.pytest_plugin``.
"""

from __future__ import annotations

from contextledger.testing.anthropic_rules import (
    anthropic_request_violations,
    assert_valid_anthropic_request,
)
from contextledger.testing.behaviours import (
    Behaviour,
    Call,
    Delay,
    Drop,
    Empty,
    Endpoint,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)
from contextledger.testing.fake_anthropic import AnthropicFunc, Blocks, FakeAnthropicServer
from contextledger.testing.fake_gemini import FakeGeminiServer, GeminiFunc, GeminiReply, rate_limited
from contextledger.testing.fake_openai import FakeOpenAIServer, echo_summary
from contextledger.testing.gemini_rules import assert_valid_gemini_request, gemini_request_violations
from contextledger.testing.openai_rules import (
    assert_valid_openai_context,
    assert_valid_responses_input,
    openai_context_violations,
    responses_input_violations,
)
from contextledger.testing.scripted_summarizer import ScriptedSummarizer

__all__ = [
    "AnthropicFunc",
    "Behaviour",
    "Blocks",
    "Call",
    "Delay",
    "Drop",
    "Empty",
    "Endpoint",
    "FakeAnthropicServer",
    "FakeGeminiServer",
    "FakeOpenAIServer",
    "Func",
    "GeminiFunc",
    "GeminiReply",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "ScriptedSummarizer",
    "Status",
    "anthropic_request_violations",
    "assert_valid_anthropic_request",
    "assert_valid_gemini_request",
    "assert_valid_openai_context",
    "assert_valid_responses_input",
    "echo_summary",
    "gemini_request_violations",
    "openai_context_violations",
    "rate_limited",
    "responses_input_violations",
]
