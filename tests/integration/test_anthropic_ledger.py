"""Anthropic messages through a real ledger (SQLite file and PostgreSQL): decoded,
appended with their originals, read back as context entries and rendered unchanged."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

import contextledger as cl
from contextledger.application.formats.anthropic import AnthropicAdapter
from contextledger.application.formats.anthropic_render import render_anthropic
from contextledger.application.formats.originals import context_entries, extend_with_originals
from contextledger.testing import Reply, assert_valid_anthropic_request
from contextledger.testing.fake_anthropic import Blocks, FakeAnthropicServer, redacted_thinking, thinking

ADAPTER = AnthropicAdapter()


def append(ledger: cl.Ledger, cid: Any, message: Any) -> list[int]:
    decoded = ADAPTER.decode(message)
    return extend_with_originals(ledger, cid, list(zip(decoded.messages, decoded.originals, strict=True)))


def test_a_conversation_with_thinking_and_parallel_tool_use_round_trips_byte_identical(shared_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(shared_url) as ledger:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        server.script(
            Blocks([thinking("Two cities."), {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_02", "name": "weather", "input": {"city": "Rome"}}],
                   cache_creation_input_tokens=40),
            Blocks([redacted_thinking(), {"type": "text", "text": "Paris 18C, Rome 22C."}],
                   cache_read_input_tokens=40),
        )
        cid = ledger.start("You answer about the weather.")
        sent: list[dict[str, Any]] = [{"role": "user", "content": [
            {"type": "text", "text": "Weather in Paris and Rome?", "cache_control": {"type": "ephemeral"}}]}]
        append(ledger, cid, sent[0])
        for results in ([{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C"},
                         {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": "22C"}]},
                         {"type": "text", "text": "Summarize please."}], None):
            body = render_anthropic(context_entries(ledger, cid).entries, cache=True)
            assert_valid_anthropic_request({"model": "claude-haiku-4-5", "max_tokens": 200, **body})
            reply = client.messages.create(model="claude-haiku-4-5", max_tokens=200, **body)
            assert ADAPTER.decode(reply).usage is not None
            append(ledger, cid, reply)
            sent.append({"role": "assistant", "content": [b.model_dump(mode="json", exclude_none=True)
                                                          for b in reply.content]})
            if results:
                append(ledger, cid, {"role": "user", "content": results})
                sent.append({"role": "user", "content": results})
        assert server.violations == [] and len(server.requests) == 2
        # What went out the second time is what was appended, plus the cache marks.
        second = server.requests[1].body
        assert second["system"] == [{"type": "text", "text": "You answer about the weather.",
                                     "cache_control": {"type": "ephemeral"}}]
        assert json.dumps(second["messages"][:2]) == json.dumps(sent[:2])
        rendered = render_anthropic(context_entries(ledger, cid).entries)
        assert json.dumps(rendered["messages"]) == json.dumps(sent)
        assert ledger.context(cid)[2]["tool_calls"][1]["id"] == "toolu_02"
        assert [m["role"] for m in ledger.context(cid)] == ["system", "user", "assistant", "tool", "tool", "user",
                                                            "assistant"]


def test_a_malformed_message_writes_nothing(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url) as ledger:
        cid = ledger.start("s")
        with pytest.raises(cl.InvalidMessageError):
            append(ledger, cid, {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                {"type": "tool_result"}]})
        assert ledger.context(cid) == [{"role": "system", "content": "s"}]


def test_plain_text_replies_are_rendered_from_their_originals(sqlite_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(sqlite_url) as ledger:
        server.script(Reply("Hello Ada."))
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        cid = ledger.start(None)
        ledger.append(cid, {"role": "user", "content": "I am Ada."})
        body = render_anthropic(context_entries(ledger, cid).entries)
        append(ledger, cid, client.messages.create(model="claude-haiku-4-5", max_tokens=50, **body))
        rendered = render_anthropic(context_entries(ledger, cid).entries)
        assert rendered == {"system": [], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "I am Ada."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello Ada."}]}]}
