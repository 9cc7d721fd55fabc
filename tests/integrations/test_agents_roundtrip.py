"""``LedgerSession`` loses nothing: any sequence of Responses items, as the Agents SDK
keeps them in a session (``TResponseInputItem`` dicts: messages in both forms with
text, image and file parts, assistant output with annotations, logprobs and refusals,
reasoning, parallel function calls and their outputs, ids and statuses), added in
several batches comes back equal (``==``) from ``get_items()`` when no reduction
applies and from ``transcript_items()``, read by the ledger that wrote them and by
another that reads them cold, on SQLite and PostgreSQL, while the model is still sent
a valid prompt."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.integrations.agents import LedgerSession
from contextledger.testing import openai_context_violations as violations

#: Nothing is ever reduced: no trigger, no placeholders.
KEEP_ALL = cl.ReductionPolicy()

Item = dict[str, Any]

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_word = st.from_regex(r"\A[A-Za-z0-9_-]{1,16}\Z")
_b64 = st.from_regex(r"\A[A-Za-z0-9+/]{4,40}={0,2}\Z")
_status = st.sampled_from(["in_progress", "completed", "incomplete"])
_index = st.integers(0, 10_000)
_calls = itertools.count()


@st.composite
def _fields(draw: st.DrawFn, required: dict[str, Any], optional: dict[str, st.SearchStrategy[Any]]) -> Item:
    """``required`` plus any subset of ``optional``, each drawn (an SDK TypedDict is total=False)."""
    out = dict(required)
    for key, strategy in optional.items():
        if draw(st.booleans()):
            out[key] = draw(strategy)
    return out


_cache = st.fixed_dictionaries({"mode": st.just("explicit"), "ttl": st.sampled_from(["30m", "12h"])})
_input_text = st.builds(lambda t, p: {"type": "input_text", "text": t} | p, _text,
                        _fields({}, {"prompt_cache_breakpoint": _cache}))
_image_detail = st.sampled_from(["low", "high", "auto", "original"])
_input_image = st.one_of(
    _fields({"type": "input_image"}, {"detail": _image_detail}).map(
        lambda p: p | {"image_url": "https://example.com/i.png"}
    ),
    st.builds(lambda d, p: p | {"image_url": f"data:image/png;base64,{d}"}, _b64,
              _fields({"type": "input_image"}, {"detail": _image_detail | st.none()})),
    st.builds(lambda f, p: p | {"file_id": f"file-{f}"}, _word,
              _fields({"type": "input_image", "image_url": None}, {"detail": _image_detail})),
)
_file_detail = st.sampled_from(["auto", "low", "high"])
_input_file = st.one_of(
    st.builds(lambda d, n, p: p | {"file_data": f"data:application/pdf;base64,{d}", "filename": f"{n}.pdf"},
              _b64, _word, _fields({"type": "input_file"}, {"detail": _file_detail})),
    st.builds(lambda f, p: p | {"file_id": f"file-{f}"}, _word,
              _fields({"type": "input_file"}, {"filename": _word, "detail": _file_detail})),
    st.builds(lambda u, p: p | {"file_url": f"https://example.com/{u}.pdf"}, _word,
              _fields({"type": "input_file"}, {"file_id": st.none(), "filename": _word})),
)
_input_parts = st.lists(st.one_of(_input_text, _input_image, _input_file), min_size=1, max_size=4)

_annotation = st.one_of(
    st.fixed_dictionaries({"type": st.just("file_citation"), "file_id": _word, "filename": _word,
                           "index": _index}),
    st.fixed_dictionaries({"type": st.just("url_citation"), "start_index": _index, "end_index": _index,
                           "title": _text, "url": _word.map(lambda w: f"https://example.com/{w}")}),
    st.fixed_dictionaries({"type": st.just("container_file_citation"), "container_id": _word,
                           "file_id": _word, "filename": _word, "start_index": _index,
                           "end_index": _index}),
    st.fixed_dictionaries({"type": st.just("file_path"), "file_id": _word, "index": _index}),
)
_logprob_value = st.floats(-100, 0, allow_nan=False)
_token = st.fixed_dictionaries({"token": _text, "bytes": st.lists(st.integers(0, 255), max_size=4),
                                "logprob": _logprob_value})
_logprob = st.fixed_dictionaries({"token": _text, "bytes": st.lists(st.integers(0, 255), max_size=4),
                                  "logprob": _logprob_value, "top_logprobs": st.lists(_token, max_size=2)})
_output_text = _fields(
    {"type": "output_text"},
    {"annotations": st.lists(_annotation, max_size=3), "logprobs": st.lists(_logprob, max_size=2)},
).flatmap(lambda p: _text.map(lambda t: p | {"text": t}))
_refusal = st.builds(lambda r: {"type": "refusal", "refusal": r}, _text)


@st.composite
def _instruction(draw: st.DrawFn) -> Item:
    """A user, system or developer message: EasyInputMessage (string or parts, ``type``
    or not) or the ResponseInputItem ``Message`` (parts, ``type``, maybe ``status``)."""
    role = draw(st.sampled_from(["user", "system", "developer"]))
    if draw(st.booleans()):  # EasyInputMessage
        item: Item = {"role": role, "content": draw(_text | _input_parts)}
        if draw(st.booleans()):
            item["type"] = "message"
        return item
    item = {"type": "message", "role": role, "content": draw(_input_parts)}
    if draw(st.booleans()):
        item["status"] = draw(_status)
    return item


@st.composite
def _assistant(draw: st.DrawFn) -> Item:
    """An assistant message: as the model output it (id, status, output_text and refusal
    parts, maybe ``phase``) or as an EasyInputMessage."""
    phase = st.sampled_from(["commentary", "final_answer"]) | st.none()
    if draw(st.booleans()):
        extra = draw(_fields({}, {"type": st.just("message"), "phase": phase}))
        return {"role": "assistant", "content": draw(_text), **extra}
    parts = draw(st.lists(_output_text | _refusal, min_size=1, max_size=3))
    extra = draw(_fields({}, {"phase": phase}))
    return {"id": f"msg_{draw(_word)}", "type": "message", "role": "assistant", "status": draw(_status),
            "content": parts, **extra}


@st.composite
def _reasoning(draw: st.DrawFn) -> Item:
    summary = draw(st.lists(st.builds(lambda t: {"type": "summary_text", "text": t}, _text), max_size=2))
    extra = draw(_fields({}, {
        "encrypted_content": _b64 | st.none(),
        "content": st.lists(st.builds(lambda t: {"type": "reasoning_text", "text": t}, _text), max_size=2),
        "status": _status,
    }))
    return {"id": f"rs_{draw(_word)}", "type": "reasoning", "summary": summary, **extra}


@st.composite
def _call(draw: st.DrawFn) -> Item:
    call_id = f"call_{next(_calls)}_{draw(_word)}"
    caller = st.just({"type": "direct"}) | st.builds(lambda c: {"type": "program", "caller_id": c}, _word)
    extra = draw(_fields({}, {"id": _word.map(lambda w: f"fc_{w}"), "status": _status,
                              "namespace": _word, "caller": caller | st.none()}))
    return {"type": "function_call", "call_id": call_id, "name": draw(_word), "arguments": draw(_text),
            **extra}


_output_parts = st.lists(st.one_of(_input_text, _input_image, _input_file), min_size=1, max_size=3)


@st.composite
def _output(draw: st.DrawFn, call: Item) -> Item:
    """The answer to ``call``: a string, or a list of text, image and file parts."""
    extra = draw(_fields({}, {"id": _word.map(lambda w: f"fco_{w}") | st.none(),
                              "status": _status | st.none()}))
    return {"type": "function_call_output", "call_id": call["call_id"], "output": draw(_text | _output_parts),
            **extra}


@st.composite
def _hosted(draw: st.DrawFn) -> list[list[Item]]:
    """Hosted and custom tools as the SDK keeps them: a web search, an MCP call, a custom
    tool call with its output, an MCP approval request with its response, a reference."""
    kind = draw(st.sampled_from(["web_search", "mcp", "custom", "approval", "reference"]))
    status = st.sampled_from(["in_progress", "completed", "failed"])
    if kind == "web_search":
        action = {"type": "search", "query": draw(_text)}
        return [[{"id": f"ws_{draw(_word)}", "type": "web_search_call", "status": draw(status), "action": action}]]
    if kind == "mcp":
        return [[{"id": f"mcp_{draw(_word)}", "type": "mcp_call", "server_label": draw(_word),
                  "name": draw(_word), "arguments": draw(_text),
                  **draw(_fields({}, {"output": _text | st.none(), "error": st.none(), "status": status}))}]]
    if kind == "custom":
        call_id = f"call_{next(_calls)}_{draw(_word)}"
        return [[{"type": "custom_tool_call", "call_id": call_id, "name": draw(_word), "input": draw(_text),
                  **draw(_fields({}, {"id": _word.map(lambda w: f"ctc_{w}")}))}],
                [{"type": "custom_tool_call_output", "call_id": call_id, "output": draw(_text | _output_parts)}]]
    if kind == "approval":
        request = f"mcpr_{draw(_word)}"
        return [[{"id": request, "type": "mcp_approval_request", "server_label": draw(_word),
                  "name": draw(_word), "arguments": draw(_text)}],
                [{"type": "mcp_approval_response", "approval_request_id": request, "approve": draw(st.booleans()),
                  **draw(_fields({}, {"id": _word | st.none(), "reason": _text | st.none()}))}]]
    return [[{"id": f"msg_{draw(_word)}", **draw(_fields({}, {"type": st.just("item_reference") | st.none()}))}]]


@st.composite
def _turn(draw: st.DrawFn) -> list[list[Item]]:
    """One turn as chunks that a batch never splits: a message, reasoning with what
    followed it, or a fully answered tool-call group (the model's items before the
    calls and the parallel calls in one chunk, then each output, in any order)."""
    kind = draw(st.sampled_from(["instruction", "assistant", "reasoning", "tools", "hosted"]))
    if kind == "hosted":
        return draw(_hosted())
    if kind == "instruction":
        return [[draw(_instruction())]]
    if kind == "assistant":
        return [[draw(_assistant())]]
    if kind == "reasoning":
        return [[draw(_reasoning()), *draw(st.lists(_assistant(), max_size=1))]]
    before = draw(st.lists(_reasoning() | _assistant(), max_size=2))
    calls = draw(st.lists(_call(), min_size=1, max_size=3))
    outputs = [draw(_output(c)) for c in draw(st.permutations(calls))]
    return [[*before, *calls], *([o] for o in outputs)]


@st.composite
def _batches(draw: st.DrawFn) -> list[list[Item]]:
    """Turns cut into ``add_items`` batches anywhere between chunks."""
    chunks = [c for turn in draw(st.lists(_turn(), min_size=1, max_size=6)) for c in turn]
    batches: list[list[Item]] = [[]]
    for chunk in chunks:
        if batches[-1] and draw(st.booleans()):
            batches.append([])
        batches[-1].extend(chunk)
    return batches


@pytest.fixture(params=["sqlite", "postgres"])
def ledgers(request: pytest.FixtureRequest) -> Iterator[tuple[cl.Ledger, cl.Ledger]]:
    """The ledger the session writes to, and another on the same database that reads
    each conversation cold (from its snapshot, taken every few events, and the log)."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    settings_ = cl.Settings(database_url=url, snapshot_interval=4, run_policy=False)
    with cl.Ledger(settings_) as ledger, cl.Ledger(settings_) as cold:
        yield ledger, cold


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches())
def test_every_agents_item_comes_back_equal(ledgers: tuple[cl.Ledger, cl.Ledger], batches: list[list[Item]]) -> None:
    ledger, cold = ledgers
    session = LedgerSession(f"s-{uuid.uuid4()}", ledger, policy=KEEP_ALL)

    async def add() -> list[Item]:
        for batch in batches:
            await session.add_items(batch)  # type: ignore[arg-type]
        return await session.get_items()  # type: ignore[return-value]

    added = [item for batch in batches for item in batch]
    assert asyncio.run(add()) == added
    assert session.transcript_items() == added
    assert asyncio.run(LedgerSession(session.session_id, cold).get_items()) == added
    assert cold.transcript_items(session.conversation_id) == added
    assert violations(ledger.context(session.conversation_id)) == []
    assert ledger.verify(session.conversation_id).ok
