"""A local OpenAI-compatible HTTP server for tests: scripted answers, delays, 429s,
500s, malformed JSON and dropped connections, served on 127.0.0.1 to the real
``openai`` client (the SDK is never patched).

    with FakeOpenAIServer() as server:
        server.script(Status(429, headers={"Retry-After": "0.1"}), Reply("ok"))
        client = OpenAI(base_url=server.base_url, api_key="sk-test")
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "Delay",
    "Drop",
    "Empty",
    "FakeOpenAIServer",
    "Func",
    "Malformed",
    "Reply",
    "Status",
    "fake_openai",
]


@dataclass(frozen=True)
class Reply:
    """A valid chat.completion answer."""

    text: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = None
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Delay:
    """Wait, then behave as ``then``."""

    seconds: float
    then: Behaviour = field(default_factory=lambda: Reply("Summary after a delay."))


@dataclass(frozen=True)
class Status:
    """An HTTP error answer with an OpenAI-style error body."""

    code: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Malformed:
    """A 200 whose body is not valid JSON."""

    raw: bytes = b'{"id": "chatcmpl-x", "choices": [ {'


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Empty:
    """A well-formed answer with empty content."""

    content: str | None = ""


@dataclass(frozen=True)
class Func:
    """Decide per request: ``fn(request_body) -> Behaviour``."""

    fn: Callable[[dict[str, Any]], Behaviour]


Behaviour = Reply | Delay | Status | Malformed | Drop | Empty | Func


def echo_summary(body: dict[str, Any]) -> Reply:
    """Default: a short summary quoting the start of the newest request text."""
    messages = body.get("messages") or [{}]
    last = str(messages[-1].get("content") or "")
    return Reply("Summary: " + " ".join(last.split())[:200])


@dataclass
class Received:
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


class FakeOpenAIServer:
    """Serves ``POST /v1/chat/completions`` from a script of behaviours."""

    def __init__(self, *, default: Behaviour | None = None, delay: float = 0.0) -> None:
        self.default: Behaviour = default or Func(echo_summary)
        self.delay = delay
        self._script: list[Behaviour] = []
        self._lock = threading.Lock()
        self.requests: list[Received] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours, one per request, before falling back to the default."""
        with self._lock:
            self._script.extend(behaviours)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self) -> Behaviour:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    server.requests.append(Received(body, dict(self.headers.items()), time.monotonic()))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                    return
                if server.delay:
                    time.sleep(server.delay)
                self._behave(server._next(), body)

            def _behave(self, behaviour: Behaviour, body: dict[str, Any]) -> None:
                if isinstance(behaviour, Func):
                    behaviour = behaviour.fn(body)
                if isinstance(behaviour, Delay):
                    time.sleep(behaviour.seconds)
                    self._behave(behaviour.then, body)
                elif isinstance(behaviour, Reply):
                    self._json(200, completion(body, behaviour))
                elif isinstance(behaviour, Empty):
                    self._json(200, completion(body, Reply(behaviour.content)))
                elif isinstance(behaviour, Status):
                    error = behaviour.body or {"error": {"message": f"status {behaviour.code}",
                                                         "type": "server_error", "code": None}}
                    self._json(behaviour.code, error, behaviour.headers)
                elif isinstance(behaviour, Malformed):
                    self._raw(200, behaviour.raw)
                elif isinstance(behaviour, Drop):
                    self.close_connection = True
                    self.connection.close()

            def _json(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
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


def completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = sum(len(str(m.get("content") or "")) // 4 + 4 for m in body.get("messages", []))
    completion_tokens = reply.completion_tokens
    if completion_tokens is None:
        completion_tokens = len(reply.text or "") // 4 + 1
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or body.get("model", "gpt-4o-mini"),
        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                     "message": {"role": "assistant", "content": reply.text}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                  "total_tokens": prompt + completion_tokens},
    }


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A running fake server, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server
