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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
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
from contextledger.testing.fake_server import FakeHandler, FakeServer
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


class FakeGeminiServer(FakeServer[GeminiBehaviour]):
    """Answers Gemini API requests from a script of behaviours, then from ``default``.

    Use it as a context manager, or ``start()`` and ``stop()`` it; give the client
    ``HttpOptions(base_url=server.url)``.
    """

    func_types = (Func, GeminiFunc)

    def __init__(self, *, default: GeminiBehaviour | None = None, delay: float = 0.0) -> None:
        super().__init__(default=default or GeminiFunc(echo_summary), delay=delay)

    @property
    def url(self) -> str:
        """The client's ``base_url`` (the API version is part of each request's path)."""
        return self._url

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The JSON bodies of the ``generateContent`` answers sent, in order (a copy)."""
        return super().answers

    @property
    def rejected(self) -> list[tuple[RecordedRequest, list[str]]]:
        """The requests answered 400 for breaking Gemini's rules, with the rules broken."""
        return self._refusals()

    def _post(self, handler: FakeHandler, request: RecordedRequest, serial: int) -> None:
        body = request.body
        path = request.path.split("?")[0]
        head, _, method = path.rpartition(":")
        version, _, model = head.lstrip("/").partition("/models/")
        if version not in ("v1beta", "v1") or not model or method not in ("generateContent", "countTokens"):
            handler.send_json(404, _error(404, f"{path} is not served"))
            return
        problems = gemini_request_violations(
            body.get("contents") or [], system_instruction=body.get("systemInstruction")
        )
        if problems:
            self._refuse(handler, (request, problems), _error(400, "Invalid request: " + "; ".join(problems)))
            return
        if method == "countTokens":
            handler.send_json(200, {"totalTokens": _estimate(body)})
            return
        self._pause()
        self._behave(handler, self._next(), request, serial, model)

    def _error_body(self, code: int, message: str) -> dict[str, Any]:
        return _error(code, message)

    def _reply(
        self, handler: FakeHandler, behaviour: object, request: RecordedRequest, serial: int, route: str
    ) -> None:
        model = route
        if isinstance(behaviour, GeminiReply | Reply):
            reply = behaviour if isinstance(behaviour, GeminiReply) else _as_gemini(behaviour)
            self._answer(handler, _answer(reply, request.body, model, serial))
        elif isinstance(behaviour, Empty):
            if behaviour.content is None:
                candidate = {"finishReason": "OTHER", "index": 0}
                self._answer(handler, {"candidates": [candidate], "modelVersion": model})
            else:
                self._answer(handler, _answer(GeminiReply(behaviour.content), request.body, model, serial))
