"""Messages LangChain's in-memory history stores and the chat format has no place for
(``FunctionMessage``, a ``ChatMessage`` of another role, ``text-plain`` content blocks)
are stored losslessly and sent as user messages and text, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64

import pytest

pytest.importorskip("langchain_core")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, FunctionMessage, HumanMessage

import contextledger as cl
from contextledger.integrations.langchain import LedgerChatMessageHistory, from_langchain
from contextledger.testing import openai_context_violations as violations

PLAIN = {"type": "text-plain", "mime_type": "text/plain"}
MESSAGES: list[BaseMessage] = [
    HumanMessage("what is 6 x 7?", id="h1"),
    AIMessage(
        "", id="a1", additional_kwargs={"function_call": {"name": "calc", "arguments": '{"x": "6*7"}'}}
    ),
    FunctionMessage(content="42", name="calc", id="f1"),
    ChatMessage(role="critic", content="Check the units.", id="c1"),
    ChatMessage(role="developer", content="Answer in one line.", id="d1"),
    HumanMessage(
        content=[
            {"type": "text", "text": "and these notes:"},
            {**PLAIN, "text": "line one", "title": "notes.txt", "id": "b1"},
            {**PLAIN, "base64": base64.b64encode(b"line two").decode()},
            {**PLAIN, "url": "https://example.com/notes.txt"},
        ],
        id="h2",
    ),
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # InMemoryChatMessageHistory, the reference
def test_they_come_back_equal_as_from_langchains_in_memory_history(shared_url: str) -> None:
    own = InMemoryChatMessageHistory()
    own.add_messages(MESSAGES)
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory("others", ledger, policy=cl.ReductionPolicy())
        history.add_messages(MESSAGES)
        assert history.messages == own.messages == MESSAGES
        assert LedgerChatMessageHistory("others", ledger).messages == MESSAGES
        context = ledger.context(history.conversation_id)
        assert context == [
            {"role": "user", "content": "what is 6 x 7?"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "[result of function calc]\n42"},
            {"role": "user", "content": "[critic]\nCheck the units."},
            {"role": "developer", "content": "Answer in one line."},
            {
                "role": "user",
                "content": "and these notes:\nnotes.txt\n\nline one\nline two\n"
                "[text/plain file: https://example.com/notes.txt]",
            },
        ]
        assert violations(context) == []
        assert ledger.verify(history.conversation_id).ok


_role = st.from_regex(r"\A[a-z][a-z_-]{0,15}\Z").filter(
    lambda r: r not in ("system", "developer", "user", "assistant")
)
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    role=_role,
    text=_text,
    name=st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z"),
    blocks=st.lists(st.builds(lambda t: {**PLAIN, "text": t}, _text), min_size=1, max_size=3),
)
def test_any_role_name_and_plain_text_is_kept_and_sent_as_user_text(
    sqlite_url: str, role: str, text: str, name: str, blocks: list[dict[str, str]]
) -> None:
    messages: list[BaseMessage] = [
        ChatMessage(role=role, content=text),
        FunctionMessage(content=text, name=name),
        HumanMessage(content=blocks),  # type: ignore[arg-type]
    ]
    sent = [from_langchain(m).to_openai() for m in messages]
    assert [m["role"] for m in sent] == ["user"] * 3
    assert sent[0]["content"] == f"[{role}]\n{text}"
    assert sent[1]["content"] == f"[result of function {name}]\n{text}"
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory(f"s-{role}-{name}", ledger, policy=cl.ReductionPolicy())
        history.add_messages(messages)
        assert history.messages[-3:] == messages
