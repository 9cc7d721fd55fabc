"""Gemini Contents decode to chat messages with a lossless original, and the working
memory renders back as a request Gemini accepts: the same Contents where nothing was
reduced, placeholder responses where tool results were, converted chat messages."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.formats.gemini import GeminiAdapter, open_calls_of, unanswered_calls
from contextledger.application.formats.gemini_render import CONTINUED, render_gemini
from contextledger.application.formats.originals import ContextEntry, context_entries, extend_with_originals
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.testing import assert_valid_gemini_request, gemini_request_violations

adapter = GeminiAdapter()


def ids(prefix: str = "g") -> Any:
    counter = itertools.count()
    return lambda: f"{prefix}{next(counter)}"


def parallel_turns() -> list[types.Content]:
    """Two parallel calls without ids, a thought with its signature, answers by name."""
    return [
        types.Content(role="user", parts=[types.Part(text="Weather in Paris and Rome?")]),
        types.Content(
            role="model",
            parts=[
                types.Part(text="Two lookups.", thought=True, thought_signature=b"\x00\xfbsig"),
                types.Part(
                    function_call=types.FunctionCall(name="weather", args={"city": "Paris"}),
                    thought_signature=b"\xff\x01call",
                ),
                types.Part(function_call=types.FunctionCall(name="weather", args={"city": "Rome"})),
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(function_response=types.FunctionResponse(name="weather", response={"c": 20})),
                types.Part(function_response=types.FunctionResponse(name="weather", response={"c": 25})),
                types.Part(text="Also, which is warmer?"),
            ],
        ),
        types.Content(role="model", parts=[types.Part(text="Rome, at 25.")]),
    ]


def append_all(ledger: cl.Ledger, cid: Any, contents: list[Any]) -> None:
    for content in contents:
        decoded = adapter.decode(
            content, open_calls=ledger.store.read(cid, open_calls_of), new_id=ids(f"p{cid.hex[:4]}")
        )
        extend_with_originals(ledger, cid, list(zip(decoded.messages, decoded.originals, strict=True)))


def test_a_model_turn_is_one_assistant_message_and_thoughts_stay_in_the_original() -> None:
    decoded = adapter.decode(parallel_turns()[1], new_id=ids())
    (message,) = decoded.messages
    assert message.role == "assistant" and message.content is None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()] == [
        ("g0", "weather", '{"city": "Paris"}'),
        ("g1", "weather", '{"city": "Rome"}'),
    ]
    original = decoded.originals[0]
    assert original is not None
    assert original["content"] == parallel_turns()[1].model_dump(mode="json", exclude_none=True)
    assert original["call_ids"] == [None, "g0", "g1"]
    assert "g0" not in str(original["content"])  # generated ids stay out of the Content


def test_responses_without_ids_answer_the_oldest_open_call_of_their_name() -> None:
    open_calls = [("c1", "weather"), ("c2", "time"), ("c3", "weather")]
    decoded = adapter.decode(parallel_turns()[2], open_calls=open_calls)
    assert [(m.role, m.tool_call_id, m.content) for m in decoded.messages] == [
        ("tool", "c1", '{"c": 20}'),
        ("tool", "c3", '{"c": 25}'),
        ("user", None, "Also, which is warmer?"),
    ]
    assert decoded.originals[1] == {"format": "gemini", "version": 1, "continues": True}
    with pytest.raises(InvalidMessageError, match="no open call") as caught:
        adapter.decode(parallel_turns()[2], open_calls=[("c2", "time")])
    assert caught.value.open_calls == ["c2"]


def test_a_response_object_gives_its_first_candidate_and_its_usage() -> None:
    response = types.GenerateContentResponse(
        candidates=[types.Candidate(content=parallel_turns()[3], finish_reason=types.FinishReason.STOP)],
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=100,
            candidates_token_count=7,
            thoughts_token_count=30,
            cached_content_token_count=64,
        ),
    )
    assert adapter.accepts(response)
    decoded = adapter.decode(response)
    assert decoded.messages[0].content == "Rome, at 25."
    assert decoded.usage == cl.application.formats.base.ProviderUsage(100, 37, cache_read_tokens=64)


def test_inline_data_becomes_a_data_uri_and_camel_case_keys_are_read() -> None:
    decoded = adapter.decode(
        {
            "role": "user",
            "parts": [{"inlineData": {"mimeType": "image/png", "data": b"\x89PNG"}}, {"text": "what is it?"}],
        }
    )
    assert decoded.messages[0].to_openai()["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
        {"type": "text", "text": "what is it?"},
    ]
    original = decoded.originals[0]
    assert original is not None and original["content"]["parts"][0] == {
        "inline_data": {"mime_type": "image/png", "data": "iVBORw=="}
    }


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ({"role": "system", "parts": [{"text": "x"}]}, "role"),
        ({"role": "user", "parts": []}, "non-empty list of parts"),
        (
            {"role": "user", "parts": [{"text": "a", "inline_data": {"data": "", "mime_type": "x"}}]},
            "exactly one",
        ),
        ({"role": "user", "parts": [{"banana": 1}]}, "unknown fields"),
        ({"role": "user", "parts": [{"text": 3}]}, "must be a string"),
        ({"role": "user", "parts": [{"function_call": {"name": "f"}}]}, "user turn cannot hold"),
        ({"role": "model", "parts": [{"function_call": {"args": {}}}]}, "needs a name"),
        (
            {"role": "model", "parts": [{"function_call": {"name": "f", "args": [1]}}]},
            "args must be an object",
        ),
        ({"role": "user", "parts": [{"text": "x", "thought": True}]}, "only thought parts"),
        ({"role": "user", "parts": [{"text": "x"}], "extra": 1}, "unknown fields"),
        ({"candidates": []}, "no candidates"),
        ({"candidates": [{"finish_reason": "SAFETY"}]}, "SAFETY"),
    ],
)
def test_malformed_input_is_refused_with_a_typed_error(content: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        adapter.decode(content)


def test_other_formats_are_not_taken_for_gemini() -> None:
    assert not adapter.accepts({"role": "user", "content": "hi"})
    assert not adapter.accepts({"kind": "request", "parts": []})  # Pydantic AI's dump
    assert not adapter.accepts({"choices": []})
    assert adapter.accepts({"role": "model", "parts": [{"text": "x"}]})


def test_a_ledger_round_trip_gives_the_contents_back_and_reduces_to_placeholders() -> None:
    turns = parallel_turns()
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(system_prompt="Be brief.")
        append_all(ledger, cid, turns)
        ledger.append(cid, {"role": "user", "content": "thanks"})
        request = render_gemini(context_entries(ledger, cid).entries)
        assert request["system_instruction"] == {"parts": [{"text": "Be brief."}]}
        assert request["contents"][:4] == [t.model_dump(mode="json", exclude_none=True) for t in turns]
        assert request["contents"][4] == {"role": "user", "parts": [{"text": "thanks"}]}
        assert_valid_gemini_request(request["contents"], system_instruction=request["system_instruction"])
        assert (
            types.Content.model_validate(request["contents"][1]).parts[1].thought_signature == b"\xff\x01call"
        )

    entries = [ContextEntry(e.message, e.original, e.reduced, e.position) for e in _entries(turns)]
    first_tool = next(i for i, e in enumerate(entries) if e.message["role"] == "tool")
    reduced = entries[first_tool]
    entries[first_tool] = ContextEntry(
        {**reduced.message, "content": "[result omitted]"}, reduced.original, True, reduced.position
    )
    contents = render_gemini(entries)["contents"]
    assert contents[2]["parts"][0] == {
        "function_response": {"name": "weather", "response": {"output": "[result omitted]"}}
    }
    assert contents[2]["parts"][1:] == turns[2].model_dump(mode="json", exclude_none=True)["parts"][1:]
    assert gemini_request_violations(contents) == []


def _entries(contents: list[types.Content]) -> list[ContextEntry]:
    out: list[ContextEntry] = []
    open_calls: list[tuple[str, str]] = []
    new_id = ids()
    for content in contents:
        decoded = adapter.decode(content, open_calls=open_calls, new_id=new_id)
        for message, original in zip(decoded.messages, decoded.originals, strict=True):
            out.append(ContextEntry(message.to_openai(), original, False, len(out)))
        open_calls = unanswered_calls([e.message for e in out])
    return out


def test_chat_form_messages_summaries_and_a_leading_model_turn_are_converted() -> None:
    chat = [
        {"role": "assistant", "content": "Earlier answer."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}},
                {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"hits": 2}'},
        {"role": "tool", "tool_call_id": "c2", "content": "plain"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
            ],
        },
    ]
    summary = {"role": "system", "content": "Summary of the earlier conversation (messages 0-3):\nThey met."}
    entries = [
        ContextEntry({"role": "system", "content": "Sys."}, None, False, None),
        ContextEntry(summary, None, False, None),
        *(ContextEntry(m, None, False, 4 + i) for i, m in enumerate(chat)),
    ]
    request = render_gemini(entries)
    assert request["system_instruction"] == {"parts": [{"text": "Sys.\n\n" + summary["content"]}]}
    contents = request["contents"]
    assert contents[0]["role"] == "user" and contents[1] == {
        "role": "model",
        "parts": [
            {"text": "Earlier answer."},
            {"function_call": {"id": "c1", "name": "lookup", "args": {"q": 1}}},
            {"function_call": {"id": "c2", "name": "lookup", "args": {"arguments": "not json"}}},
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"function_response": {"id": "c1", "name": "lookup", "response": {"hits": 2}}},
            {"function_response": {"id": "c2", "name": "lookup", "response": {"output": "plain"}}},
            {"text": "look"},
            {"inline_data": {"mime_type": "image/jpeg", "data": "AAAA"}},
        ],
    }
    assert gemini_request_violations(contents, system_instruction=request["system_instruction"]) == []
    as_user = render_gemini(entries, summary="user")
    assert as_user["system_instruction"] == {"parts": [{"text": "Sys."}]}
    assert as_user["contents"][0] == {"role": "user", "parts": [{"text": summary["content"]}]}
    assert render_gemini(entries[2:3])["contents"][0] == {"role": "user", "parts": [{"text": CONTINUED}]}
    with pytest.raises(InvalidArgumentError):
        render_gemini(entries, summary="model")  # type: ignore[arg-type]


def test_the_checker_names_each_broken_rule() -> None:
    call = {"functionCall": {"name": "f", "args": {}}}
    answer = {"functionResponse": {"name": "f", "response": {}}}
    assert gemini_request_violations([]) == ["contents: no turns"]
    assert gemini_request_violations([{"role": "model", "parts": [{"text": "x"}]}]) == [
        "contents[0]: the first turn must be a user turn"
    ]
    assert "role must be" in gemini_request_violations([{"role": "assistant", "parts": [{"text": "x"}]}])[0]
    assert gemini_request_violations([{"role": "user", "parts": [answer]}]) == [
        "contents[0]: function responses without calls in the turn before"
    ]
    unanswered = [
        {"role": "user", "parts": [{"text": "x"}]},
        {"role": "model", "parts": [call, call]},
        {"role": "user", "parts": [answer]},
    ]
    assert gemini_request_violations(unanswered) == ["contents[2]: calls ['f(None)'] never answered"]
    wrong_id = [
        {"role": "user", "parts": [{"text": "x"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "id": "a"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "id": "b", "response": {}}}]},
    ]
    assert "answers no call" in gemini_request_violations(wrong_id)[0]
    assert gemini_request_violations([{"role": "user", "parts": []}]) == [
        "contents[0]: a turn needs at least one part"
    ]
    with pytest.raises(AssertionError, match="first turn"):
        assert_valid_gemini_request([{"role": "model", "parts": [{"text": "x"}]}])


# ------------------------------------------------------------------ the property


@st.composite
def working_memories(draw: st.DrawFn) -> tuple[list[ContextEntry], list[dict[str, Any]]]:
    """A valid conversation in mixed Gemini and chat form, as the ledger may show it:
    some tool results reduced, a prefix summarized away. Also the Contents that stand
    whole and unreduced in it."""
    entries: list[ContextEntry] = []
    groups: list[tuple[int, int, dict[str, Any]]] = []  # first index, size, content
    starts: list[int] = []
    new_id = ids()
    names = st.sampled_from(["lookup", "weather", "book"])

    def add_chat(message: dict[str, Any]) -> None:
        entries.append(ContextEntry(message, None, False, len(entries)))

    def add_gemini(content: dict[str, Any], open_calls: list[tuple[str, str]]) -> list[Any]:
        decoded = adapter.decode(content, open_calls=open_calls, new_id=new_id)
        groups.append((len(entries), len(decoded.messages), decoded.originals[0]["content"]))  # type: ignore[index]
        for message, original in zip(decoded.messages, decoded.originals, strict=True):
            entries.append(ContextEntry(message.to_openai(), original, False, len(entries)))
        return list(decoded.messages)

    for turn in range(draw(st.integers(1, 4))):
        starts.append(len(entries))
        if draw(st.booleans()):  # an instruction in the middle of the conversation, or before it
            add_chat({"role": draw(st.sampled_from(["system", "developer"])), "content": f"rule {turn}"})
        if draw(st.booleans()):
            add_gemini({"role": "user", "parts": [{"text": f"question {turn}"}]}, [])
        else:
            add_chat({"role": "user", "content": f"question {turn}"})
        for _ in range(draw(st.integers(0, 2))):
            called = draw(st.lists(names, min_size=1, max_size=3))
            if draw(st.booleans()):
                parts: list[dict[str, Any]] = []
                if draw(st.booleans()):
                    parts.append({"text": "thinking", "thought": True, "thought_signature": "c2ln"})
                given = draw(st.booleans())
                for number, name in enumerate(called):
                    call: dict[str, Any] = {"name": name, "args": {"n": number}}
                    if given:
                        call["id"] = new_id()
                    parts.append(
                        {"function_call": call, **({"thought_signature": "AAEC"} if number == 0 else {})}
                    )
                (assistant,) = add_gemini({"role": "model", "parts": parts}, [])
                calls = [(c.id, c.function.name, given) for c in assistant.tool_calls]
            else:
                chat_calls = [
                    {"id": new_id(), "type": "function", "function": {"name": n, "arguments": "{}"}}
                    for n in called
                ]
                add_chat({"role": "assistant", "content": None, "tool_calls": chat_calls})
                calls = [(c["id"], c["function"]["name"], True) for c in chat_calls]
            if draw(st.booleans()):
                responses = []
                for call_id, name, has_id in calls:
                    response: dict[str, Any] = {"name": name, "response": {"ok": True}}
                    if has_id and draw(st.booleans()):
                        response["id"] = call_id
                    responses.append({"function_response": response})
                extra = [{"text": "and more"}] if draw(st.booleans()) else []
                add_gemini({"role": "user", "parts": responses + extra}, [(c, n) for c, n, _ in calls])
            else:
                for call_id, _, _ in calls:
                    add_chat({"role": "tool", "tool_call_id": call_id, "content": "result"})
        if draw(st.booleans()):
            add_gemini({"role": "model", "parts": [{"text": f"answer {turn}"}]}, [])
        else:
            add_chat({"role": "assistant", "content": f"answer {turn}"})
    reduced = draw(st.sets(st.sampled_from(range(len(entries)))))
    for index in reduced:
        entry = entries[index]
        if entry.message["role"] == "tool":
            entries[index] = ContextEntry(
                {**entry.message, "content": "[omitted]"}, entry.original, True, entry.position
            )
    cut = draw(st.sampled_from(starts))
    lead = [ContextEntry({"role": "system", "content": "Sys."}, None, False, None)]
    if cut:
        lead.append(
            ContextEntry(
                {"role": "system", "content": "Summary of the earlier conversation (x)"}, None, False, None
            )
        )
    whole = [
        content
        for first, size, content in groups
        if first >= cut and not any(entries[i].reduced for i in range(first, first + size))
    ]
    return lead + entries[cut:], whole


@settings(max_examples=150, deadline=None)
@given(working_memories(), st.sampled_from(["system", "user"]))
def test_render_gemini_never_breaks_gemini_rules(
    memory: tuple[list[ContextEntry], list[dict[str, Any]]], summary: Any
) -> None:
    entries, whole = memory
    request = render_gemini(entries, summary=summary)
    assert (
        gemini_request_violations(request["contents"], system_instruction=request["system_instruction"]) == []
    )
    for content in whole:
        assert content in request["contents"]
    # A system or developer message stays where it was: in the system instruction before
    # the conversation, else as a labelled text just before the question that followed it.
    texts = [(n, part.get("text")) for n, c in enumerate(request["contents"]) for part in c["parts"]]
    started = False
    for entry in entries:
        role, text = entry.message["role"], entry.message.get("content")
        if entry.position is None:
            continue
        if role not in ("system", "developer"):
            started = True
            continue
        if not started:
            assert text in request["system_instruction"]["parts"][0]["text"]
            continue
        label = f"[{role}] {text}"
        assert [t for _, t in texts].count(label) == 1
        at = [t for _, t in texts].index(label)
        question = f"question {str(text).split()[-1]}"
        assert [t for _, t in texts][at + 1] == question
