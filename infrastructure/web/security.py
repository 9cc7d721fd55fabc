"""Security headers on every response of the viewer, errors and static files included.

The pages run no script, load only the viewer's own stylesheet, draw the chart as
inline SVG and submit their forms to the viewer itself, so the content security
policy allows exactly that. No page may be framed (clickjacking), no response is
sniffed into another type, no Referer leaves the viewer (URLs carry conversation
keys). Pages and JSON show audit data that changes with the log: ``no-store``; the
stylesheet may be cached briefly.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SecurityHeaders", "security_headers"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)

_COMMON: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_NO_STORE = (b"cache-control", b"no-store")
_STATIC = (b"cache-control", b"public, max-age=3600")


def security_headers(path: str, status: int = 200) -> list[tuple[bytes, bytes]]:
    """The headers a response to ``path`` with ``status`` carries."""
    cached = status == 200 and path.startswith("/static/")
    return [*_COMMON, _STATIC if cached else _NO_STORE]


class SecurityHeaders:
    """ASGI middleware: sets the headers of ``security_headers`` on every HTTP
    response (replacing any of the same name the app set)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        names = {name for name, _ in security_headers(path)}
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + security_headers(path, message["status"])}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            # An error nothing handled: answer 500 with the headers here (the server's
            # own error response would go out without them), then let it be logged.
            if not started:
                body = b"Internal Server Error"
                await send_with_headers(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode("ascii")),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
            raise
