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

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextledger.testing.behaviours import (
    Behaviour,
    Delay,
    Drop,
    Empty,
    Endpoint,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)
from contextledger.testing.rendering import newest_text, render

__all__ = ["FakeOpenAIServer", "echo_summary"]


def echo_summary(request: RecordedRequest) -> Reply:
    """The default answer: ``"Summary: "`` and the start of the request's newest text."""
    return Reply("Summary: " + " ".join(newest_text(request.body).split())[:200])


class FakeOpenAIServer:
    """Answers OpenAI API requests from a script of behaviours, then from ``default``.

    Each request to a served endpoint takes the next scripted behaviour (or the
    default when the script is used up); ``delay`` is added before every answer.
    Use it as a context manager, or ``start()`` and ``stop()`` it.
    """

    def __init__(self, *, default: Behaviour | None = None, delay: float = 0.0) -> None:
        self.default: Behaviour = default or Func(echo_summary)
        self.delay = delay
        self._script: list[Behaviour] = []
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._answers: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"FakeOpenAIServer({self.base_url!r}, requests={self.request_count})"

    @property
    def base_url(self) -> str:
        """The URL to give the client as ``base_url`` (ends in ``/v1``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours, one per request, before falling back to the default."""
        with self._lock:
            self._script.extend(behaviours)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The JSON bodies of the answers rendered from a ``Reply`` (or ``Empty``), in
        the order they were sent (a copy): a Responses answer's ``output`` holds the
        exact items the client received, ids included."""
        with self._lock:
            return list(self._answers)

    @property
    def request_count(self) -> int:
        """How many requests have arrived."""
        with self._lock:
            return len(self._requests)

    def requests_to(self, endpoint: Endpoint) -> list[RecordedRequest]:
        """The requests that went to one endpoint (``"chat"`` or ``"responses"``)."""
        return [r for r in self.requests if r.endpoint == endpoint]

    def start(self) -> FakeOpenAIServer:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def _next(self) -> Behaviour:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's
            # algorithm and the client's delayed ACK hold every answer about 40 ms.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                server._record(RecordedRequest("GET", self.path, {}, dict(self.headers.items()),
                                               time.monotonic()))
                self._json(404, _error("not found", "invalid_request_error"))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                if not isinstance(body, dict):
                    body = {"_raw": body}
                headers = dict(self.headers.items())
                request = RecordedRequest("POST", self.path, body, headers, time.monotonic())
                serial = server._record(request)
                endpoint = request.endpoint
                if endpoint is None:
                    self._json(404, _error("not found", "invalid_request_error"))
                    return
                if server.delay:
                    time.sleep(server.delay)  # the server is slow: part of the scenario
                self._behave(server._next(), request, endpoint, serial)

            def _behave(self, behaviour: Behaviour, request: RecordedRequest, endpoint: Endpoint,
                        serial: int) -> None:
                if isinstance(behaviour, Func):
                    self._behave(behaviour.fn(request), request, endpoint, serial)
                elif isinstance(behaviour, Delay):
                    time.sleep(behaviour.seconds)
                    self._behave(behaviour.then, request, endpoint, serial)
                elif isinstance(behaviour, Reply):
                    self._answer(render(endpoint, request.body, behaviour, serial=serial))
                elif isinstance(behaviour, Empty):
                    self._answer(render(endpoint, request.body, Reply(behaviour.content), serial=serial))
                elif isinstance(behaviour, Status):
                    error = behaviour.body or _error(f"status {behaviour.code}", "server_error")
                    self._json(behaviour.code, error, behaviour.headers)
                elif isinstance(behaviour, Malformed):
                    self._raw(200, behaviour.raw)
                elif isinstance(behaviour, Drop):
                    self.close_connection = True
                    self.connection.close()

            def _answer(self, payload: dict[str, Any]) -> None:
                with server._lock:
                    server._answers.append(payload)
                self._json(200, payload)

            def _json(
                self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                self._raw(code, json.dumps(payload).encode(), headers)

            def _raw(self, code: int, data: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

        return Handler


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
