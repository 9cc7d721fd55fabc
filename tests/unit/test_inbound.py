"""What append takes: the SDK's objects become Messages, response-only fields are
dropped, any other unknown field is refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionMessage

from contextledger.application.formats.inbound import ANTHROPIC, GEMINI
from contextledger.application.formats.responses import RESPONSES
from contextledger.application.writing.inbound import ALWAYS_DROPPED, DROPPED_WHEN_NONE, inbound
from contextledger.application.writing.wire_pieces import wire_adapter
from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import Message

TEXT = st.text(min_size=1, max_size=200).filter(lambda t: t.encode("utf-8", "surrogatepass") is not None)
KNOWN = {"role", "content", "name", "tool_calls", "tool_call_id"} | ALWAYS_DROPPED | DROPPED_WHEN_NONE


@settings(deadline=None)  # a busy shared machine must not fail a property on time
@given(TEXT, st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_completion_gives_its_message_and_its_usage(text: str, prompt: int, completion: int) -> None:
    sdk = ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text, "annotations": []}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })
    for given_value in (sdk, sdk.model_dump(), sdk.model_dump(mode="json")):
        result = inbound(given_value)
        assert result.message == Message(role="assistant", content=text)
        assert result.usage is not None
        assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (prompt, completion)


@settings(deadline=None)  # a busy shared machine must not fail a property on time
@given(TEXT)
def test_an_sdk_message_and_its_dump_become_the_same_message(text: str) -> None:
    sdk = ChatCompletionMessage.model_validate({"role": "assistant", "content": text})
    assert inbound(sdk).message == inbound(sdk.model_dump()).message == Message(role="assistant", content=text)
    assert inbound(sdk).usage is None


@settings(deadline=None)  # a busy shared machine must not fail a property on time
@given(st.text(min_size=1, max_size=30).filter(lambda k: k not in KNOWN))
def test_any_other_field_is_refused_by_name(field: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        inbound({"role": "user", "content": "hi", field: 1})
    assert caught.value.field == field


@pytest.mark.parametrize("name", sorted(DROPPED_WHEN_NONE - {"refusal"}))
def test_a_response_only_field_with_a_value_is_refused(name: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        inbound({"role": "assistant", "content": "x", name: {"id": "1"}})
    assert caught.value.field == name


def _outcome(make: object) -> tuple[str, object]:
    try:
        return "ok", make()  # type: ignore[operator]
    except InvalidMessageError as exc:
        return "error", (str(exc), exc.field, exc.role)


@settings(max_examples=300, deadline=None)
@given(
    role=st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot", ""])
    | st.sampled_from([["user"], {"user": 1}, None, 3]),
    content=st.text() | st.sampled_from(["", " ", "\ud800", "<script>", "é" * 50]),
)
def test_a_role_and_text_dict_becomes_what_the_general_path_makes_of_it(role: object, content: str) -> None:
    data = {"role": role, "content": content}
    general = _outcome(lambda: Message.from_openai(dict(data)))
    assert _outcome(lambda: inbound(data).message) == general


@settings(deadline=None)
@given(
    role=st.sampled_from(["system", "developer", "user", "assistant", "tool", "model", "robot", ""]),
    content=st.text() | st.sampled_from(["", "parts", '{"type": "message"}', "é" * 50]),
    first=st.booleans(),
)
def test_no_wire_adapter_claims_a_role_and_text_dict(role: str, content: str, first: bool) -> None:
    # wire_adapter answers None for such a dict without asking the adapters: each must refuse it.
    data = {"role": role, "content": content} if first else {"content": content, "role": role}
    assert wire_adapter(data) is None
    assert not any(adapter.accepts(dict(data)) for adapter in (ANTHROPIC, GEMINI, RESPONSES))
