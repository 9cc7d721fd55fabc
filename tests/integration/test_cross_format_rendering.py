"""What crosses between formats that did not before: an OpenAI PDF file part, a
whitespace-only assistant text, a system message inside the conversation, and an
Anthropic tool result with ``is_error`` and an image; each rendered by
``context(format=...)`` from a SQLite file and PostgreSQL and sent with the real SDKs
to the local fake servers, which check every request against the providers' rules."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import contextledger as cl
from contextledger.testing import FakeAnthropicServer, FakeGeminiServer, GeminiReply
from tests.support.gemini_wire import gemini_client

MODEL = "claude-haiku-4-5"
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg=="
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def _send(ledger: cl.Ledger, cid: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The context rendered for Anthropic and for Gemini, each sent through its SDK to
    a fake server that accepted it: the body Anthropic's server received, the Gemini
    request as rendered (the SDK changes the case of some keys on the way)."""
    with FakeAnthropicServer() as claude, FakeGeminiServer() as gemini:
        client = anthropic.Anthropic(base_url=claude.base_url, api_key="sk-ant-test", max_retries=0)
        client.messages.create(model=MODEL, max_tokens=50, **ledger.context(cid, format="anthropic"))
        claude_body = claude.requests[-1].body
        assert claude.violations == []
        claude_body.pop("model"), claude_body.pop("max_tokens")
        gemini.script(GeminiReply("ok"))
        body = ledger.context(cid, format="gemini")
        google = gemini_client(gemini)  # kept: the client closes its connection when collected
        google.models.generate_content(
            model="gemini-2.5-flash",
            contents=body["contents"],
            config={"system_instruction": body["system_instruction"]},
        )
        assert gemini.rejected == [] and gemini.request_count == 1
        return claude_body, body


def test_an_openai_pdf_file_part_is_a_document_for_anthropic_and_inline_pdf_for_gemini(
    shared_url: str,
) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start("Read documents.")
        ledger.append(
            cid,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarize this."},
                    {
                        "type": "file",
                        "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
                    },
                ],
            },
        )
        claude, gemini = _send(ledger, cid)
        assert claude["messages"] == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarize this."},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                        "title": "report.pdf",
                    },
                ],
            }
        ]
        assert gemini["contents"] == [
            {
                "role": "user",
                "parts": [
                    {"text": "Summarize this."},
                    {"inline_data": {"mime_type": "application/pdf", "data": PDF}},
                ],
            }
        ]
        # A file Anthropic cannot be given (an OpenAI file id) is named in a text block.
        ledger.append(cid, {"role": "assistant", "content": "It is a report."})
        ledger.append(cid, {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]})
        rendered = ledger.context(cid, format="anthropic")["messages"]
        assert rendered[-1] == {"role": "user", "content": [{"type": "text", "text": "[file: file-abc]"}]}


def test_a_whitespace_only_assistant_text_is_left_out_for_anthropic(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start("Be brief.")
        ledger.extend(
            cid,
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": " "},
                {"role": "user", "content": "hello?"},
                {
                    "role": "assistant",
                    "content": "\n\t",
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "  "},
            ],
        )
        claude, _ = _send(ledger, cid)
        assert claude["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "hello?"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "call_1", "name": "look", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1"}]},
        ]


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": " "}],
        [{"type": "text", "text": "fine"}, {"type": "text", "text": "\n"}],
        " \n",
    ],
)
def test_the_fake_anthropic_server_refuses_whitespace_only_text_as_the_api_does(content: Any) -> None:
    with FakeAnthropicServer() as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="non-whitespace text"):
            client.messages.create(
                model=MODEL,
                max_tokens=5,
                messages=[
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": "again"},
                ],
            )
        assert len(server.violations) == 1


def test_a_system_message_inside_the_conversation_stays_in_its_place(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start("Be brief.")
        ledger.extend(
            cid,
            [
                {"role": "system", "content": "The user is Ada."},  # before the conversation: an instruction
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Hello Ada."},
                {"role": "developer", "content": "From now on, answer in French."},
                {"role": "user", "content": "How are you?"},
            ],
        )
        claude, gemini = _send(ledger, cid)
        assert claude["system"] == [
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": "The user is Ada."},
        ]
        assert claude["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello Ada."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "[developer] From now on, answer in French."},
                    {"type": "text", "text": "How are you?"},
                ],
            },
        ]
        assert gemini["system_instruction"]["parts"] == [{"text": "Be brief.\n\nThe user is Ada."}]
        assert gemini["contents"] == [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "Hello Ada."}]},
            {
                "role": "user",
                "parts": [{"text": "[developer] From now on, answer in French."}, {"text": "How are you?"}],
            },
        ]


ANTHROPIC_ERROR_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "Take a screenshot."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "shot", "input": {}}]},
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "is_error": True,
                "content": [
                    {"type": "text", "text": "boom"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            }
        ],
    },
]


def test_an_anthropic_error_result_with_an_image_reaches_gemini_as_an_error_with_the_image(
    shared_url: str,
) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start("Use the tools.")
        ledger.extend(cid, ANTHROPIC_ERROR_TURNS)
        _, gemini = _send(ledger, cid)
        assert gemini["contents"][-1] == {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": "toolu_01",
                        "name": "shot",
                        "response": {"error": "boom"},
                        "parts": [{"inline_data": {"mime_type": "image/png", "data": PNG}}],
                    }
                }
            ],
        }
        # The chat form keeps its text, the image described (chat tool messages are text only).
        assert ledger.context(cid)[-1]["content"] == "boom\n[image: image/png]"
        # Once a placeholder stands for the result, Gemini gets the placeholder.
        reduced = ledger.start("Use the tools.", policy=cl.ReductionPolicy(keep_tool_results=1))
        ledger.extend(reduced, ANTHROPIC_ERROR_TURNS)
        for n in (2, 3):
            ledger.extend(
                reduced,
                [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": f"toolu_0{n}", "name": "shot", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": f"toolu_0{n}", "content": "ok"}],
                    },
                ],
            )
        contents = ledger.context(reduced, format="gemini")["contents"]
        response = contents[2]["parts"][0]["function_response"]
        assert response["id"] == "toolu_01" and "parts" not in response
        assert set(response["response"]) == {"output"} and "boom" not in response["response"]["output"]
