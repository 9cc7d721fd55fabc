"""The fake servers compact as the providers do: the real ``openai`` and ``anthropic``
SDKs against ``FakeOpenAIServer`` (``responses.compact``, ``context_management``
compaction, opaque items only it accepts back) and ``FakeAnthropicServer`` (compaction
blocks under the beta header, every block before the newest one dropped)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from contextledger.testing import FakeAnthropicServer, FakeOpenAIServer, Reply, anthropic_request_violations
from contextledger.testing.compaction import ANTHROPIC_COMPACTION_BETA, model_family

HISTORY: list[Any] = [
    {"type": "message", "role": "user", "content": "Plan a trip to Oslo."},
    {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "Oslo"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "Oslo is cold in winter."},
    {"type": "message", "role": "assistant", "content": "Pack warm clothes."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And hotels?"}]},
]


def _client(server: FakeOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)


def test_responses_compact_gives_the_user_messages_and_one_opaque_compaction_item() -> None:
    with FakeOpenAIServer() as server:
        compacted = _client(server).responses.compact(model="gpt-4.1", input=HISTORY)
        assert compacted.object == "response.compaction"
        kinds = [(item.type, getattr(item, "role", None)) for item in compacted.output]
        assert kinds == [("message", "user"), ("message", "user"), ("compaction", None)]
        item = compacted.output[-1]
        assert item.encrypted_content and "Oslo" not in item.encrypted_content  # opaque
        assert compacted.usage.input_tokens > 0 and compacted.usage.output_tokens > 0
        assert server.requests_to("compact")[0].body["input"] == HISTORY
        assert server.compactions.issued == 1 and server.request_count == 1


def test_a_compaction_item_is_accepted_back_only_by_its_issuer_and_model_family() -> None:
    with FakeOpenAIServer() as server, FakeOpenAIServer() as other:
        client = _client(server)
        item = client.responses.compact(model="gpt-4.1", input=HISTORY).output[-1].model_dump()
        follow = [item, {"type": "message", "role": "user", "content": "Thanks."}]
        assert client.responses.create(model="gpt-4.1-mini", input=follow).status == "completed"
        with pytest.raises(openai.BadRequestError, match="family"):
            client.responses.create(model="gpt-5", input=follow)
        with pytest.raises(openai.BadRequestError, match="not issued here"):
            _client(other).responses.create(model="gpt-4.1", input=follow)
        forged = [{**item, "encrypted_content": item["encrypted_content"][:-2] + "xx"}, follow[1]]
        with pytest.raises(openai.BadRequestError, match="not issued here"):
            client.responses.create(model="gpt-4.1", input=forged)
        assert [index for index, _ in server.violations] == [2, 3]
        assert model_family("gpt-4.1-2025-04-14") == model_family("gpt-4.1-nano") == "gpt-4.1"


def test_context_management_compacts_a_request_over_its_threshold() -> None:
    with FakeOpenAIServer() as server:
        server.script(Reply("small"), Reply("big"))
        client = _client(server)
        manage: Any = [{"type": "compaction", "compact_threshold": 40}]
        small = client.responses.create(model="gpt-4.1", input=HISTORY[:1], context_management=manage)
        assert [item.type for item in small.output] == ["message"]
        big = client.responses.create(model="gpt-4.1", input=HISTORY * 3, context_management=manage)
        assert [item.type for item in big.output] == ["compaction", "message"]
        assert big.usage is not None and big.usage.input_tokens > 40
        # The compacted item stands for the whole input: sent back, it costs its summary only.
        after = client.responses.create(model="gpt-4.1", input=[big.output[0].model_dump(), HISTORY[0]])
        assert after.usage is not None and after.usage.input_tokens < big.usage.input_tokens


def test_a_strict_server_refuses_an_input_that_breaks_the_rules() -> None:
    with FakeOpenAIServer(strict=True) as server:
        client = _client(server)
        with pytest.raises(openai.BadRequestError, match="No tool output found"):
            client.responses.create(model="gpt-4.1", input=HISTORY[:2])
        assert client.responses.create(model="gpt-4.1", input=HISTORY).status == "completed"
        assert server.violations == [(0, ["end: No tool output found for function call c1"])]
    with FakeOpenAIServer() as lenient:  # the default checks compaction items only
        assert _client(lenient).responses.create(model="gpt-4.1", input=HISTORY[:2]).status == "completed"


MESSAGES: list[Any] = [
    {"role": "user", "content": "Plan a trip to Oslo, with every detail you can think of. " * 8},
    {"role": "assistant", "content": "Pack warm clothes and book early. " * 8},
    {"role": "user", "content": "And hotels?"},
]
MANAGE: Any = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 100}}]}


def _anthropic(server: FakeAnthropicServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)


def test_anthropic_compacts_under_the_beta_header_with_a_compaction_block_first() -> None:
    with FakeAnthropicServer() as server:
        server.script(Reply("Book the harbour hotel."))
        reply = _anthropic(server).beta.messages.create(
            model="claude-haiku-4-5",
            max_tokens=100,
            messages=MESSAGES,
            context_management=MANAGE,
            betas=[ANTHROPIC_COMPACTION_BETA],
        )
        assert [block.type for block in reply.content] == ["compaction", "text"]
        summary = reply.content[0]
        assert summary.type == "compaction" and summary.content is not None
        assert summary.content.startswith("Compacted: Plan a trip to Oslo")
        iterations = reply.usage.iterations or []
        assert [i.type for i in iterations] == ["compaction", "message"]
        assert iterations[0].input_tokens > 100 > reply.usage.input_tokens
        assert server.compactions == 1


def test_anthropic_refuses_compaction_without_the_beta_header() -> None:
    with FakeAnthropicServer() as server:
        client = _anthropic(server)
        with pytest.raises(anthropic.BadRequestError, match="beta"):
            client.messages.create(
                model="claude-haiku-4-5",
                max_tokens=100,
                messages=MESSAGES,
                extra_body={"context_management": MANAGE},
            )
        compacted = [{"role": "assistant", "content": [{"type": "compaction", "content": "Earlier: Oslo."}]}]
        with pytest.raises(anthropic.BadRequestError, match="beta"):
            client.messages.create(
                model="claude-haiku-4-5", max_tokens=100, messages=[*compacted, MESSAGES[2]]
            )
        assert len(server.violations) == 2


def test_anthropic_reads_a_request_from_its_newest_compaction_block_on() -> None:
    block = {"type": "compaction", "content": "Earlier: a trip to Oslo."}
    dangling = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}
    # Before the block: an unanswered tool_use and two assistant turns in a row, all dropped.
    messages = [
        dangling,
        {"role": "assistant", "content": [{"type": "text", "text": "x"}, block]},
        MESSAGES[2],
    ]
    assert anthropic_request_violations({"model": "m", "max_tokens": 5, "messages": messages}) == []
    assert anthropic_request_violations({"model": "m", "max_tokens": 5, "messages": [dangling, MESSAGES[2]]})
    in_user = [{"role": "user", "content": [block]}]
    assert any(
        "assistant turns" in p for p in anthropic_request_violations({"messages": in_user}, count_tokens=True)
    )
    empty = [{"role": "assistant", "content": [{**block, "content": ""}]}, MESSAGES[2]]
    assert any("non-empty" in p for p in anthropic_request_violations({"messages": empty}, count_tokens=True))
    with FakeAnthropicServer() as server:
        client = _anthropic(server)
        counted = client.beta.messages.count_tokens(
            model="claude-haiku-4-5", messages=messages, betas=[ANTHROPIC_COMPACTION_BETA]
        )
        whole = client.beta.messages.count_tokens(
            model="claude-haiku-4-5", messages=MESSAGES, betas=[ANTHROPIC_COMPACTION_BETA]
        )
        assert counted.input_tokens < whole.input_tokens
        reply = client.beta.messages.create(
            model="claude-haiku-4-5", max_tokens=50, messages=messages, betas=[ANTHROPIC_COMPACTION_BETA]
        )
        assert reply.content[0].type == "text"


def test_a_failed_anthropic_compaction_is_a_block_with_null_content() -> None:
    with FakeAnthropicServer() as server:
        server.compaction_summary = lambda request: None
        reply = _anthropic(server).beta.messages.create(
            model="claude-haiku-4-5",
            max_tokens=100,
            messages=MESSAGES,
            context_management=MANAGE,
            betas=[ANTHROPIC_COMPACTION_BETA],
        )
        assert reply.content[0].type == "compaction" and reply.content[0].content is None
