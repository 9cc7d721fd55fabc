"""The fake OpenAI server with the real openai client: both endpoints, every behaviour,
and the record of every request."""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI

from contextledger.testing import (
    Call,
    Delay,
    Drop,
    Empty,
    FakeOpenAIServer,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)


def client(server: FakeOpenAIServer, **kwargs: float) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, **kwargs)  # type: ignore[arg-type]


def test_a_chat_reply_carries_text_parallel_tool_calls_and_usage(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply("Looking.", tool_calls=[Call("weather", {"city": "Paris"}), Call("time", call_id="t1")],
                             prompt_tokens=40, completion_tokens=9, cached_tokens=32))
    answer = client(fake_openai).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "weather and time in Paris?"}])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Looking."
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("weather", {"city": "Paris"}), ("time", {})]
    assert calls[1].id == "t1" and calls[0].id != calls[1].id
    assert answer.usage is not None and (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (40, 9)
    assert answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == 32
    assert answer.model == "gpt-4o-mini"


def test_a_responses_reply_is_text_output_with_usage(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply("Paris is sunny.", prompt_tokens=25, completion_tokens=5, model="gpt-4.1"))
    response = client(fake_openai).responses.create(model="gpt-4o-mini", input="Weather in Paris?",
                                                    instructions="Be brief.")
    assert response.output_text == "Paris is sunny." and response.status == "completed"
    assert response.model == "gpt-4.1" and response.instructions == "Be brief."
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (25, 5)
    assert response.usage.total_tokens == 30


def test_a_responses_reply_can_make_parallel_function_calls(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply(tool_calls=[Call("weather", {"city": "Paris"}), Call("weather", '{"city": "Rome"}')]))
    response = client(fake_openai).responses.create(
        model="gpt-4o-mini", input=[{"role": "user", "content": "Paris and Rome?"}],
        tools=[{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": False}])
    calls = [item for item in response.output if item.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert len({c.call_id for c in calls}) == 2 and response.output_text == ""
    assert response.tools[0].name == "weather"  # type: ignore[union-attr]


def test_one_script_serves_both_endpoints_in_order(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply("first"), Reply("second"))
    api = client(fake_openai)
    chat = api.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}])
    response = api.responses.create(model="gpt-4o-mini", input="b")
    assert (chat.choices[0].message.content, response.output_text) == ("first", "second")
    assert [r.endpoint for r in fake_openai.requests] == ["chat", "responses"]
    assert [r.body.get("input") for r in fake_openai.requests_to("responses")] == ["b"]


def test_a_func_decides_per_request_from_the_path_and_body(fake_openai: FakeOpenAIServer) -> None:
    def answer(request: RecordedRequest) -> Reply:
        asked = request.body["input"] if request.endpoint == "responses" else request.body["messages"][-1]["content"]
        return Reply(f"{request.path} got {asked}")

    fake_openai.script(Func(answer), Func(answer))
    api = client(fake_openai)
    chat = api.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    assert chat.choices[0].message.content == "/v1/chat/completions got x"
    assert api.responses.create(model="gpt-4o-mini", input="y").output_text == "/v1/responses got y"


def test_without_a_script_the_default_quotes_the_newest_text(fake_openai: FakeOpenAIServer) -> None:
    api = client(fake_openai)
    chat = api.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "keep  this"}])
    assert chat.choices[0].message.content == "Summary: keep this"
    response = api.responses.create(model="gpt-4o-mini", input=[{"role": "user", "content": "and that"}])
    assert response.output_text == "Summary: and that"


@pytest.mark.parametrize(("behaviour", "error"), [
    (Status(429, headers={"Retry-After": "7"}), openai.RateLimitError),
    (Status(500), openai.InternalServerError),
    (Drop(), openai.APIConnectionError),
])
def test_errors_reach_the_client_as_the_sdk_s_own(fake_openai: FakeOpenAIServer, behaviour: object,
                                                  error: type[Exception]) -> None:
    for endpoint in ("chat", "responses"):
        fake_openai.script(behaviour)  # type: ignore[arg-type]
        with pytest.raises(error) as caught:
            if endpoint == "chat":
                client(fake_openai).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            else:
                client(fake_openai).responses.create(model="m", input="x")
        if isinstance(caught.value, openai.RateLimitError):
            assert caught.value.response.headers["retry-after"] == "7"


def test_a_delay_longer_than_the_client_timeout_is_a_timeout(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Delay(1.0, Reply("late")))
    with pytest.raises(openai.APITimeoutError):
        client(fake_openai, timeout=0.2).responses.create(model="m", input="x")


def test_malformed_and_empty_answers_reach_the_client_as_they_are(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Malformed(), Empty(), Empty(None))
    api = client(fake_openai)
    with pytest.raises(json.JSONDecodeError):  # what the SDK raises on a body that is not JSON
        api.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert api.responses.create(model="m", input="x").output_text == ""
    assert api.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]
                                       ).choices[0].message.content is None


def test_every_request_is_recorded_with_body_and_headers(fake_openai: FakeOpenAIServer) -> None:
    client(fake_openai).chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                                extra_headers={"Idempotency-Key": "k-1"})
    [request] = fake_openai.requests
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert request.header("authorization") == "Bearer sk-test" and request.header("IDEMPOTENCY-KEY") == "k-1"
    assert fake_openai.request_count == 1 and repr(fake_openai).startswith("FakeOpenAIServer('http://127.0.0.1:")


def test_an_unknown_path_is_a_404_that_uses_no_scripted_behaviour(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script(Reply("kept"))
    with pytest.raises(openai.NotFoundError):
        client(fake_openai).embeddings.create(model="m", input="x")
    assert client(fake_openai).responses.create(model="m", input="x").output_text == "kept"
    assert [r.endpoint for r in fake_openai.requests] == [None, "responses"]


def test_a_responses_reply_with_reasoning_and_the_answers_the_client_received(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.script(
        Reply(reasoning="two lookups", tool_calls=[Call("weather", {"city": "Oslo"}), Call("time")]),
        Reply("Done."),
    )
    api = client(fake_openai)
    first = api.responses.create(model="gpt-4o-mini", input="Oslo?")
    assert [item.type for item in first.output] == ["reasoning", "function_call", "function_call"]
    assert first.output[0].summary[0].text == "two lookups"  # type: ignore[union-attr]
    chat = api.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    assert chat.choices[0].message.content == "Done."
    answers = fake_openai.answers
    assert len(answers) == 2 and answers[0]["id"] == first.id and answers[1]["id"] == chat.id
    # The recorded output is exactly what the client parsed, ids included.
    assert answers[0]["output"] == [item.model_dump(exclude_unset=True) for item in first.output]
