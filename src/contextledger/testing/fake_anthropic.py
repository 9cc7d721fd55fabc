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
``Blocks`` for any content, such as ``redacted_thinking``, with cache usage.

Compaction (``contextledger.testing.compaction``): with the ``compact-2026-01-12``
beta header and a ``compact_20260112`` edit in ``context_management.edits``, a request
whose input (what is left after the newest compaction block) is over the trigger's
tokens is answered with a ``compaction`` block first, holding ``compaction_summary(request)``
(None: a failed compaction, ``content: null``), and the compaction's usage as an
``iterations`` entry; with ``pause_after_compaction`` the compaction block alone
(``stop_reason: "compaction"``). The edit, or a compaction block, without the beta header is
refused (400)::

    with FakeAnthropicServer() as server:
        server.script(Status(429, headers={"retry-after": "1"}), Reply("ok"))
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from http import HTTPStatus
from typing import Any

from contextledger.testing.anthropic_rules import anthropic_request_violations
from contextledger.testing.behaviours import (
    Delay,
    Drop,
    Empty,
    Func,
    Malformed,
    RecordedRequest,
    Reply,
    Status,
)
from contextledger.testing.compaction import (
    ANTHROPIC_COMPACTION_BETA,
    after_compaction,
    anthropic_compaction_trigger,
)
from contextledger.testing.fake_server import FakeHandler, FakeServer

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


def compacted_summary(request: RecordedRequest) -> str | None:
    """The default compaction summary: ``"Compacted: "`` and the start of the input's text."""
    texts: list[str] = []
    for message in after_compaction(request.body.get("messages")):
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else [{"text": content}]:
            text = block.get("text") or block.get("content") if isinstance(block, dict) else None
            if isinstance(text, str):
                texts.append(text.removeprefix("Compacted: "))
    return "Compacted: " + " ".join(" ".join(texts).split())[:200]


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


class FakeAnthropicServer(FakeServer[AnthropicBehaviour]):
    """Answers Anthropic Messages API requests from a script, then from ``default``.

    Each ``POST /v1/messages`` takes the next scripted behaviour (or the default when
    the script is used up); ``count_tokens`` requests are answered from the request
    and take none (``count_status``, when set, answers them with that error status
    instead). ``delay`` is added before every answer. Use it as a context manager, or
    ``start()`` and ``stop()`` it.
    """

    func_types = (Func, AnthropicFunc)

    def __init__(self, *, default: AnthropicBehaviour | None = None, delay: float = 0.0) -> None:
        super().__init__(default=default or Reply("Summary: noted."), delay=delay)
        #: An error status every ``count_tokens`` request is answered with (None: count).
        self.count_status: int | None = None
        #: The text of a compaction the server makes (None: the compaction fails).
        self.compaction_summary: Callable[[RecordedRequest], str | None] = compacted_summary
        #: How many compaction blocks the server returned.
        self.compactions = 0

    @property
    def base_url(self) -> str:
        """The URL to give the client as ``base_url`` (the SDK adds ``/v1/...``)."""
        return self._url

    @property
    def violations(self) -> list[tuple[int, list[str]]]:
        """``(request index, rules broken)`` for every request answered 400 by the checks."""
        return self._refusals()

    def _get(self, handler: FakeHandler) -> None:
        # No GET is served: answered as ``http.server`` answers a method it lacks.
        handler.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({handler.command!r})")

    def _post(self, handler: FakeHandler, request: RecordedRequest, serial: int) -> None:
        body = request.body
        path = request.path.split("?")[0].rstrip("/")
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            handler.send_json(404, _error(404, f"no endpoint {path}"))
            return
        counting = path.endswith("/count_tokens")
        found = anthropic_request_violations(body, count_tokens=counting)
        if not _has_beta(request):
            if anthropic_compaction_trigger(body) is not None:
                found.append(
                    f"context_management: compact_20260112 needs the {ANTHROPIC_COMPACTION_BETA} beta"
                )
            if any(_compaction_blocks(m) for m in body.get("messages") or []):
                found.append(f"messages: compaction blocks need the {ANTHROPIC_COMPACTION_BETA} beta")
        if found:
            self._refuse(handler, (serial - 1, found), _error(400, "; ".join(found)))
            return
        self._pause()
        if counting:
            status = self.count_status
            if status is not None:
                handler.send_json(status, _error(status, "the token counter failed"))
                return
            handler.send_json(200, {"input_tokens": _estimate(_read(body))})
            return
        self._behave(handler, self._next(), request, serial, path)

    def _error_body(self, code: int, message: str) -> dict[str, Any]:
        return _error(code, message)

    def _reply(
        self, handler: FakeHandler, behaviour: object, request: RecordedRequest, serial: int, route: str
    ) -> None:
        if isinstance(behaviour, Reply):
            blocks = _reply_blocks(behaviour, serial)
        elif isinstance(behaviour, Blocks):
            blocks = behaviour
        elif isinstance(behaviour, Empty):
            blocks = Blocks([])
        else:
            return
        body = _read(request.body)
        trigger = anthropic_compaction_trigger(body)
        if trigger is None or _estimate(body) <= trigger:
            self._answer(handler, render_message(body, blocks, serial=serial))
            return
        before = _estimate(body)
        summary = self.compaction_summary(request)
        block = {"type": "compaction", "content": summary}
        compacted = {**body, "messages": [{"role": "assistant", "content": [block]}]}
        with self._lock:
            self.compactions += 1
        if _pauses(body):  # the compaction block alone, the turn paused after it
            blocks = replace(blocks, content=[], stop_reason="compaction")
        payload = render_message(compacted, replace(blocks, content=[block, *blocks.content]), serial=serial)
        spent = {"input_tokens": before, "output_tokens": len(summary or "") // 4 + 1}
        payload["usage"]["iterations"] = [
            {"type": "compaction", "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, **spent},
            {"type": "message", **payload["usage"]},
        ]
        self._answer(handler, payload)


def _pauses(body: dict[str, Any]) -> bool:
    management = body.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    return any(
        isinstance(e, dict) and e.get("type") == "compact_20260112" and e.get("pause_after_compaction")
        for e in edits or []
    )


def _has_beta(request: RecordedRequest) -> bool:
    betas = request.header("anthropic-beta") or ""
    return ANTHROPIC_COMPACTION_BETA in [b.strip() for b in betas.split(",")]


def _compaction_blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content or [] if isinstance(b, dict) and b.get("type") == "compaction"]


def _read(body: dict[str, Any]) -> dict[str, Any]:
    """The request as the API reads it: every block before the newest compaction block dropped."""
    return {**body, "messages": after_compaction(body.get("messages"))}
