"""The read-only audit viewer: a Starlette app over one ledger.

Pages (each also JSON, with a ``.json`` suffix or ``?format=json``):

- ``/`` -- the conversations, newest activity first; ``?q=`` matches a substring of
  the id (or the key, when conversations have one); ``?page=N``.
- ``/conversations/{ref}`` -- the event timeline (``?page=N&per_page=M``), the
  integrity check, token totals and a chart of tokens sent against the full history
  per model turn. ``ref`` is the conversation's id or its key.
- ``/conversations/{ref}/context?version=V`` -- the exact messages the model was sent
  at version V (``?page=N&per_page=M``), with where each came from and what it cost.
- ``/verify``, ``/conversations/{ref}/verify`` -- what ``verify`` finds in the whole
  store or one conversation, every problem listed. A page that needs a damaged log
  (a missing or undecodable event) shows this page instead, with why.

Only GET (and HEAD) are routed; the ledger is opened without the summarization
policy, so nothing is ever written to the store. Templates autoescape everything.
A bad query parameter or a malformed key is answered 400, an unknown conversation
404, both with a message saying what was wrong. Every response carries the headers
of ``security.security_headers``.
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
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from contextledger.application.facade.ledger import Ledger
from contextledger.domain.values.errors import (
    ContextLedgerError,
    ConversationErasedError,
    ConversationNotFoundError,
    InvalidArgumentError,
    LogDamagedError,
)
from contextledger.infrastructure.persistence.database import Database
from contextledger.infrastructure.persistence.pgstandby import standby_report
from contextledger.infrastructure.web.chart import token_chart
from contextledger.infrastructure.web.conversation import (
    EVENTS_PER_PAGE,
    MAX_EVENTS_PER_PAGE,
    ConversationPages,
)
from contextledger.infrastructure.web.params import Ref, as_json, conversation_ref, search_query, whole_number
from contextledger.infrastructure.web.security import SecurityHeaders
from contextledger.infrastructure.web.verify import verify_page
from contextledger.infrastructure.web.views import (
    CONTEXT_PER_PAGE,
    MAX_CONTEXT_PER_PAGE,
    ConversationIndex,
    context_page,
)
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


def _load(index: ConversationIndex) -> None:
    """Load the conversation list ahead of the first page. A store that fails here
    fails that page too, which says why: the loading thread only stops."""
    with contextlib.suppress(ContextLedgerError):
        index.rows()


def _looks_json(request: Request) -> bool:
    """For error pages: whether the request asked for JSON (never raises)."""
    return request.url.path.endswith(".json") or request.query_params.get("format") == "json"


def _format_and_ref(request: Request, name: str = "cid") -> tuple[bool, Ref]:
    """Whether JSON was asked for, and the conversation the path names. A ``.json``
    ending of the conversation segment is the format, unless ``?format=html`` says the
    key itself ends so."""
    raw: str = request.path_params[name]
    suffixed = request.url.path.endswith(".json")
    if raw.endswith(".json") and request.query_params.get("format") != "html":
        return as_json(request, True), conversation_ref(raw[: -len(".json")])
    return as_json(request, suffixed), conversation_ref(raw)


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
        ledger = Ledger.open(ledger_or_url, read_only=True)
        owned = True
    database = Database.parse(ledger.settings.database_url).masked
    index = ConversationIndex(ledger)
    pages = ConversationPages(ledger)
    env = Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["pretty"] = _pretty
    env.filters["when"] = _when
    env.globals.update(title=title, database=database, events_per_page=EVENTS_PER_PAGE)

    def html(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(**context), status_code=status)

    def problem(as_json_: bool, status: int, message: str) -> Response:
        if as_json_:
            return _JSON({"error": message}, status_code=status)
        return html("error.html", status=status, message=message, status_code=status)

    def missing(ref: Ref, exc: ConversationNotFoundError, json_: bool) -> Response:
        """404 naming what the URL asked for (the key, when named by key)."""
        return problem(json_, 404, ref.missing() if exc.version is None else exc.message)

    def conversations(request: Request) -> Response:
        json_ = as_json(request, request.url.path.endswith(".json"))
        query = search_query(request)
        page = whole_number(request, "page", default=1) or 1
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
            "standby": standby_report(shard.recorder for shard in ledger.shards),
        }
        if json_:
            return _JSON(data)
        return html("conversations.html", **data)

    def conversation(request: Request) -> Response:
        json_, ref = _format_and_ref(request)
        page = whole_number(request, "page", default=1) or 1
        per_page = whole_number(request, "per_page", default=EVENTS_PER_PAGE, maximum=MAX_EVENTS_PER_PAGE)
        try:
            data = pages.page(ref.id, page, per_page or EVENTS_PER_PAGE, suffix=".json" if json_ else "")
        except ConversationNotFoundError as exc:
            return missing(ref, exc, json_)
        if json_:
            return _JSON(data)
        return html("conversation.html", chart=token_chart(data["turns"], data["summary_marks"]), **data)

    def integrity(request: Request) -> Response:
        if "cid" not in request.path_params:
            json_ = as_json(request, request.url.path.endswith(".json"))
            data = verify_page(ledger, None)
        else:
            json_, ref = _format_and_ref(request)
            try:
                data = verify_page(ledger, ref.id)
            except ConversationNotFoundError as exc:
                return missing(ref, exc, json_)
        return _JSON(data) if json_ else html("verify.html", **data)

    def context(request: Request) -> Response:
        json_, ref = _format_and_ref(request)
        version = whole_number(request, "version", default=None)
        page = whole_number(request, "page", default=1) or 1
        per_page = whole_number(request, "per_page", default=CONTEXT_PER_PAGE, maximum=MAX_CONTEXT_PER_PAGE)
        try:
            data = context_page(
                ledger,
                ref.id,
                version,
                page=page,
                per_page=per_page or CONTEXT_PER_PAGE,
                suffix=".json" if json_ else "",
            )
        except ConversationNotFoundError as exc:
            return missing(ref, exc, json_)
        if json_:
            return _JSON(data)
        return html("context.html", **data)

    def bad_request(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, ContextLedgerError) else str(exc)
        return problem(_looks_json(request), 400, message)

    def not_found(request: Request, exc: Exception) -> Response:
        return problem(_looks_json(request), 404, str(exc) or "not found")

    def damaged(request: Request, exc: Exception) -> Response:
        """A page that needs a damaged log shows what verify finds there (the
        conversation's problems, or the whole store's), not a server error."""
        cid = getattr(exc, "conversation_id", None)
        found = verify_page(ledger, cid if isinstance(cid, UUID) else None, damage=str(exc))
        return _JSON(found) if _looks_json(request) else html("verify.html", **found)

    def erased(request: Request, exc: Exception) -> Response:
        """An erased conversation's pages are gone for good (410), saying when and why."""
        when = getattr(exc, "erased_at", None)
        why = getattr(exc, "reason", None)
        message = "this conversation's content was erased" + (f" at {when.isoformat()}" if when else "")
        return problem(_looks_json(request), 410, message + (f" ({why})" if why else ""))

    def failure(request: Request, exc: Exception) -> Response:
        return problem(_looks_json(request), 500, f"{type(exc).__name__}: {exc}")

    def home(request: Request) -> Response:
        query = request.url.query
        return RedirectResponse("/conversations" + (f"?{query}" if query else ""), status_code=307)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # Load the conversation list while the first page is being asked for (a
        # request that comes sooner waits for it under the index's lock).
        threading.Thread(target=_load, args=(index,), name="contextledger-viewer-index", daemon=True).start()
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
            Route("/conversations/{cid}/context.json", context, methods=["GET"], name="context-json"),
            Route("/conversations/{cid}/verify", integrity, methods=["GET"], name="verify"),
            Route("/conversations/{cid}/verify.json", integrity, methods=["GET"]),
            Route("/verify", integrity, methods=["GET"]),
            Route("/verify.json", integrity, methods=["GET"]),
            Route("/conversations/{cid}", conversation, methods=["GET"], name="conversation"),
            *whatif_routes(ledger, env),
            Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
        ],
        exception_handlers={
            InvalidArgumentError: bad_request,
            ConversationNotFoundError: not_found,
            ConversationErasedError: erased,
            LogDamagedError: damaged,
            ContextLedgerError: failure,
        },
        middleware=[Middleware(SecurityHeaders)],
        lifespan=lifespan,
    )
    app.state.ledger = ledger
    return app
