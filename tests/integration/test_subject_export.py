"""Access and portability: ``export_subject`` and ``contextledger export --subject S``
on a real SQLite file and on PostgreSQL. What was appended comes back out of the JSON
document exactly, in the format it was handed in -- OpenAI, Anthropic, Gemini,
LangChain and Pydantic AI messages; forks of other subjects are listed with what they
hold of the subject; an erased subject is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

import contextledger as cl
from contextledger.infrastructure.cli import main
from contextledger.integrations.langchain import LedgerChatMessageHistory
from contextledger.integrations.langchain_messages import from_original
from contextledger.integrations.pydantic_ai import LedgerHistory, model_messages

POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)

OPENAI = [
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4 degrees, rain"},
    {"role": "assistant", "content": "It is 4 degrees and raining."},
]
ANTHROPIC = [
    {"role": "user", "content": [{"type": "text", "text": "Look up my two orders."}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "tu_1", "name": "order", "input": {"n": 1}},
            {"type": "tool_use", "id": "tu_2", "name": "order", "input": {"n": 2}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "shipped"},
            {"type": "tool_result", "tool_use_id": "tu_2", "content": "packed"},
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "One shipped, one packed."}]},
]
GEMINI = [
    {"role": "user", "parts": [{"text": "Translate 'hello' to Norwegian."}]},
    {"role": "model", "parts": [{"text": "Hei."}]},
]


def document(ledger: cl.Ledger, subject: str) -> dict[str, Any]:
    """The export as its JSON document, read back as a receiver would."""
    data: dict[str, Any] = json.loads(json.dumps(ledger.export_subject(subject).to_json()))
    assert data["format"] == "contextledger-subject-export/1" and data["subject"] == subject
    return data


def as_handed_in(messages: list[dict[str, Any]], key: str) -> list[Any]:
    """The messages as they were handed in: the original where there is one (its first
    part only, for a message that stood for several), else the chat message."""
    out = []
    for m in messages:
        original = m["original"]
        if original is None:
            out.append(m["message"])
        elif "part" not in original:
            out.append(original[key])
    return out


def test_openai_anthropic_and_gemini_messages_come_back_as_appended(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        chats = {
            "openai": ledger.start("You help.", policy=POLICY, subject="user-42", key="openai"),
            "anthropic": ledger.start(
                "You help.", model="claude-sonnet-4-5", policy=POLICY, subject="user-42"
            ),
            "gemini": ledger.start("You help.", model="gemini-2.5-flash", policy=POLICY, subject="user-42"),
        }
        for name, messages in (("openai", OPENAI), ("anthropic", ANTHROPIC), ("gemini", GEMINI)):
            for message in messages:
                ledger.append(chats[name], message)
        ledger.start("You help.", policy=POLICY, subject="someone-else")
        data = document(ledger, "user-42")
    by_id = {c["conversation_id"]: c for c in data["conversations"]}
    assert set(by_id) == {str(c) for c in chats.values()} and data["forks"] == []
    openai = by_id[str(chats["openai"])]
    assert [m["message"] for m in openai["messages"]] == OPENAI and openai["key"] == "openai"
    assert as_handed_in(by_id[str(chats["anthropic"])]["messages"], "message") == ANTHROPIC
    assert as_handed_in(by_id[str(chats["gemini"])]["messages"], "content") == GEMINI
    assert openai["totals"]["messages"] == 4 and openai["totals"]["appended_tokens"] > 0


def test_langchain_messages_come_back_as_appended(shared_url: str) -> None:
    sent = [
        HumanMessage("Find the invoice", id="h1", additional_kwargs={"source": "web"}),
        AIMessage(
            "", id="a1", tool_calls=[{"id": "c1", "name": "invoice", "args": {"n": 7}, "type": "tool_call"}]
        ),
        ToolMessage("invoice 7: paid", tool_call_id="c1", id="t1", artifact={"rows": 1}),
        AIMessage("Invoice 7 is paid.", id="a2", response_metadata={"model_name": "gpt-4o-mini"}),
    ]
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        history = LedgerChatMessageHistory("session-1", ledger, policy=POLICY, subject="user-42")
        history.add_messages(sent)
        data = document(ledger, "user-42")
    (chat,) = data["conversations"]
    assert [from_original(m["original"]) for m in chat["messages"]] == sent


def test_pydantic_ai_messages_come_back_as_appended(shared_url: str) -> None:
    sent = [
        ModelRequest(parts=[UserPromptPart(content="What is 6 times 7?")]),
        ModelResponse(parts=[ToolCallPart(tool_name="multiply", args={"a": 6, "b": 7}, tool_call_id="m1")]),
        ModelRequest(parts=[ToolReturnPart(tool_name="multiply", content=42, tool_call_id="m1")]),
        ModelResponse(parts=[TextPart(content="42")]),
    ]
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        LedgerHistory("agent-1", ledger, policy=POLICY, subject="user-42").extend(sent)
        data = document(ledger, "user-42")
    (chat,) = data["conversations"]
    records = [(m["message"], m["original"]) for m in chat["messages"]]
    assert model_messages(records) == sent


def test_a_fork_of_another_subject_is_listed_with_what_it_holds_of_the_subject(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": "mine"})
        ledger.append(cid, {"role": "assistant", "content": "yours"})
        ledger.edit(cid, 0, {"role": "user", "content": "mine, edited"})
        fork = ledger.fork(cid, subject="team-9")
        ledger.append(fork, {"role": "user", "content": "the team's own words"})
        data = document(ledger, "user-42")
    (own,) = data["conversations"]
    assert [e["kind"] for e in own["edits"]] == ["MessageEdited"] and own["edits"][0]["timestamp"]
    (held,) = data["forks"]
    assert held["conversation_id"] == str(fork) and held["subject"] == "team-9"
    assert held["forked_from"] == str(cid) and held["through_position"] == 1
    said = [m["message"]["content"] for m in held["messages"]]
    assert "the team's own words" not in said and "yours" in said


def test_an_erased_subject_cannot_be_exported_and_the_command_line_writes_both_forms(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": "export me"})
        ledger.start("You help.", policy=POLICY, subject="user-7")
    assert main(["export", "--subject", "user-42", "--database", sqlite_url]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["conversations"][0]["messages"][0]["message"]["content"] == "export me"
    assert main(["export", "--subject", "user-42", "--markdown", "--database", sqlite_url]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("# Data held about user-42") and "export me" in markdown
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        ledger.erase("user-42", reason="test")
        with pytest.raises(cl.ConversationErasedError) as caught:
            ledger.export_subject("user-42")
        assert caught.value.subject == "user-42"
        assert ledger.export_subject("user-7").conversations
    assert main(["export", "--subject", "user-42", "--database", sqlite_url]) != 0
    assert "erased" in capsys.readouterr().err
