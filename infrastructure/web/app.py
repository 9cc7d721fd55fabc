"""The read-only audit viewer: a Starlette app over one ledger.

Pages (each also JSON, with a ``.json`` suffix or ``?format=json``):

- ``/`` -- the conversations, newest activity first; ``?q=`` matches a substring of
  the id (or the key, when conversations have one); ``?page=N``.
- ``/conversations/{id}`` -- the event timeline, the integrity check, token totals
  and a chart of tokens sent against the full history per model turn.
- ``/conversations/{id}/context?version=V`` -- the exact messages the model was sent
  at version V, with where each came from and what it cost.

Only GET (and HEAD) are routed; the ledger is opened without the summarization
policy, so nothing is ever written to the store. Templates autoescape everything.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from contextledger.application.ledger import Ledger
from contextledger.domain.errors import ContextLedgerError, ConversationNotFoundError
from contextledger.infrastructure.database import Database
from contextledger.infrastructure.web.chart import token_chart
from contextledger.infrastructure.web.views import ConversationIndex, context_page, conversation_page
from contextledger.infrastructure.web.whatif import whatif_routes

__all__ = ["PAGE_SIZE", "create_app"]

#: Conversations per page of the list.
PAGE_SIZE = 50

_HERE = Path(__file__).resolve().parent


class _JSON(JSONResponse):
    """JSON with datetimes and UUIDs as strings, non-ASCII kept readable."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, default=_default, indent=1).encode("utf-8")


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=_default)


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _wants_json(request: Request, name: str) -> tuple[bool, str]:
    """Whether the JSON form was asked for, and the path parameter without ``.json``."""
    raw: str = request.path_params.get(name, "")
    if raw.endswith(".json"):
        return True, raw[: -len(".json")]
    return request.query_params.get("format") == "json", raw


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        return -1


def create_app(
    ledger_or_url: Ledger | str,
    *,
    title: str = "contextledger",
    page_size: int = PAGE_SIZE,
) -> Starlette:
    """The viewer over a ledger (used as given, not closed) or a database URL (opened
    read-only here, without the summarization policy, and closed on shutdown)."""
    if isinstance(ledger_or_url, Ledger):
        ledger = ledger_or_url
        owned = False
    else:
        ledger = Ledger.open(ledger_or_url, run_policy=False)
        owned = True
    database = Database.parse(ledger.settings.database_url).masked
    index = ConversationIndex(ledger)
    env = Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["pretty"] = _pretty
    env.filters["when"] = _when
    env.globals.update(title=title, database=database)

    def html(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(**context), status_code=status)

    def problem(request: Request, as_json: bool, status: int, message: str) -> Response:
        if as_json:
            return _JSON({"error": message}, status_code=status)
        return html("error.html", status=status, message=message, status_code=status)

    def conversation_id(request: Request, as_json: bool, raw: str) -> UUID | Response:
        try:
            return UUID(raw)
        except ValueError:
            return problem(request, as_json, 404, f"{raw!r} is not a conversation id")

    def conversations(request: Request) -> Response:
        as_json = request.url.path.endswith(".json") or request.query_params.get("format") == "json"
        query = request.query_params.get("q", "").strip()
        page = max(1, _int_param(request, "page") or 1)
        rows = [row for row in index.rows() if row.matches(query)]
        pages = max(1, -(-len(rows) // page_size))
        shown = rows[(page - 1) * page_size : page * page_size]
        data: dict[str, Any] = {
            "database": database,
            "query": query,
            "page": page,
            "pages": pages,
            "total": len(rows),
            "conversations": [row.record() for row in shown],
        }
        if as_json:
            return _JSON(data)
        return html("conversations.html", **data)

    def conversation(request: Request) -> Response:
        as_json, raw = _wants_json(request, "cid")
        cid = conversation_id(request, as_json, raw)
        if isinstance(cid, Response):
            return cid
        data = conversation_page(ledger, cid)
        if as_json:
            return _JSON(data)
        return html("conversation.html", chart=token_chart(data["turns"], data["summary_marks"]), **data)

    def context(request: Request) -> Response:
        as_json = request.url.path.endswith(".json") or request.query_params.get("format") == "json"
        cid = conversation_id(request, as_json, request.path_params["cid"])
        if isinstance(cid, Response):
            return cid
        version = _int_param(request, "version")
        if version is not None and version < 1:
            return problem(request, as_json, 400, "version must be a whole number, 1 or more")
        data = context_page(ledger, cid, version)
        if as_json:
            return _JSON(data)
        return html("context.html", **data)

    def not_found(request: Request, exc: Exception) -> Response:
        as_json = request.url.path.endswith(".json") or request.query_params.get("format") == "json"
        return problem(request, as_json, 404, str(exc) or "not found")

    def failure(request: Request, exc: Exception) -> Response:
        as_json = request.url.path.endswith(".json") or request.query_params.get("format") == "json"
        return problem(request, as_json, 500, f"{type(exc).__name__}: {exc}")

    def home(request: Request) -> Response:
        query = request.url.query
        return RedirectResponse("/conversations" + (f"?{query}" if query else ""), status_code=307)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # Load the conversation list while the first page is being asked for (a
        # request that comes sooner waits for it under the index's lock).
        threading.Thread(target=index.rows, name="contextledger-viewer-index", daemon=True).start()
        try:
            yield
        finally:
            if owned:
                ledger.close()

    app = Starlette(
        routes=[
            Route("/", home, methods=["GET"]),
            Route("/conversations", conversations, methods=["GET"], name="conversations"),
            Route("/conversations.json", conversations, methods=["GET"]),
            Route("/conversations/{cid}/context", context, methods=["GET"], name="context"),
            Route("/conversations/{cid}/context.json", context, methods=["GET"]),
            Route("/conversations/{cid}", conversation, methods=["GET"], name="conversation"),
            *whatif_routes(ledger, env),
            Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
        ],
        exception_handlers={
            ConversationNotFoundError: not_found,
            ContextLedgerError: failure,
        },
        lifespan=lifespan,
    )
    app.state.ledger = ledger
    return app
