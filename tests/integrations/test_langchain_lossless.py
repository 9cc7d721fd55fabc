"""``LedgerChatMessageHistory`` loses nothing: every LangChain field and content block
appended comes back equal (``==``) when no reduction applies, on SQLite and PostgreSQL,
while the model is still sent valid chat-completions messages."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

import contextledger as cl
from contextledger.application.formats.originals import transcript_originals
from contextledger.integrations.langchain import LedgerChatMessageHistory, from_original, original_of
from contextledger.testing import openai_context_violations as violations

#: Nothing is ever reduced: no trigger, no placeholders.
KEEP_ALL = cl.ReductionPolicy()

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_key = st.from_regex(r"\Ak_[a-z0-9]{1,6}\Z")
_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_key, inner, max_size=3),
    max_leaves=8,
)
_meta = st.dictionaries(_key, _json, max_size=3)
_id = st.none() | st.from_regex(r"\A[a-z0-9-]{1,20}\Z")
_name = st.none() | _text.filter(bool)
_b64 = st.from_regex(r"\A[A-Za-z0-9+/]{4,40}\Z")
_blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": f"https://example.com/{u}.png"}}, _b64),
    st.builds(lambda d: {"type": "image", "base64": d, "mime_type": "image/png"}, _b64),
    st.builds(lambda u: {"type": "image", "url": f"https://example.com/{u}.jpg"}, _b64),
    st.builds(
        lambda d, f: {"type": "file", "base64": d, "mime_type": "application/pdf", "filename": f"{f}.pdf"},
        _b64, _b64,
    ),
)
_usage = st.builds(
    lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
    st.integers(0, 10**6), st.integers(0, 10**6),
)
_call_name = st.from_regex(r"\A[A-Za-z0-9_-]{1,20}\Z")
_calls = itertools.count()


@st.composite
def _turn(draw: st.DrawFn) -> list[BaseMessage]:
    """One turn as the ledger takes it: a message, or a tool-call group whole."""
    common = {"id": draw(_id), "name": draw(_name), "additional_kwargs": draw(_meta),
              "response_metadata": draw(_meta)}
    kind = draw(st.sampled_from(["human", "system", "ai", "tools"]))
    if kind == "human":
        content = draw(_text | st.lists(_blocks, min_size=1, max_size=4))
        return [HumanMessage(content=content, **common)]
    if kind == "system":
        return [SystemMessage(content=draw(_text), **common)]
    usage = draw(st.none() | _usage)
    if kind == "ai":
        return [AIMessage(content=draw(_text), usage_metadata=usage, **common)]
    calls = [
        {"name": draw(_call_name), "args": draw(st.dictionaries(_key, _json, max_size=3)),
         "id": f"call_{next(_calls)}", "type": "tool_call"}
        for _ in range(draw(st.integers(1, 3)))
    ]
    ai = AIMessage(content=draw(_text), tool_calls=calls, usage_metadata=usage, **common)
    results: list[BaseMessage] = [
        ToolMessage(
            content=draw(_text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, _text), min_size=1)),  # type: ignore[arg-type]
            tool_call_id=call["id"], artifact=draw(_json), status=draw(st.sampled_from(["success", "error"])),
            id=draw(_id), name=draw(_name), additional_kwargs=draw(_meta), response_metadata=draw(_meta),
        )
        for call in calls
    ]
    return [ai, *results]


_batches = st.lists(st.lists(_turn(), min_size=1, max_size=3).map(lambda ts: [m for t in ts for m in t]),
                    min_size=1, max_size=4)


def _check_round_trip(ledger: cl.Ledger, batches: list[list[BaseMessage]]) -> None:
    history = LedgerChatMessageHistory(f"s-{uuid.uuid4()}", ledger, policy=KEEP_ALL)
    for batch in batches:
        history.add_messages(batch)
    appended = [m for batch in batches for m in batch]
    assert history.messages == appended
    assert LedgerChatMessageHistory(history.session_id, ledger).messages == appended
    context = ledger.context(history.conversation_id)
    assert violations(context) == []
    assert [cl.Message.from_openai(m).to_openai() for m in context] == context
    logged = transcript_originals(ledger, history.conversation_id)
    assert [from_original(original) for _, _, original in logged if original] == appended
    assert ledger.verify(history.conversation_id).ok


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches)
def test_every_langchain_field_and_block_comes_back_equal_on_sqlite(
    sqlite_url: str, batches: list[list[BaseMessage]]
) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        _check_round_trip(ledger, batches)


@pytest.mark.postgres
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches)
def test_every_langchain_field_and_block_comes_back_equal_on_postgresql(
    postgres_url: str, batches: list[list[BaseMessage]]
) -> None:
    with cl.Ledger.open(postgres_url, run_policy=False) as ledger:
        _check_round_trip(ledger, batches)


def test_images_and_files_reach_the_model_as_content_parts_and_the_log_keeps_the_blocks(sqlite_url: str) -> None:
    blocks: list[str | dict[str, Any]] = [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png", "id": "b1"},
        {"type": "file", "base64": "JVBERi0=", "mime_type": "application/pdf", "filename": "a.pdf"},
    ]
    asked = HumanMessage(content=blocks, id="m1", name="ann")
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory("s", ledger, policy=KEEP_ALL)
        history.add_messages([asked])
        assert ledger.context(history.conversation_id) == [{"role": "user", "name": "ann", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
        ]}]
        assert history.messages == [asked]


def test_a_placeholder_keeps_the_tool_message_but_its_content_and_artifact(sqlite_url: str) -> None:
    policy = cl.ReductionPolicy(keep_tool_results=1)
    call = {"name": "look", "args": {}, "id": "c1", "type": "tool_call"}
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory("s", ledger, policy=policy)
        old = ToolMessage(content="long " * 50, tool_call_id="c1", artifact={"rows": [1, 2]}, id="t1", name="look")
        history.add_messages([AIMessage(content="", tool_calls=[call], id="a1"), old])
        for n in (2, 3):  # past twice keep_tool_results, the oldest becomes a placeholder
            history.add_messages([AIMessage(content="", tool_calls=[{**call, "id": f"c{n}"}], id=f"a{n}"),
                                  ToolMessage(content="new " * 20, tool_call_id=f"c{n}", id=f"t{n}")])
        shown = history.messages
        placeholder = shown[1]
        assert isinstance(placeholder, ToolMessage) and placeholder.content != old.content
        assert placeholder.content == ledger.context(history.conversation_id)[1]["content"]
        assert placeholder.artifact is None
        assert (placeholder.id, placeholder.tool_call_id, placeholder.name) == ("t1", "c1", "look")
        # The log still holds the whole message.
        assert from_original(transcript_originals(ledger, history.conversation_id)[1][2] or {}) == old


@pytest.mark.parametrize("bad", [
    HumanMessage(content="x", additional_kwargs={"k": b"bytes"}),
    HumanMessage(content="x", response_metadata={"k": (1, 2)}),
    AIMessage(content="x", response_metadata={"k": float("nan")}),
])
def test_a_value_that_would_not_come_back_equal_is_refused_and_nothing_is_written(
    sqlite_url: str, bad: BaseMessage
) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory("s", ledger)
        with pytest.raises(cl.InvalidMessageError):
            original_of(bad)
        with pytest.raises(cl.InvalidMessageError):
            history.add_messages([HumanMessage("fine"), bad])
        assert ledger.transcript(history.conversation_id) == []


def test_an_original_must_be_a_json_object_with_a_format(sqlite_url: str) -> None:
    from contextledger.application.formats.originals import extend_with_originals

    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start(model="gpt-4o-mini")
        for original in ({"no": "format"}, {"format": "x", "v": {1, 2}}, ["format"]):
            with pytest.raises(cl.InvalidMessageError):
                extend_with_originals(ledger, cid, [({"role": "user", "content": "hi"}, original)])  # type: ignore[list-item]
        assert ledger.transcript(cid) == []


def test_the_original_is_under_the_digest_chain_and_a_message_without_one_hashes_as_before() -> None:
    from contextledger.domain.values.digests import chain_digest

    message = cl.Message(role="user", content="hi")
    before = chain_digest("0" * 64, message)  # how every message appended so far was chained
    assert chain_digest("0" * 64, message, None, None) == before
    assert chain_digest("0" * 64, message, None, {"format": "x"}) != before
    assert chain_digest("0" * 64, message, None, {"format": "x"}) != chain_digest(
        "0" * 64, message, None, {"format": "y"}
    )
