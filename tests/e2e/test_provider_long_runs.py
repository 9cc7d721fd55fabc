"""200 model calls per provider, each sent with the real SDK to the local fake server as
``ledger.context(cid, format=...)`` gives it, under a policy that forces summaries and
placeholders: every request valid by the provider's rules, within the policy's budget,
summaries present once the threshold passes, and each recorded version's context equal
to what was sent then."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic

import contextledger as cl
from contextledger.testing import (
    Blocks,
    Call,
    FakeAnthropicServer,
    FakeGeminiServer,
    GeminiReply,
    ScriptedSummarizer,
    anthropic_request_violations,
    gemini_request_violations,
)
from contextledger.testing.fake_anthropic import thinking
from tests.support.gemini_wire import gemini_client

TURNS = 200
POLICY = cl.ReductionPolicy(
    trigger_messages=40, keep_messages=12, keep_tool_results=4, max_context_tokens=6000
)


def _kind(turn: int) -> str:
    """The model's scripted move at ``turn``: text, one tool call, a parallel call, thinking."""
    return ("text", "tool", "parallel", "thinking")[turn % 4]


def _anthropic_reply(turn: int) -> Blocks:
    kind = _kind(turn)
    use = {"type": "tool_use", "name": "lookup", "input": {"turn": turn}}
    if kind == "tool":
        return Blocks([{"type": "text", "text": f"Looking up {turn}."}, {**use, "id": f"toolu_{turn}_a"}])
    if kind == "parallel":
        return Blocks(
            [
                thinking(f"Two lookups at {turn}."),
                {**use, "id": f"toolu_{turn}_a"},
                {**use, "id": f"toolu_{turn}_b", "input": {"turn": turn, "second": True}},
            ]
        )
    if kind == "thinking":
        return Blocks([thinking(f"Reflecting on {turn}."), {"type": "text", "text": f"Answer {turn}."}])
    return Blocks([{"type": "text", "text": f"Reply {turn}: " + "details " * 20}])


def _gemini_reply(turn: int) -> GeminiReply:
    kind = _kind(turn)
    if kind == "tool":
        return GeminiReply(f"Looking up {turn}.", calls=[Call("lookup", {"turn": turn})])
    if kind == "parallel":  # id-less calls, as Gemini sends them, with a signature
        return GeminiReply(
            calls=[Call("lookup", {"turn": turn}), Call("lookup", {"turn": turn, "n": 2})],
            thought=f"Two lookups at {turn}.",
            thought_signature=b"sig%d" % turn,
        )
    if kind == "thinking":
        return GeminiReply(f"Answer {turn}.", thought=f"Reflecting on {turn}.")
    return GeminiReply(f"Reply {turn}: " + "details " * 20)


def _run(
    ledger: cl.Ledger,
    cid: Any,
    send: Callable[[dict[str, Any]], Any],
    answer: Callable[[Any, int], Any],
    render: Callable[[int | None], dict[str, Any]],
    first: Any,
) -> list[tuple[int, dict[str, Any]]]:
    """The loop: append the user turn (or the tool results), render, send, append the
    reply; summaries are recorded as soon as the policy asks. Returns (version, sent)."""
    summarizer = ScriptedSummarizer()
    sent: list[tuple[int, dict[str, Any]]] = []
    ledger.append(cid, first)
    for turn in range(TURNS):
        request = ledger.pending_summary(cid)
        if request is not None:
            ledger.record_summary(request, summarizer.summarize(request))
        memory = ledger.working_memory(cid)
        assert memory.tokens <= POLICY.max_context_tokens
        body = render(None)
        sent.append((memory.version, body))
        reply = send(body)
        ledger.append(cid, reply)
        ledger.append(cid, answer(reply, turn))
    return sent


def test_two_hundred_anthropic_turns_stay_valid_bounded_and_replayable(sqlite_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        server.script(*[_anthropic_reply(turn) for turn in range(TURNS)])
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        cid = ledger.start("You look things up.", model="claude-haiku-4-5", policy=POLICY)

        def answer(reply: Any, turn: int) -> dict[str, Any]:
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                return {"role": "user", "content": f"Next question {turn}: " + "more " * 10}
            return {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": u.id, "content": f"result {u.id} " + "data " * 15}
                    for u in uses
                ],
            }

        sent = _run(
            ledger,
            cid,
            lambda body: client.messages.create(model="claude-haiku-4-5", max_tokens=100, **body),
            answer,
            lambda version: ledger.context(cid, version=version, format="anthropic", cache=True),
            {"role": "user", "content": "Start."},
        )
        assert server.violations == [] and len(server.requests) == TURNS
        for version, body in sent:
            assert anthropic_request_violations({"model": "m", "max_tokens": 1, **body}) == []
            assert ledger.context(cid, version=version, format="anthropic", cache=True) == body
        for recorded, (_, body) in zip(server.requests, sent, strict=True):
            assert {k: recorded.body[k] for k in ("system", "messages")} == body
        summarized = [
            i
            for i, (_, body) in enumerate(sent)
            if any(b["text"].startswith("Summary of") for b in body["system"])
        ]
        assert summarized and summarized == list(range(summarized[0], TURNS)) and summarized[0] < 40
        assert any("thinking" in str(body["messages"]) for _, body in sent[-5:])
        assert len(ledger.summaries(cid)) >= 5


def test_two_hundred_gemini_turns_stay_valid_bounded_and_replayable(sqlite_url: str) -> None:
    with FakeGeminiServer() as server, cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        server.script(*[_gemini_reply(turn) for turn in range(TURNS)])
        client = gemini_client(server)
        cid = ledger.start("You look things up.", model="gemini-2.5-flash", policy=POLICY)

        def answer(reply: Any, turn: int) -> dict[str, Any]:
            calls = [p.function_call for p in reply.candidates[0].content.parts if p.function_call]
            if not calls:
                return {"role": "user", "parts": [{"text": f"Next question {turn}: " + "more " * 10}]}
            return {
                "role": "user",
                "parts": [
                    {"function_response": {"name": c.name, "response": {"turn": turn, "data": "data " * 15}}}
                    for c in calls
                ],
            }

        def send(body: dict[str, Any]) -> Any:
            return client.models.generate_content(
                model="gemini-2.5-flash",
                contents=body["contents"],
                config={"system_instruction": body["system_instruction"]},
            )

        sent = _run(
            ledger,
            cid,
            send,
            answer,
            lambda version: ledger.context(cid, version=version, format="gemini"),
            {"role": "user", "parts": [{"text": "Start."}]},
        )
        assert server.rejected == [] and server.request_count == TURNS
        for version, body in sent:
            assert (
                gemini_request_violations(body["contents"], system_instruction=body["system_instruction"])
                == []
            )
            assert ledger.context(cid, version=version, format="gemini") == body
        summarized = [
            i
            for i, (_, body) in enumerate(sent)
            if body["system_instruction"] and "Summary of" in body["system_instruction"]["parts"][0]["text"]
        ]
        assert summarized and summarized == list(range(summarized[0], TURNS)) and summarized[0] < 40
        assert any("thought_signature" in str(body["contents"]) for _, body in sent[-5:])
