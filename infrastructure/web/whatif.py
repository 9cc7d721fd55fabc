"""The viewer's what-if page: a candidate policy replayed over the log, recorded
against simulated, with a plain SVG chart of tokens per turn.

``GET /whatif`` shows a form; ``GET /whatif?policy={...}`` (a JSON object of
``ReductionPolicy`` fields; optional ``conversations`` -- ids or keys, comma-separated
-- and ``budget_calls``) runs ``ledger.simulate`` with the offline summarizer (no
network, nothing written) and shows both sides. ``/whatif.json`` (or
``?format=json``) answers the report as JSON. A policy that is not JSON, names an
unknown field or an invalid value answers 400 with the reason; an unknown
conversation 404.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jinja2 import Environment
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from contextledger.application.auditing.whatif_results import WhatIfReport
from contextledger.application.facade.ledger import Ledger
from contextledger.domain.values.errors import ConversationNotFoundError, UsageError

__all__ = ["WhatIfChart", "whatif_chart", "whatif_routes"]

WIDTH = 880
HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40
#: Longest policy text accepted in a query (a policy has a dozen short fields).
MAX_POLICY_CHARS = 4000
#: Turns drawn at most (the chart is of the first ones beyond that).
MAX_CHART_TURNS = 5000


@dataclass(frozen=True)
class WhatIfChart:
    """Two lines over the replayed turns (conversations one after another): tokens the
    log recorded and tokens the candidate would have sent; a mark where each
    conversation begins. Coordinates in SVG user units."""

    width: int
    height: int
    plot: tuple[int, int, int, int]
    recorded_line: str
    simulated_line: str
    turns: int
    y_ticks: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[dict[str, Any]] = field(default_factory=list)
    starts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.turns == 0


def _nice_step(top: float, ticks: int = 5) -> int:
    raw = max(1.0, top / ticks)
    magnitude = 10 ** (len(str(int(raw))) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        if factor * magnitude >= raw:
            return int(factor * magnitude)
    return int(10 * magnitude)  # pragma: no cover - the loop always returns


def whatif_chart(report: WhatIfReport) -> WhatIfChart:
    """The chart of ``report``'s simulated conversations, turn by turn."""
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    recorded: list[int] = []
    simulated: list[int] = []
    starts: list[tuple[int, str]] = []
    for c in report.simulated_conversations:
        starts.append((len(recorded) + 1, c.key or str(c.conversation_id)[:8]))
        recorded.extend(c.recorded_turn_tokens)
        simulated.extend(c.simulated_turn_tokens)
    recorded, simulated = recorded[:MAX_CHART_TURNS], simulated[:MAX_CHART_TURNS]
    n = len(recorded)
    if n == 0:
        return WhatIfChart(WIDTH, HEIGHT, (left, top, right, bottom), "", "", 0)
    highest = max(max(recorded), max(simulated), 1)
    step = _nice_step(highest)
    y_max = max(step, -(-highest // step) * step)

    def x(turn: float) -> float:
        return round(left + (right - left) * ((turn - 1) / max(1, n - 1)), 1)

    def y(tokens: float) -> float:
        return round(bottom - (bottom - top) * (tokens / y_max), 1)

    def line(values: list[int]) -> str:
        return " ".join(f"{x(i + 1)},{y(v)}" for i, v in enumerate(values))

    x_step = _nice_step(n, 8)
    return WhatIfChart(
        WIDTH,
        HEIGHT,
        (left, top, right, bottom),
        line(recorded),
        line(simulated),
        n,
        y_ticks=[{"y": y(v), "label": f"{v:,}"} for v in range(0, y_max + 1, step)],
        x_ticks=[{"x": x(t), "label": str(t)} for t in [1, *range(x_step, n + 1, x_step)]],
        starts=[{"x": x(turn), "label": label} for turn, label in starts if turn <= n],
    )


class _BadRequest(Exception):
    pass


def _parse(request: Request) -> tuple[dict[str, Any] | None, list[str] | None, int | None]:
    """The policy, conversations and call budget of the query (``_BadRequest``)."""
    raw = request.query_params.get("policy", "").strip()
    if not raw:
        return None, None, None
    if len(raw) > MAX_POLICY_CHARS:
        raise _BadRequest(f"the policy is longer than {MAX_POLICY_CHARS} characters")
    try:
        policy = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _BadRequest(
            f"the policy is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(policy, dict):
        raise _BadRequest(
            f"the policy must be a JSON object of ReductionPolicy fields, not {type(policy).__name__}"
        )
    listed = request.query_params.get("conversations", "").strip()
    conversations = [part.strip() for part in listed.split(",") if part.strip()] or None
    budget_raw = request.query_params.get("budget_calls", "").strip()
    budget = None
    if budget_raw:
        try:
            budget = int(budget_raw)
        except ValueError:
            raise _BadRequest("budget_calls must be a whole number") from None
    return policy, conversations, budget


def whatif_routes(ledger: Ledger, env: Environment) -> list[Route]:
    """The routes of the what-if page over ``ledger``, rendered with ``env``."""

    def page(request: Request) -> Response:
        as_json = request.url.path.endswith(".json") or request.query_params.get("format") == "json"
        raw = request.query_params.get("policy", "")
        form = {
            "policy_text": raw,
            "conversations_text": request.query_params.get("conversations", ""),
            "budget_text": request.query_params.get("budget_calls", ""),
        }

        def answer(status: int, **context: Any) -> Response:
            if as_json:
                if "error" in context:
                    return JSONResponse({"error": context["error"]}, status_code=status)
                report: WhatIfReport | None = context.get("report")
                return JSONResponse(report.to_dict() if report else {"policy": None}, status_code=status)
            body = env.get_template("whatif.html").render(**form, **context)
            return HTMLResponse(body, status_code=status)

        try:
            policy, conversations, budget = _parse(request)
            if policy is None:
                return answer(200, report=None)
            report = ledger.simulate(policy, conversations=conversations, budget_calls=budget)
        except _BadRequest as exc:
            return answer(400, error=str(exc))
        except ConversationNotFoundError as exc:
            return answer(404, error=str(exc))
        except UsageError as exc:
            return answer(400, error=str(exc))
        return answer(
            200,
            report=report,
            chart=whatif_chart(report),
            policy_json=json.dumps(report.policy.model_dump(mode="json", exclude_defaults=True)),
            largest=report.largest_differences(10),
        )

    return [
        Route("/whatif", page, methods=["GET"], name="whatif"),
        Route("/whatif.json", page, methods=["GET"]),
    ]
