"""How a ``Reply`` looks on the wire: a ``chat.completion`` or a Responses ``response``
object, with usage, as the real API sends them."""

from __future__ import annotations

import time
from typing import Any

from contextledger.testing.behaviours import Endpoint, Reply

__all__ = ["estimate_tokens", "newest_text", "render", "texts_of"]


def _text_of(content: Any) -> str:
    """The text of a chat message's or a Responses input item's content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return ""


def _texts(body: dict[str, Any]) -> list[str]:
    """Every text the request sends, oldest first (either endpoint)."""
    if "messages" in body:
        return [_text_of(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict)]
    texts = [str(body["instructions"])] if body.get("instructions") else []
    given = body.get("input")
    if isinstance(given, str):
        return [*texts, given]
    for item in given or []:
        if isinstance(item, dict):
            text = _text_of(item.get("content"))
            texts.append(text or str(item.get("output") or item.get("arguments") or ""))
    return texts


def texts_of(body: dict[str, Any]) -> list[str]:
    """Every text the request sends, oldest first (either endpoint)."""
    return _texts(body)


def newest_text(body: dict[str, Any]) -> str:
    """The text of the newest message or input item of a request."""
    texts = _texts(body)
    return texts[-1] if texts else ""


def estimate_tokens(body: dict[str, Any]) -> int:
    """A rough prompt size: four characters a token, four tokens of overhead a message."""
    return sum(len(text) // 4 + 4 for text in _texts(body))


def render(endpoint: Endpoint, body: dict[str, Any], reply: Reply, *, serial: int) -> dict[str, Any]:
    """The JSON answer to ``body`` on ``endpoint``; ``serial`` makes ids unique."""
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else estimate_tokens(body)
    output = reply.completion_tokens
    if output is None:
        output = (
            len(reply.text or "") // 4
            + len(reply.reasoning or "") // 4
            + 1
            + sum(len(c.name) // 4 + len(c.arguments_json) // 4 + 1 for c in reply.tool_calls)
        )
    model = reply.model or str(body.get("model") or "gpt-4o-mini")
    call_ids = [c.call_id or f"call_{serial}_{i}" for i, c in enumerate(reply.tool_calls)]
    if endpoint == "chat":
        return _chat(reply, model=model, prompt=prompt, output=output, call_ids=call_ids, serial=serial)
    return _response(body, reply, model=model, prompt=prompt, output=output, call_ids=call_ids, serial=serial)


def _chat(
    reply: Reply, *, model: str, prompt: int, output: int, call_ids: list[str], serial: int
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call_id, call in zip(call_ids, reply.tool_calls, strict=True)
        ]
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": f"chatcmpl-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish, "message": message, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
        },
    }


def _response(
    body: dict[str, Any],
    reply: Reply,
    *,
    model: str,
    prompt: int,
    output: int,
    call_ids: list[str],
    serial: int,
) -> dict[str, Any]:
    incomplete = reply.finish_reason == "length"
    items: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{serial}",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
            }
        )
    if reply.text is not None:
        items.append(
            {
                "type": "message",
                "id": f"msg_{serial}",
                "role": "assistant",
                "status": "incomplete" if incomplete else "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    items += [
        {
            "type": "function_call",
            "id": f"fc_{serial}_{i}",
            "call_id": call_id,
            "name": call.name,
            "arguments": call.arguments_json,
            "status": "completed",
        }
        for i, (call_id, call) in enumerate(zip(call_ids, reply.tool_calls, strict=True))
    ]
    now = int(time.time())
    return {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": now,
        "completed_at": None if incomplete else now,
        "status": "incomplete" if incomplete else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "model": model,
        "output": items,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "previous_response_id": body.get("previous_response_id"),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output,
        },
    }
