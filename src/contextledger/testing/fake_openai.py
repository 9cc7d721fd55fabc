"""``FakeOpenAIServer``: a local OpenAI-compatible HTTP server for tests.

It serves ``POST /v1/chat/completions`` and ``POST /v1/responses`` on 127.0.0.1 from
a script of behaviours (answers, function calls, delays, 429s and 5xxs, malformed
JSON, dropped connections) to the real ``openai`` client, which is never patched,
and records every request with its body and headers. It compacts as OpenAI does
(``contextledger.testing.compaction``): ``POST /v1/responses/compact`` answers, from
the request (its ``input``, after the items of its ``previous_response_id``: the input
and output of an earlier answer) and without taking a scripted behaviour, the user
messages and an opaque ``compaction`` item; a ``responses.create`` with ``context_management=[{"type":
"compaction", "compact_threshold": N}]`` whose input is over N tokens gets a compaction
item first in its ``output``. A compaction item it did not issue, or one issued for
another model family, is refused (400). ``strict=True`` also refuses a Responses input
that breaks the API's rules (``responses_input_violations``)::

    with FakeOpenAIServer() as server:
        server.script(Status(429, headers={"Retry-After": "0.1"}), Reply("ok"))
        client = OpenAI(base_url=server.base_url, api_key="sk-test")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
        assert server.request_count == 2
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, cast

from contextledger.testing.behaviours import Behaviour, Empty, Endpoint, Func, RecordedRequest, Reply
from contextledger.testing.compaction import OpenAICompactions, compaction_threshold
from contextledger.testing.fake_server import FakeHandler, FakeServer
from contextledger.testing.openai_rules import responses_input_violations
from contextledger.testing.rendering import estimate_tokens, newest_text, render, texts_of

__all__ = ["FakeOpenAIServer", "echo_summary"]


def echo_summary(request: RecordedRequest) -> Reply:
    """The default answer: ``"Summary: "`` and the start of the request's newest text."""
    return Reply("Summary: " + " ".join(newest_text(request.body).split())[:200])


class FakeOpenAIServer(FakeServer[Behaviour]):
    """Answers OpenAI API requests from a script of behaviours, then from ``default``.

    Each request to a served endpoint takes the next scripted behaviour (or the
    default when the script is used up); ``delay`` is added before every answer.
    Use it as a context manager, or ``start()`` and ``stop()`` it.
    """

    url_suffix = "/v1"

    def __init__(self, *, default: Behaviour | None = None, delay: float = 0.0, strict: bool = False) -> None:
        super().__init__(default=default or Func(echo_summary), delay=delay)
        #: Refuse (400) a Responses input that breaks the API's rules.
        self.strict = strict
        #: The compaction items issued, and the checks of those sent back.
        self.compactions = OpenAICompactions()
        #: An error status every ``responses/compact`` request is answered with (None: compact).
        self.compact_status: int | None = None
        #: Each Responses answer's input and output items, by response id (what
        #: ``previous_response_id`` refers to).
        self._stored: dict[str, list[Any]] = {}

    @property
    def violations(self) -> list[tuple[int, list[str]]]:
        """``(request index, rules broken)`` for every request answered 400 by the checks."""
        return self._refusals()

    @property
    def base_url(self) -> str:
        """The URL to give the client as ``base_url`` (ends in ``/v1``)."""
        return self._url

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The JSON bodies of the answers rendered from a ``Reply`` (or ``Empty``), in
        the order they were sent (a copy): a Responses answer's ``output`` holds the
        exact items the client received, ids included."""
        return super().answers

    def requests_to(self, endpoint: Endpoint) -> list[RecordedRequest]:
        """The requests that went to one endpoint (``"chat"``, ``"responses"`` or ``"compact"``)."""
        return [r for r in self.requests if r.endpoint == endpoint]

    def _post(self, handler: FakeHandler, request: RecordedRequest, serial: int) -> None:
        endpoint = request.endpoint
        if endpoint is None:
            handler.send_json(404, self._not_found_body())
            return
        if endpoint != "chat":
            model = str(request.body.get("model") or "")
            given = request.body.get("input")
            found = self.compactions.problems(model, given)
            if self.strict and isinstance(given, list):
                found += responses_input_violations(given)
            if found:
                self._refuse(handler, (serial - 1, found), _error("; ".join(found), "invalid_request_error"))
                return
        self._pause()
        if endpoint == "compact":
            self._compact(handler, request, serial)
            return
        self._behave(handler, self._next(), request, serial, endpoint)

    def _compact(self, handler: FakeHandler, request: RecordedRequest, serial: int) -> None:
        """``responses.compact``: every user message of the input, then one compaction
        item standing for the whole input."""
        if self.compact_status is not None:
            code = self.compact_status
            handler.send_json(code, self._error_body(code, "the compaction failed"))
            return
        body = request.body
        items = _input_items(body.get("input"))
        previous = body.get("previous_response_id")
        if previous is not None:
            with self._lock:
                earlier = self._stored.get(str(previous))
            if earlier is None:
                message = f"Previous response with id '{previous}' not found."
                self._refuse(handler, (serial - 1, [message]), _error(message, "invalid_request_error"))
                return
            items = [*earlier, *items]
            body = {**body, "input": items}
        users = [_user_item(i) for i in items if isinstance(i, dict) and _is_user(i)]
        item = self.compactions.issue(str(body.get("model") or ""), texts_of(body), serial)
        prompt = self._prompt_tokens(body)
        output = 8 + len(item["encrypted_content"]) // 16
        self._answer(
            handler,
            {
                "id": f"resp_cmp_{serial}",
                "object": "response.compaction",
                "created_at": int(time.time()),
                "output": [*users, {**item, "created_by": "fake"}],
                "usage": _usage(prompt, output),
            },
        )

    def _prompt_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's size: its texts, each compaction item at the size of its summary."""
        return estimate_tokens(body) + self.compactions.tokens(body.get("input"))

    def _error_body(self, code: int, message: str) -> dict[str, Any]:
        return _error(message, "server_error")

    def _not_found_body(self) -> dict[str, Any]:
        return _error("not found", "invalid_request_error")

    def _reply(
        self, handler: FakeHandler, behaviour: object, request: RecordedRequest, serial: int, route: str
    ) -> None:
        endpoint = cast(Endpoint, route)
        if isinstance(behaviour, Empty):
            behaviour = Reply(behaviour.content)
        if not isinstance(behaviour, Reply):
            return
        body = request.body
        if endpoint == "chat":
            self._answer(handler, render(endpoint, body, behaviour, serial=serial))
            return
        prompt = self._prompt_tokens(body)
        if behaviour.prompt_tokens is None:
            behaviour = replace(behaviour, prompt_tokens=prompt)
        payload = render(endpoint, body, behaviour, serial=serial)
        threshold = compaction_threshold(body)
        if threshold is not None and prompt > threshold:
            item = self.compactions.issue(payload["model"], texts_of(body), serial)
            payload["output"].insert(0, item)
        with self._lock:
            self._stored[payload["id"]] = [*_input_items(body.get("input")), *payload["output"]]
        self._answer(handler, payload)


def _input_items(given: Any) -> list[Any]:
    if isinstance(given, list):
        return list(given)
    return [] if given is None else [{"role": "user", "content": str(given)}]


def _is_user(item: dict[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


def _user_item(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if isinstance(content, str):
        content = [{"type": "input_text", "text": content}]
    return {"type": "message", "role": "user", "content": content}


def _usage(prompt: int, output: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
