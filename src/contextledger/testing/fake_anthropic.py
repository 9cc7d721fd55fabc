"""``FakeAnthropicServer``: a local Anthropic Messages API server for tests.

It serves ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` on 127.0.0.1
(an ephemeral port, one thread per connection) to the real ``anthropic`` client,
which is never patched. Every request is recorded and checked with
``anthropic_rules``: a request that breaks a rule is answered 400
``invalid_request_error`` naming the violations, as the real API does, and its
violations are kept in ``violations``. Replies come from a script of behaviours:
the same ``Delay``, ``Status``, ``Malformed``, ``Drop``, ``Empty`` and ``Func`` as the
fake OpenAI server (or ``AnthropicFunc``, deciding per request); ``Reply`` with text,
``Call`` as ``tool_use`` blocks and ``reasoning`` as a signed ``thinking`` block; and
``Blocks`` for any content, such as ``redacted_thinking``, with cache usage::

    with FakeAnthropicServer() as server:
        server.script(Status(429, headers={"retry-after": "1"}), Reply("ok"))
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test")
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextledger.testing.anthropic_rules import anthropic_request_violations
from contextledger.testing.behaviours import (
    Behaviour,
    Delay,
    Drop,
    Empty,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)

__all__ = [
    "AnthropicBehaviour",
    "AnthropicFunc",
    "Blocks",
    "FakeAnthropicServer",
    "redacted_thinking",
    "thinking",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def thinking(text: str, signature: str | None = None) -> dict[str, Any]:
    """A ``thinking`` block with a signature (a made-up one unless given)."""
    return {
        "type": "thinking",
        "thinking": text,
        "signature": signature or "sig-" + hashlib.sha256(text.encode()).hexdigest()[:24],
    }


def redacted_thinking(data: str = "EmwKAhgBEgy3va3pzix/LafPsn4a") -> dict[str, Any]:
    """A ``redacted_thinking`` block (its data is opaque)."""
    return {"type": "redacted_thinking", "data": data}


@dataclass(frozen=True)
class Blocks:
    """A reply with exactly these content blocks and this usage."""

    content: Sequence[Mapping[str, Any]]
    _: KW_ONLY
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    model: str | None = None


@dataclass(frozen=True)
class AnthropicFunc:
    """Decide per request: ``fn(request) -> AnthropicBehaviour``."""

    fn: Callable[[RecordedRequest], AnthropicBehaviour]


AnthropicBehaviour = Reply | Blocks | Delay | Status | Malformed | Drop | Empty | Func | AnthropicFunc


def _texts(body: Mapping[str, Any]) -> list[str]:
    texts = (
        [body["system"]]
        if isinstance(body.get("system"), str)
        else [str(b.get("text") or "") for b in body.get("system") or [] if isinstance(b, dict)]
    )
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.append(
                " ".join(
                    json.dumps(b.get("text") or b.get("content") or b.get("input") or "")
                    for b in content
                    if isinstance(b, dict)
                )
            )
    return texts


def _estimate(body: Mapping[str, Any]) -> int:
    return sum(len(text) // 4 + 4 for text in _texts(body))


def _reply_blocks(reply: Reply, serial: int) -> Blocks:
    content: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        content.append(thinking(reply.reasoning))
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for number, call in enumerate(reply.tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": call.call_id or f"toolu_{serial:04d}_{number}",
                "name": call.name,
                "input": json.loads(call.arguments_json),
            }
        )
    stop = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use"}.get(
        reply.finish_reason or "", reply.finish_reason
    )
    return Blocks(
        content,
        stop_reason=stop,
        input_tokens=reply.prompt_tokens,
        output_tokens=reply.completion_tokens,
        cache_read_input_tokens=reply.cached_tokens,
        model=reply.model,
    )


def render_message(body: Mapping[str, Any], blocks: Blocks, *, serial: int) -> dict[str, Any]:
    """The JSON of an ``anthropic.types.Message`` answering ``body``."""
    content = [dict(b) for b in blocks.content]
    stop = blocks.stop_reason or (
        "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
    )
    output = blocks.output_tokens
    if output is None:
        output = 1 + sum(len(json.dumps(b)) // 4 for b in content)
    fresh = blocks.input_tokens
    if fresh is None:
        cached = blocks.cache_read_input_tokens + blocks.cache_creation_input_tokens
        fresh = max(_estimate(body) - cached, 1)
    return {
        "id": f"msg_{serial:06d}",
        "type": "message",
        "role": "assistant",
        "model": blocks.model or str(body.get("model") or "claude-haiku-4-5"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": fresh,
            "output_tokens": output,
            "cache_creation_input_tokens": blocks.cache_creation_input_tokens,
            "cache_read_input_tokens": blocks.cache_read_input_tokens,
        },
    }


def _error(code: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(code, "api_error" if code >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class FakeAnthropicServer:
    """Answers Anthropic Messages API requests from a script, then from ``default``.

    Each ``POST /v1/messages`` takes the next scripted behaviour (or the default when
    the script is used up); ``count_tokens`` requests are answered from the request
    and take none (``count_status``, when set, answers them with that error status
    instead). ``delay`` is added before every answer. Use it as a context manager, or
    ``start()`` and ``stop()`` it.
    """

    def __init__(self, *, default: AnthropicBehaviour | None = None, delay: float = 0.0) -> None:
        self.default: AnthropicBehaviour = default or Reply("Summary: noted.")
        self.delay = delay
        #: An error status every ``count_tokens`` request is answered with (None: count).
        self.count_status: int | None = None
        self._script: list[AnthropicBehaviour] = []
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._violations: list[tuple[int, list[str]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"FakeAnthropicServer({self.base_url!r}, requests={len(self.requests)})"

    @property
    def base_url(self) -> str:
        """The URL to give the client as ``base_url`` (the SDK adds ``/v1/...``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *behaviours: AnthropicBehaviour) -> None:
        """Queue behaviours, one per ``messages.create``, before the default."""
        with self._lock:
            self._script.extend(behaviours)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def violations(self) -> list[tuple[int, list[str]]]:
        """``(request index, rules broken)`` for every request answered 400 by the checks."""
        with self._lock:
            return list(self._violations)

    def start(self) -> FakeAnthropicServer:
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

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def _next(self) -> AnthropicBehaviour:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms stall per answer (Nagle + delayed ACK)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                if not isinstance(body, dict):
                    body = {"_raw": body}
                request = RecordedRequest(
                    "POST", self.path, body, dict(self.headers.items()), time.monotonic()
                )
                serial = server._record(request)
                path = self.path.split("?")[0].rstrip("/")
                if path not in ("/v1/messages", "/v1/messages/count_tokens"):
                    self._json(404, _error(404, f"no endpoint {path}"))
                    return
                counting = path.endswith("/count_tokens")
                found = anthropic_request_violations(body, count_tokens=counting)
                if found:
                    with server._lock:
                        server._violations.append((serial - 1, found))
                    self._json(400, _error(400, "; ".join(found)))
                    return
                if server.delay:
                    time.sleep(server.delay)  # the server is slow: part of the scenario
                if counting:
                    status = server.count_status
                    if status is not None:
                        self._json(status, _error(status, "the token counter failed"))
                        return
                    self._json(200, {"input_tokens": _estimate(body)})
                    return
                self._behave(server._next(), request, serial)

            def _behave(
                self, behaviour: AnthropicBehaviour | Behaviour, request: RecordedRequest, serial: int
            ) -> None:
                if isinstance(behaviour, AnthropicFunc | Func):
                    self._behave(behaviour.fn(request), request, serial)
                elif isinstance(behaviour, Delay):
                    time.sleep(behaviour.seconds)
                    self._behave(behaviour.then, request, serial)
                elif isinstance(behaviour, Reply):
                    self._json(
                        200, render_message(request.body, _reply_blocks(behaviour, serial), serial=serial)
                    )
                elif isinstance(behaviour, Blocks):
                    self._json(200, render_message(request.body, behaviour, serial=serial))
                elif isinstance(behaviour, Empty):
                    self._json(200, render_message(request.body, Blocks([]), serial=serial))
                elif isinstance(behaviour, Status):
                    self._json(
                        behaviour.code,
                        behaviour.body or _error(behaviour.code, f"status {behaviour.code}"),
                        behaviour.headers,
                    )
                elif isinstance(behaviour, Malformed):
                    self._raw(200, behaviour.raw)
                elif isinstance(behaviour, Drop):
                    self.close_connection = True
                    self.connection.close()

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
