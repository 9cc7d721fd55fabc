"""Token counting matches what the OpenAI API reports for a prompt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.domain import ConfigurationError, Message
from contextledger.infrastructure.counting.tokens import TiktokenCounter, encoding_for_model

# The OpenAI cookbook's example chat ("How to count tokens with tiktoken"), with the
# prompt token counts the API reported for it.
COOKBOOK = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."},
]


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-4o", 124), ("gpt-4o-mini", 124), ("gpt-4", 129), ("gpt-3.5-turbo-0125", 129)],
)
def test_the_cookbook_example_counts_what_the_api_reported(model: str, expected: int) -> None:
    assert TiktokenCounter(model).count_messages(COOKBOOK) == expected


@pytest.mark.parametrize(
    ("model", "encoding"),
    [("gpt-4o-mini", "o200k_base"), ("gpt-4.1", "o200k_base"), ("gpt-5", "o200k_base"),
     ("o3-mini", "o200k_base"), ("gpt-4", "cl100k_base"), ("gpt-3.5-turbo", "cl100k_base"),
     ("openai/gpt-4o", "o200k_base"), ("some-local-model", "o200k_base")],
)
def test_the_encoding_follows_the_model(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


def test_tool_calls_and_names_are_counted() -> None:
    counter = TiktokenCounter("gpt-4o")
    plain = counter.count_message(Message(role="assistant", content="ok"))
    with_call = counter.count_message(Message.from_openai({"role": "assistant", "content": "ok", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}))
    assert with_call > plain + 5
    named = counter.count_message(Message(role="user", content="ok", name="bob"))
    assert named == counter.count_message(Message(role="user", content="ok")) + 1 + counter.count_text("bob")


def test_an_encoding_that_cannot_be_loaded_names_tiktoken_cache_dir(tmp_path: Path) -> None:
    # o200k_base and cl100k_base ship with the package (tests/unit/test_shipped_encodings.py);
    # an encoding that does not, with an empty cache and no network, cannot be had.
    code = (
        "from contextledger.infrastructure.counting.tokens import TiktokenCounter\n"
        "from contextledger.domain import ConfigurationError\n"
        "print('OK', TiktokenCounter('gpt-4o').count_text('hello world'))\n"
        "try:\n    TiktokenCounter('gpt-4o', encoding='p50k_base')\n"
        "except ConfigurationError as e:\n    print('ERR', e)\n"
    )
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path), "https_proxy": "http://127.0.0.1:9",
           "HTTPS_PROXY": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "OK 2" in out.stdout, out.stderr
    assert "ERR" in out.stdout and "TIKTOKEN_CACHE_DIR" in out.stdout
    assert issubclass(ConfigurationError, Exception)


@settings(max_examples=300, deadline=None)
@given(text=st.text() | st.sampled_from(["<|endoftext|>", "a <|im_start|> b", "\ud800 lone", "é" * 40, ""]))
@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4"])
def test_text_is_counted_as_tiktoken_encodes_it_with_special_tokens_as_plain_text(model: str, text: str) -> None:
    counter = TiktokenCounter(model)
    assert counter.count_text(text) == len(counter._encoding.encode(text, disallowed_special=()))
