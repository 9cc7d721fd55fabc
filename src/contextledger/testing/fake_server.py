"""The HTTP plumbing the fake provider servers share.

``FakeServer`` serves on 127.0.0.1 (an ephemeral port, one thread per connection),
records every request as a ``RecordedRequest``, hands out scripted behaviours one
per answered request (then ``default``), and carries out the behaviours every
provider answers alike: ``Func`` (and the provider's own ``*Func``), ``Delay``,
``Status``, ``Malformed`` and ``Drop``. A provider's server says which requests it
serves (``_post``), how its error bodies look (``_error_body``) and how it renders
its answers (``_reply``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, Self, TypeVar

from contextledger.testing.behaviours import (
    Delay,
    Drop,
    Func,
    Malformed,
    RecordedRequest,
    Status,
)

__all__ = ["FakeHandler", "FakeServer"]

B = TypeVar("B")


class FakeHandler(BaseHTTPRequestHandler):
    """One connection's requests: read and record them, let the fake answer them."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's
    # algorithm and the client's delayed ACK hold every answer about 40 ms.
    disable_nagle_algorithm = True
    fake: ClassVar[FakeServer[Any]]

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        self.fake._get(self)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"_raw": body}
        request = RecordedRequest("POST", self.path, body, dict(self.headers.items()), time.monotonic())
        serial = self.fake._record(request)
        self.fake._post(self, request, serial)

    def send_json(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        """Answer ``code`` with ``payload`` as JSON (and these extra headers)."""
        self.send_raw(code, json.dumps(payload).encode(), headers)

    def send_raw(self, code: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        """Answer ``code`` with exactly these bytes as an ``application/json`` body."""
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

    def drop(self) -> None:
        """Close the connection without answering."""
        self.close_connection = True
        self.connection.close()


class FakeServer(Generic[B]):
    """A scripted fake API server; ``B`` is the behaviours its script takes.

    Use it as a context manager, or ``start()`` and ``stop()`` it.
    """

    #: The behaviours, ``Func`` and the provider's own, that decide per request through ``fn``.
    func_types: ClassVar[tuple[type, ...]] = (Func,)
    #: What the client's base URL adds to ``http://host:port``.
    url_suffix: ClassVar[str] = ""

    def __init__(self, *, default: B, delay: float = 0.0) -> None:
        self.default: B = default
        self.delay = delay
        self._script: list[B] = []
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._answers: list[dict[str, Any]] = []
        self._refused: list[Any] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url!r}, requests={self.request_count})"

    @property
    def _url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.url_suffix}"

    def script(self, *behaviours: B) -> None:
        """Queue behaviours, one per answered request, before falling back to the default."""
        with self._lock:
            self._script.extend(behaviours)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The JSON bodies of the answers rendered from the script, in the order they
        were sent (a copy)."""
        with self._lock:
            return list(self._answers)

    @property
    def request_count(self) -> int:
        """How many requests have arrived."""
        with self._lock:
            return len(self._requests)

    def start(self) -> Self:
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # What a provider's server says.

    def _post(self, handler: FakeHandler, request: RecordedRequest, serial: int) -> None:
        """Answer a recorded POST (``serial`` counts requests from 1)."""
        raise NotImplementedError

    def _error_body(self, code: int, message: str) -> dict[str, Any]:
        """The provider's JSON error body for an HTTP ``code``."""
        raise NotImplementedError

    def _reply(
        self, handler: FakeHandler, behaviour: object, request: RecordedRequest, serial: int, route: str
    ) -> None:
        """Render a behaviour that answers with content (``Reply``, ``Empty``, ...)."""
        raise NotImplementedError

    def _not_found_body(self) -> dict[str, Any]:
        """The provider's JSON error body for a path it does not serve."""
        return self._error_body(404, "not found")

    def _get(self, handler: FakeHandler) -> None:
        """A GET is recorded and answered 404: no fake serves one."""
        self._record(
            RecordedRequest("GET", handler.path, {}, dict(handler.headers.items()), time.monotonic())
        )
        handler.send_json(404, self._not_found_body())

    # The plumbing.

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def _next(self) -> B:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _pause(self) -> None:
        if self.delay:
            time.sleep(self.delay)  # the server is slow: part of the scenario

    def _refuse(self, handler: FakeHandler, entry: object, error: dict[str, Any]) -> None:
        """Answer 400 with ``error`` for a request that breaks the API's rules, and keep
        ``entry`` (what the provider's server reports of it)."""
        with self._lock:
            self._refused.append(entry)
        handler.send_json(400, error)

    def _refusals(self) -> list[Any]:
        with self._lock:
            return list(self._refused)

    def _answer(self, handler: FakeHandler, payload: dict[str, Any]) -> None:
        with self._lock:
            self._answers.append(payload)
        handler.send_json(200, payload)

    def _behave(
        self, handler: FakeHandler, behaviour: object, request: RecordedRequest, serial: int, route: str
    ) -> None:
        """Carry out ``behaviour``; ``route`` is what the provider's rendering needs
        of the request's path (the endpoint, the model)."""
        if isinstance(behaviour, self.func_types):
            fn: Callable[[RecordedRequest], object] = behaviour.fn  # type: ignore[attr-defined]
            self._behave(handler, fn(request), request, serial, route)
        elif isinstance(behaviour, Delay):
            time.sleep(behaviour.seconds)
            self._behave(handler, behaviour.then, request, serial, route)
        elif isinstance(behaviour, Status):
            error = behaviour.body or self._error_body(behaviour.code, f"status {behaviour.code}")
            handler.send_json(behaviour.code, error, behaviour.headers)
        elif isinstance(behaviour, Malformed):
            handler.send_raw(200, behaviour.raw)
        elif isinstance(behaviour, Drop):
            handler.drop()
        else:
            self._reply(handler, behaviour, request, serial, route)

    def _handler(self) -> type[FakeHandler]:
        fake = self

        class Handler(FakeHandler):
            pass

        Handler.fake = fake
        return Handler
