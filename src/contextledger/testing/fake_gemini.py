"""``FakeGeminiServer``: a local Gemini API (``generateContent``, ``countTokens``) for
tests, spoken to by the real google-genai client, which is never patched::

    with FakeGeminiServer() as server:
        server.script(rate_limited(0.1), GeminiReply("ok", calls=[Call("lookup", {"q": 1})]))
        client = genai.Client(api_key="test", http_options=types.HttpOptions(base_url=server.url))
        client.models.generate_content(model="gemini-2.5-flash", contents="hi")

It serves ``POST /{v1beta,v1}/models/{model}:generateContent`` from a script of
behaviours (``GeminiReply``, ``GeminiFunc``, and the OpenAI fake's ``Reply``,
``Empty``, ``Delay``, ``Status``, ``Malformed``, ``Drop``, ``Func``; then ``default``)
and answers ``:countTokens`` with an estimate (about four characters a token). Every
request is recorded; one whose ``contents`` break Gemini's rules (``gemini_rules``)
is answered 400 ``INVALID_ARGUMENT`` naming them, as the real API refuses it, before
any scripted behaviour is used.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextledger.testing.behaviours import (
    Call,
    Delay,
    Drop,
    Empty,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)
from contextledger.testing.gemini_rules import gemini_request_violations

__all__ = ["FakeGeminiServer", "GeminiBehaviour", "GeminiFunc", "GeminiReply", "echo_summary", "rate_limited"]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


@dataclass(frozen=True)
class GeminiReply:
    """A valid ``generateContent`` answer: text, function calls (several make a parallel
    call; a ``Call`` without ``call_id`` goes out without an id, as Gemini sends them),
    an optional thought part first, and ``usage_metadata``.

    ``thought_signature`` goes on the first function call part (on the text part when
    there is no call), as Gemini places it. Token counts left out are estimated.
    """

    text: str | None = None
    _: KW_ONLY
    calls: Sequence[Call] = ()
    thought: str | None = None
    thought_signature: bytes | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    thoughts_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str = "STOP"
    model: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", tuple(self.calls))


@dataclass(frozen=True)
class GeminiFunc:
    """Decide per request: ``fn(request) -> GeminiBehaviour`` (``Func`` for the
    behaviours shared with the OpenAI fake)."""

    fn: Callable[[RecordedRequest], GeminiBehaviour]


GeminiBehaviour = GeminiReply | GeminiFunc | Reply | Empty | Delay | Status | Malformed | Drop | Func


def rate_limited(retry_delay: float | None = None, *, headers: Mapping[str, str] | None = None) -> Status:
    """A 429 ``RESOURCE_EXHAUSTED`` with Google's ``RetryInfo`` detail (``retryDelay``)."""
    details = []
    if retry_delay is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_delay:g}s"}
        )
    body = _error(429, "Resource has been exhausted (e.g. check quota).", details)
    return Status(429, body=body, headers=dict(headers or {}))


def _error(code: int, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}
    if details:
        error["details"] = details
    return {"error": error}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _newest_text(body: Mapping[str, Any]) -> str:
    for turn in reversed(body.get("contents") or []):
        for part in reversed(turn.get("parts") or []) if isinstance(turn, Mapping) else ():
            if isinstance(part, Mapping) and isinstance(part.get("text"), str) and not part.get("thought"):
                return str(part["text"])
    return ""


def _estimate(body: Mapping[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("contents", []))) // 4)


def _answer(reply: GeminiReply, body: Mapping[str, Any], model: str, serial: int) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if reply.thought is not None:
        parts.append({"text": reply.thought, "thought": True})
    if reply.text is not None:
        parts.append({"text": reply.text})
    for call in reply.calls:
        function_call: dict[str, Any] = {"name": call.name, "args": json.loads(call.arguments_json)}
        if call.call_id is not None:
            function_call["id"] = call.call_id
        parts.append({"functionCall": function_call})
    if reply.thought_signature is not None:
        target = next((p for p in parts if "functionCall" in p), None) or next(
            (p for p in parts if not p.get("thought")), None
        )
        if target is not None:
            target["thoughtSignature"] = _b64(reply.thought_signature)
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _estimate(body)
    output = reply.completion_tokens
    if output is None:
        output = max(1, len(json.dumps([p for p in parts if not p.get("thought")])) // 4)
    usage: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": output}
    total = prompt + output
    if reply.thoughts_tokens is not None:
        usage["thoughtsTokenCount"] = reply.thoughts_tokens
        total += reply.thoughts_tokens
    if reply.cached_tokens is not None:
        usage["cachedContentTokenCount"] = reply.cached_tokens
    usage["totalTokenCount"] = total
    candidate = {
        "content": {"role": "model", "parts": parts},
        "finishReason": reply.finish_reason,
        "index": 0,
    }
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": reply.model or model,
        "responseId": f"fake-{serial}",
    }


