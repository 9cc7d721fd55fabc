"""A local OpenAI-compatible server for ``POST /v1/responses``, for the real ``openai``
client and the Agents SDK's ``Runner`` (nothing is patched). Answers come from a
``respond(body) -> output items`` function; every request body is kept.

    with FakeResponsesServer(scripted_agent) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeResponsesServer", "Respond", "function_call", "reasoning", "text"]

Item = dict[str, Any]
Respond = Callable[[dict[str, Any]], list[Item]]

_ids = itertools.count(1)


def text(words: str) -> Item:
    """An assistant output message item."""
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": words, "annotations": []}],
    }


def function_call(name: str, arguments: dict[str, Any]) -> Item:
    """A function call output item with fresh ids."""
    n = next(_ids)
    return {
        "id": f"fc_{n}",
        "type": "function_call",
        "call_id": f"call_{n}",
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def reasoning(summary: str) -> Item:
    """A reasoning item with a readable summary."""
    return {
        "id": f"rs_{next(_ids)}",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}],
    }


class FakeResponsesServer:
    """Serves ``POST /v1/responses`` with ``respond(body)``'s output items."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeResponsesServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeResponsesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/responses"):
                    self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                    return
                with server._lock:
                    server.requests.append(body)
                try:
                    output = server.respond(body)
                except Exception as exc:  # a broken script shows as a 400 to the client
                    self._json(400, {"error": {"message": repr(exc), "type": "invalid_request_error"}})
                    return
                self._json(200, response(body, output))

            def _json(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def response(body: dict[str, Any], output: list[Item]) -> dict[str, Any]:
    """A completed Response object around ``output``."""
    size = len(json.dumps(body.get("input", ""))) // 4
    out = len(json.dumps(output)) // 4
    return {
        "id": f"resp_{next(_ids)}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model", "gpt-4o-mini"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": size,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": size + out,
        },
    }
