"""Inbound wire formats: each adapter's ``accepts`` and ``decode``, the dispatcher's
choice, and the one-pass decoding giving what the step-by-step path gave (the old
pipeline is kept below, verbatim, as the reference)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.responses import Response

from contextledger.application.formats import inbound as registry
from contextledger.application.formats.base import Decoded
from contextledger.application.formats.inbound import ADAPTERS, DEFAULT, decode
from contextledger.application.formats.openai_chat import (
    ALWAYS_DROPPED,
    DROPPED_WHEN_NONE,
    OPENAI_CHAT,
    chat_message,
    message_of,
)
from contextledger.application.formats.responses import RESPONSES, DecodedItems, decode_items, grouped_items
from contextledger.application.writing.inbound import inbound
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.domain.values.items import describe_item, item_text, messages_from_items
from contextledger.domain.values.messages import Message

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
USER_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"}


def _completion(content: str = "yo", **usage: int) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, **usage},
        }
    )


def _response(output: list[dict[str, Any]], cached: int | None = 1) -> Response:
    usage: dict[str, Any] = {
        "input_tokens": 7,
        "output_tokens": 4,
        "total_tokens": 11,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 2},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    return Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }
    )


# -- the step-by-step pipeline as it was, the reference of the one pass ----------------


def _old_clean(data: Mapping[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in data.items() if k not in ALWAYS_DROPPED}
    refusal = fields.pop("refusal", None)
    if refusal is not None:
        if fields.get("content") is not None or not isinstance(refusal, str):
            raise InvalidMessageError(
                "a message with both content and a refusal cannot be sent back",
                role=str(fields.get("role")),
                field="refusal",
            )
        fields["content"] = [{"type": "refusal", "refusal": refusal}]
    for name in sorted(DROPPED_WHEN_NONE - {"refusal"}):  # was a set's order: one of these
        if name in fields:
            if fields[name] is not None:
                raise InvalidMessageError(
                    f"the response field {name!r} cannot be sent back to the model",
                    role=str(fields.get("role")),
                    field=name,
                )
            del fields[name]
    for optional in ("tool_calls", "name", "tool_call_id"):
        if optional in fields and fields[optional] is None:
            del fields[optional]
    return fields


def _old_message(data: Mapping[str, Any]) -> Message:
    return Message.from_openai(_old_clean(data))


def _outcome(make: Any) -> tuple[str, Any]:
    try:
        return "ok", make()
    except InvalidMessageError as exc:
        return "error", (type(exc), str(exc), exc.field, exc.role)


_VALUES = st.sampled_from(
    [
        None,
        "",
        "hi",
        "\ud800",
        3,
        [],
        ["x"],
        [{"type": "text", "text": "a"}],
        [{"type": "refusal", "refusal": "no"}],
        [{"type": "image_url", "image_url": {"url": "u"}}],
        [CALL],
        [CALL, CALL],
        [{"id": "c2", "function": {"name": "bad name", "arguments": "{}"}}],
        {"id": "1"},
        "c1",
        "x" * 70,
    ]
)
_KEYS = st.sampled_from(
    [
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "refusal",
        "audio",
        "function_call",
        "reasoning_content",
        "annotations",
        "parsed",
        "type",
        "extra",
        "zz",
    ]
)
_ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot", None, 1])


@settings(max_examples=400, deadline=None)
@given(role=_ROLES, fields=st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_the_one_pass_decodes_every_message_dict_as_the_step_by_step_path_did(
    role: Any, fields: dict[str, Any]
) -> None:
    data = {"role": role, **{k: v for k, v in fields.items() if k != "role"}}
    expected = _outcome(lambda: _old_message(data))
    assert _outcome(lambda: message_of(data)) == expected
    assert _outcome(lambda: inbound(data).message) == expected
    if not isinstance(data.get("type"), str):  # a string type makes it a Responses item
        decoded = _outcome(lambda: decode(data).messages)
        assert decoded == (expected if expected[0] == "error" else ("ok", (expected[1],)))


def test_a_non_string_key_is_refused_by_its_name() -> None:
    with pytest.raises(InvalidMessageError) as caught:
        message_of({"role": "user", "content": "hi", 7: "x"})
    assert caught.value.field == "7"
    assert _outcome(lambda: message_of({"role": "user", 7: 1})) == _outcome(
        lambda: _old_message({"role": "user", 7: 1})
    )


def test_a_refusal_becomes_a_refusal_part_and_clashes_with_content() -> None:
    assert message_of({"role": "assistant", "content": None, "refusal": "No."}).content == (
        {"type": "refusal", "refusal": "No."},
    )
    with pytest.raises(InvalidMessageError, match="both content and a refusal") as caught:
        message_of({"role": "assistant", "content": "x", "refusal": "No.", "zz": 1})
    assert (caught.value.field, caught.value.role) == ("refusal", "assistant")


def test_several_response_only_values_report_the_first_by_name() -> None:
    with pytest.raises(InvalidMessageError) as caught:
        message_of({"role": "assistant", "content": "x", "reasoning_content": "r", "audio": {"id": "a"}})
    assert caught.value.field == "audio"


# -- the Chat Completions adapter ------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "accepted"),
    [
        ({"role": "user", "content": "hi"}, True),
        ({"role": "assistant", "content": None, "tool_calls": [CALL]}, True),
        (Message(role="user", content="hi"), True),
        (ChatCompletionMessage.model_validate({"role": "assistant", "content": "ok"}), True),
        (_completion(), True),
        (_completion().model_dump(), True),
        (USER_ITEM, False),
        (FUNCTION_CALL, False),
        (_response([]), False),
        ({"content": "no role"}, False),
        ("hi", False),
        (None, False),
    ],
)
def test_the_chat_adapter_accepts_chat_messages_and_completions_only(obj: Any, accepted: bool) -> None:
    assert OPENAI_CHAT.accepts(obj) is accepted


def test_the_chat_adapter_decodes_each_kind_to_one_message() -> None:
    sdk = ChatCompletionMessage.model_validate({"role": "assistant", "content": "ok", "refusal": None})
    cases: list[tuple[Any, Message]] = [
        ({"role": "user", "content": "hi"}, Message(role="user", content="hi")),
        (
            {"role": "user", "content": [{"type": "text", "text": "a"}], "name": None},
            Message(role="user", content=({"type": "text", "text": "a"},)),
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [CALL], "annotations": []},
            Message(
                role="assistant", tool_calls=({"id": "c1", "function": {"name": "f", "arguments": "{}"}},)
            ),
        ),
        (
            Message(role="tool", tool_call_id="c1", content="r"),
            Message(role="tool", tool_call_id="c1", content="r"),
        ),
        (sdk, Message(role="assistant", content="ok")),
        (sdk.model_dump(), Message(role="assistant", content="ok")),
    ]
    for obj, message in cases:
        decoded = OPENAI_CHAT.decode(obj)
        assert decoded == Decoded((message,), (None,), None)
        assert decoded == decode(obj)


def test_a_completion_decodes_to_its_first_message_and_its_usage() -> None:
    for obj in (_completion("a"), _completion("a").model_dump(mode="json")):
        decoded = OPENAI_CHAT.decode(obj)
        assert decoded.messages == (Message(role="assistant", content="a"),)
        assert decoded.usage is not None
        assert (decoded.usage.prompt_tokens, decoded.usage.completion_tokens) == (3, 2)
        assert chat_message(obj) == (decoded.messages[0], decoded.usage)


@pytest.mark.parametrize(
    ("obj", "field", "text"),
    [
        ({"choices": []}, "choices", "no choices"),
        ({"choices": [{"message": None}]}, "message", "no message"),
        (["role", "user"], None, "not list"),
        ({"role": "robot", "content": "x"}, "role", "role must be one of"),
    ],
)
def test_the_chat_adapter_refuses_what_is_not_a_chat_message(obj: Any, field: str | None, text: str) -> None:
    with pytest.raises(InvalidMessageError, match=text) as caught:
        decode(obj)
    assert caught.value.field == field


# -- the Responses adapter -------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "accepted"),
    [
        (USER_ITEM, True),
        (FUNCTION_CALL, True),
        ({"type": "reasoning", "summary": []}, True),
        (_response([]), True),
        (_response([]).model_dump(mode="json"), True),
        ({"role": "user", "content": "hi"}, False),
        (Message(role="user", content="hi"), False),
        (_completion(), False),
        ({"type": 3}, False),
        ([USER_ITEM], False),
    ],
)
def test_the_responses_adapter_accepts_items_and_responses_only(obj: Any, accepted: bool) -> None:
    assert RESPONSES.accepts(obj) is accepted


def test_one_item_decodes_to_its_message_with_the_item_kept() -> None:
    decoded = decode(FUNCTION_CALL)
    assert isinstance(decoded, DecodedItems)
    assert decoded.messages == (Message(role="assistant", tool_calls=(CALL,)),)
    assert decoded.items == ((FUNCTION_CALL,),)
    assert decoded.originals == (None,)
    assert decoded.items[0][0] is not FUNCTION_CALL  # a private copy


def test_a_response_decodes_to_its_output_items_and_its_usage() -> None:
    said = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    }
    response = _response([{"id": "rs_1", "type": "reasoning", "summary": []}, FUNCTION_CALL, said])
    decoded = decode(response)
    assert isinstance(decoded, DecodedItems)
    assert [m.role for m in decoded.messages] == ["assistant"]
    assert decoded.messages[0].call_ids == ("c1",)
    assert decoded.messages[0].content == "[reasoning]\nDone."
    assert decoded.usage is not None
    usage = decoded.usage
    assert (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cache_read_tokens,
        usage.cache_creation_tokens,
    ) == (7, 4, 1, 2)
    assert decoded.items[0][1] == FUNCTION_CALL
    assert decode(response.model_dump(mode="json")).messages == decoded.messages


def test_a_response_without_an_output_list_is_refused() -> None:
    with pytest.raises(InvalidMessageError) as caught:
        RESPONSES.decode({"object": "response", "output": "text"})
    assert caught.value.field == "output"


def test_items_that_are_not_json_are_refused_by_index_and_the_first_fault_is_reported() -> None:
    with pytest.raises(InvalidArgumentError, match=r"items\[1\]"):
        grouped_items([USER_ITEM, {"type": "message", "role": "user", "content": float("nan")}])
    with pytest.raises(InvalidArgumentError, match=r"items\[0\]"):
        decode_items([{1: "x"}])
    with pytest.raises(InvalidArgumentError, match="list of Responses items"):
        grouped_items(USER_ITEM)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="function_call_output"):
        grouped_items([{"type": "function_call_output", "call_id": 3}, {"bad": {1: 2}}])


def test_decoded_items_hold_one_group_per_message() -> None:
    with pytest.raises(InvalidArgumentError):
        DecodedItems((Message(role="user", content="x"),), (None,), None, ())


# -- the dispatcher --------------------------------------------------------------------


class _Recording:
    """An adapter that claims nothing, and notes each time it is asked."""

    name = "recording"

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def accepts(self, obj: Any) -> bool:
        self.asked.append(obj)
        return False

    def decode(self, obj: Any) -> Decoded:
        raise AssertionError("never chosen")


def test_the_registry_holds_the_responses_adapter_and_defaults_to_chat() -> None:
    assert RESPONSES in ADAPTERS
    assert DEFAULT is OPENAI_CHAT
    assert OPENAI_CHAT not in ADAPTERS


@pytest.mark.parametrize(
    "obj",
    [
        {"role": "user", "content": "hi", "name": "bob"},
        USER_ITEM,
        _completion(),
        {"role": "user"},
    ],
)
def test_each_adapter_is_asked_at_most_once(monkeypatch: pytest.MonkeyPatch, obj: Any) -> None:
    first, last = _Recording(), _Recording()
    monkeypatch.setattr(registry, "ADAPTERS", [first, *ADAPTERS, last])
    with contextlib.suppress(InvalidMessageError):
        decode(obj)
    assert len(first.asked) == 1
    assert len(last.asked) <= 1
    assert len(last.asked) == (0 if RESPONSES.accepts(obj) else 1)


def test_the_usual_turn_is_decoded_before_any_adapter_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _Recording()
    monkeypatch.setattr(registry, "ADAPTERS", [first])
    assert decode({"role": "user", "content": "hi"}).messages == (Message(role="user", content="hi"),)
    assert first.asked == []


# -- the grouping rules, each message built once, as they were --------------------------


def _old_run_text(item: dict[str, Any]) -> str:
    if item.get("type", "message") == "message" and "role" in item:
        text = item_text(item.get("content"))
        return text if text else "(empty)"
    return describe_item(item)


def _old_model_run(run: Sequence[dict[str, Any]]) -> list[tuple[Message, tuple[dict[str, Any], ...]]]:
    out: list[tuple[Message, tuple[dict[str, Any], ...]]] = []
    pending: list[dict[str, Any]] = []
    for item in run:
        pending.append(item)
        if item.get("type") == "message":
            out.append(
                (Message(role="assistant", content="\n".join(map(_old_run_text, pending))), tuple(pending))
            )
            pending = []
    if pending:
        if out:
            message, raw = out.pop()
            text = "\n".join([message.text, *map(_old_run_text, pending)])
            out.append((Message(role="assistant", content=text), (*raw, *pending)))
        else:
            out.append(
                (Message(role="assistant", content="\n".join(map(_old_run_text, pending))), tuple(pending))
            )
    return out


_MODEL_SIDE = st.sampled_from(
    [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"type": "message", "role": "assistant", "content": ""},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
        {"type": "web_search_call", "status": "completed"},
    ]
)


@settings(deadline=None)
@given(st.lists(_MODEL_SIDE, min_size=1, max_size=8))
def test_a_run_without_calls_is_grouped_as_before(run: list[dict[str, Any]]) -> None:
    assert messages_from_items(run) == _old_model_run(run)