def _as_gemini(behaviour: Reply) -> GeminiReply:
    return GeminiReply(
        behaviour.text,
        calls=behaviour.tool_calls,
        thought=behaviour.reasoning,
        prompt_tokens=behaviour.prompt_tokens,
        completion_tokens=behaviour.completion_tokens,
        finish_reason="MAX_TOKENS" if behaviour.finish_reason == "length" else "STOP",
        model=behaviour.model,
    )


def echo_summary(request: RecordedRequest) -> GeminiReply:
    """The default answer: ``"Summary: "`` and the start of the request's newest text."""
    return GeminiReply("Summary: " + " ".join(_newest_text(request.body).split())[:200])


class FakeGeminiServer:
    """Answers Gemini API requests from a script of behaviours, then from ``default``.

    Use it as a context manager, or ``start()`` and ``stop()`` it; give the client
    ``HttpOptions(base_url=server.url)``.
    """

    def __init__(self, *, default: GeminiBehaviour | None = None, delay: float = 0.0) -> None:
        self.default: GeminiBehaviour = default or GeminiFunc(echo_summary)
        self.delay = delay
        self._script: list[GeminiBehaviour] = []
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._answers: list[dict[str, Any]] = []
        self._rejected: list[tuple[RecordedRequest, list[str]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"FakeGeminiServer({self.url!r}, requests={self.request_count})"

    @property
    def url(self) -> str:
        """The client's ``base_url`` (the API version is part of each request's path)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *behaviours: GeminiBehaviour) -> None:
        """Queue behaviours, one per ``generateContent`` request, before the default."""
        with self._lock:
            self._script.extend(behaviours)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The JSON bodies of the ``generateContent`` answers sent, in order (a copy)."""
        with self._lock:
            return list(self._answers)

    @property
    def rejected(self) -> list[tuple[RecordedRequest, list[str]]]:
        """The requests answered 400 for breaking Gemini's rules, with the rules broken."""
        with self._lock:
            return list(self._rejected)

    def start(self) -> FakeGeminiServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeGeminiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def _next(self) -> GeminiBehaviour:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                server._record(
                    RecordedRequest("GET", self.path, {}, dict(self.headers.items()), time.monotonic())
                )
                self._json(404, _error(404, "not found"))

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
                path = self.path.split("?")[0]
                head, _, method = path.rpartition(":")
                version, _, model = head.lstrip("/").partition("/models/")
                if (
                    version not in ("v1beta", "v1")
                    or not model
                    or method not in ("generateContent", "countTokens")
                ):
                    self._json(404, _error(404, f"{path} is not served"))
                    return
                problems = gemini_request_violations(
                    body.get("contents") or [], system_instruction=body.get("systemInstruction")
                )
                if problems:
                    with server._lock:
                        server._rejected.append((request, problems))
                    self._json(400, _error(400, "Invalid request: " + "; ".join(problems)))
                    return
                if method == "countTokens":
                    self._json(200, {"totalTokens": _estimate(body)})
                    return
                if server.delay:
                    time.sleep(server.delay)  # the server is slow: part of the scenario
                self._behave(server._next(), request, model, serial)

            def _behave(
                self, behaviour: GeminiBehaviour, request: RecordedRequest, model: str, serial: int
            ) -> None:
                if isinstance(behaviour, Func | GeminiFunc):
                    self._behave(behaviour.fn(request), request, model, serial)
                elif isinstance(behaviour, Delay):
                    time.sleep(behaviour.seconds)
                    self._behave(behaviour.then, request, model, serial)
                elif isinstance(behaviour, GeminiReply | Reply):
                    reply = behaviour if isinstance(behaviour, GeminiReply) else _as_gemini(behaviour)
                    self._answer(_answer(reply, request.body, model, serial))
                elif isinstance(behaviour, Empty):
                    if behaviour.content is None:
                        candidate = {"finishReason": "OTHER", "index": 0}
                        self._answer({"candidates": [candidate], "modelVersion": model})
                    else:
                        self._answer(_answer(GeminiReply(behaviour.content), request.body, model, serial))
                elif isinstance(behaviour, Status):
                    error = behaviour.body or _error(behaviour.code, f"status {behaviour.code}")
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
