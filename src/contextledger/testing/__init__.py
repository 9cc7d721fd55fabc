"""Test doubles and checks for applications built on contextledger (opt-in: ``import
contextledger`` never imports this package, and nothing here needs pytest).

- ``FakeOpenAIServer``: a local OpenAI-compatible HTTP server (chat completions and
  the Responses API) for the real ``openai`` client, scripted with the behaviours
  ``Reply`` (with ``Call``), ``Empty``, ``Delay``, ``Status``, ``Malformed``, ``Drop``
  and ``Func``; it records every request as a ``RecordedRequest``.
- ``ScriptedSummarizer``: a ``Summarizer`` that fails, waits and blocks as scripted.
- ``assert_valid_openai_context`` / ``openai_context_violations``: OpenAI's ordering
  rules for tool calls, checked on any list of messages.

Contract suites for your own summarizer, token counter or store are in
``contextledger.testing.contracts``; pytest fixtures in
``contextledger.testing.pytest_plugin``.
"""

from __future__ import annotations

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
from contextledger.testing.fake_openai import FakeOpenAIServer, echo_summary
from contextledger.testing.openai_rules import assert_valid_openai_context, openai_context_violations
from contextledger.testing.scripted_summarizer import ScriptedSummarizer

__all__ = [
    "Behaviour",
    "Call",
    "Delay",
    "Drop",
    "Empty",
    "Endpoint",
    "FakeOpenAIServer",
    "Func",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "ScriptedSummarizer",
    "Status",
    "assert_valid_openai_context",
    "echo_summary",
    "openai_context_violations",
]
