"""The real google-genai client against the local fake Gemini API, and the scripted
turn the wire tests share."""

from __future__ import annotations

from typing import Any

from google import genai
from google.genai import types

from contextledger.testing import Call, FakeGeminiServer, GeminiReply


def gemini_client(server: FakeGeminiServer) -> genai.Client:
    """A real client whose requests go to ``server``."""
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=server.url))


def weather_in_paris_and_rome(**fields: Any) -> GeminiReply:
    """A model turn calling ``weather`` for Paris and Rome at once (a parallel call,
    Gemini's calls carrying no ids), with the other ``GeminiReply`` fields given."""
    return GeminiReply(
        calls=[Call("weather", {"city": "Paris"}), Call("weather", {"city": "Rome"})], **fields
    )
