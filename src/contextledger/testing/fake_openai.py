"""``FakeOpenAIServer``: a local OpenAI-compatible HTTP server for tests.

It serves ``POST /v1/chat/completions`` and ``POST /v1/responses`` on 127.0.0.1 from
a script of behaviours (answers, function calls, delays, 429s and 5xxs, malformed
JSON, dropped connections) to the real ``openai`` client, which is never patched,
and records every request with its body and headers::

    with FakeOpenAIServer() as server:
        server.script(Status(429, headers={"Retry-After": "0.1"}), Reply("ok"))
        client = OpenAI(base_url=server.base_url, api_key="sk-test")
        client.chat.completions.create(model="gpt-4o-mini", messages=[...])
        assert server.request_count == 2
"""

from __future__ import annotations

from typing import Any, cast

from contextledger.testing.behaviours import Behaviour, Empty, Endpoint, Func, RecordedRequest, Reply
from contextledger.testing.fake_server import FakeHandler, FakeServer
from contextledger.testing.rendering import newest_text, render

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

    def __init__(self, *, default: Behaviour | None = None, delay: float = 0.0) -> None:
        super().__init__(default=default or Func(echo_summary), delay=delay)

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
        """The requests that went to one endpoint (``"chat"`` or ``"responses"``)."""
        return [r for r in self.requests if r.endpoint == endpoint]

    def _post(self, handler: FakeHandler, request: RecordedRequest, serial: int) -> None:
        endpoint = request.endpoint
        if endpoint is None:
            handler.send_json(404, self._not_found_body())
            return
        self._pause()
        self._behave(handler, self._next(), request, serial, endpoint)

    def _error_body(self, code: int, message: str) -> dict[str, Any]:
        return _error(message, "server_error")

    def _not_found_body(self) -> dict[str, Any]:
        return _error("not found", "invalid_request_error")

    def _reply(
        self, handler: FakeHandler, behaviour: object, request: RecordedRequest, serial: int, route: str
    ) -> None:
        endpoint = cast(Endpoint, route)
        if isinstance(behaviour, Reply):
            self._answer(handler, render(endpoint, request.body, behaviour, serial=serial))
        elif isinstance(behaviour, Empty):
            self._answer(handler, render(endpoint, request.body, Reply(behaviour.content), serial=serial))


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
