"""A Gemini conversation kept in a real ledger (a SQLite file, PostgreSQL): the real
google-genai client's replies go in, the working memory goes back out to the local
fake Gemini API, which refuses anything Gemini would, and comes back unchanged."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

import contextledger as cl
from contextledger.application.formats.gemini import GeminiAdapter, open_calls_of
from contextledger.application.formats.gemini_render import render_gemini
from contextledger.application.formats.originals import (
    context_entries,
    extend_with_originals,
    transcript_originals,
)
from contextledger.testing import FakeGeminiServer, GeminiReply
from tests.support.gemini_wire import gemini_client, weather_in_paris_and_rome

adapter = GeminiAdapter()


def append(ledger: cl.Ledger, cid: Any, obj: Any) -> None:
    decoded = adapter.decode(obj, open_calls=ledger.store.read(cid, open_calls_of))
    extend_with_originals(ledger, cid, list(zip(decoded.messages, decoded.originals, strict=True)))


def send(client: genai.Client, ledger: cl.Ledger, cid: Any) -> types.GenerateContentResponse:
    request = render_gemini(context_entries(ledger, cid).entries)
    return client.models.generate_content(
        model="gemini-2.5-flash",
        contents=request["contents"],
        config={"system_instruction": request["system_instruction"]},
    )


@pytest.mark.parametrize(
    "url_fixture", ["sqlite_url", pytest.param("postgres_url", marks=pytest.mark.postgres)]
)
def test_parallel_calls_with_thought_signatures_survive_the_store_and_the_wire(
    url_fixture: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(url_fixture)
    with FakeGeminiServer() as server, cl.Ledger.open(url, run_policy=False) as ledger:
        client = gemini_client(server)
        server.script(
            weather_in_paris_and_rome(
                thought="Two lookups at once.",
                thought_signature=b"\x00\xfe\xffsig",
                thoughts_tokens=12,
            ),
            GeminiReply("Rome is warmer."),
        )
        cid = ledger.start(system_prompt="Be brief.")
        question = types.Content(role="user", parts=[types.Part(text="Paris or Rome, which is warmer?")])
        append(ledger, cid, question)
        reply = send(client, ledger, cid)
        assert reply.usage_metadata is not None and reply.usage_metadata.thoughts_token_count == 12
        append(ledger, cid, reply)
        model_turn = reply.candidates[0].content  # type: ignore[index]
        assert model_turn is not None
        answers = types.Content(
            role="user",
            parts=[
                types.Part(function_response=types.FunctionResponse(name="weather", response={"c": 20})),
                types.Part(function_response=types.FunctionResponse(name="weather", response={"c": 25})),
            ],
        )
        append(ledger, cid, answers)
        final = send(client, ledger, cid)
        append(ledger, cid, final)

        # What the second call sent: the Contents exactly as they came, signatures and all.
        sent = server.requests[1].body["contents"]
        assert base64.urlsafe_b64decode(sent[1]["parts"][1]["thoughtSignature"]) == b"\x00\xfe\xffsig"
        assert server.rejected == []
        dumps = [c.model_dump(mode="json", exclude_none=True) for c in (question, model_turn, answers)]
        assert render_gemini(context_entries(ledger, cid).entries)["contents"][:3] == dumps
        assert types.Content.model_validate(dumps[1]).parts[1].thought_signature == b"\x00\xfe\xffsig"  # type: ignore[index]

        # The chat form the ledger counts and summarizes: unique ids, each call answered.
        chat = ledger.context(cid)
        calls = chat[2]["tool_calls"]  # type: ignore[typeddict-item]
        assert len({c["id"] for c in calls}) == 2
        assert [m.get("tool_call_id") for m in chat[3:5]] == [c["id"] for c in calls]

    # Reopened: the originals were stored, not just held in memory.
    with cl.Ledger.open(url, run_policy=False) as ledger:
        stored = [original for _, _, original in transcript_originals(ledger, cid)]
        assert stored[1] is not None and stored[1]["content"] == dumps[1]
        assert stored[3] == {"format": "gemini", "version": 1, "continues": True}


def test_the_fake_refuses_what_gemini_refuses_and_counts_tokens() -> None:
    with FakeGeminiServer() as server:
        client = gemini_client(server)
        orphan = [{"role": "user", "parts": [{"function_response": {"name": "f", "response": {}}}]}]
        with pytest.raises(errors.ClientError) as caught:
            client.models.generate_content(model="gemini-2.5-flash", contents=orphan)
        assert caught.value.code == 400 and "without calls" in str(caught.value.message)
        assert len(server.rejected) == 1 and server.answers == []
        counted = client.models.count_tokens(model="gemini-2.5-flash", contents="How many tokens is this?")
        assert counted.total_tokens is not None and counted.total_tokens > 0
        answer = client.models.generate_content(model="gemini-2.5-flash", contents="Hello there")
        assert answer.text == "Summary: Hello there"
        assert [r.path.rpartition(":")[2] for r in server.requests] == [
            "generateContent",
            "countTokens",
            "generateContent",
        ]
