"""The token chart of a conversation as plain SVG geometry (no JavaScript).

Two lines over the model turns: what sending the full history would have cost, and
what the model was actually sent; a dashed mark where each summary landed. The
template draws what ``token_chart`` computes; each turn's point links to the
context the model was sent for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Chart", "token_chart"]

WIDTH = 880
HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40


@dataclass(frozen=True)
class Chart:
    """Coordinates in SVG user units, ready for the template."""

    width: int
    height: int
    plot: tuple[int, int, int, int]  # left, top, right, bottom
    full_line: str
    sent_line: str
    points: list[dict[str, Any]] = field(default_factory=list)
    marks: list[dict[str, Any]] = field(default_factory=list)
    y_ticks: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.points


def _nice_step(top: float, ticks: int = 5) -> int:
    raw = max(1.0, top / ticks)
    magnitude = 10 ** (len(str(int(raw))) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * magnitude
        if step >= raw:
            return int(step)
    return int(10 * magnitude)  # pragma: no cover - the loop always returns


def token_chart(turns: list[dict[str, Any]], marks: list[dict[str, Any]]) -> Chart:
    """The chart of ``turns`` (from ``conversation_page``) with summary ``marks``.

    ``turns`` may be a sample of a long conversation's turns (first and last kept):
    the x axis runs to the highest turn number given."""
    left, top, right, bottom = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    if not turns:
        return Chart(WIDTH, HEIGHT, (left, top, right, bottom), "", "")
    highest = max(max(int(t["full_history_tokens"]), int(t["sent_tokens"])) for t in turns)
    step = _nice_step(highest)
    y_max = max(step, -(-highest // step) * step)
    n = max(int(t["turn"]) for t in turns)

    def x(turn: float) -> float:
        return left + (right - left) * ((turn - 1) / max(1, n - 1))

    def y(tokens: float) -> float:
        return bottom - (bottom - top) * (tokens / y_max)

    points = [
        {
            "x": round(x(t["turn"]), 1),
            "y_sent": round(y(t["sent_tokens"]), 1),
            "y_full": round(y(t["full_history_tokens"]), 1),
            **t,
        }
        for t in turns
    ]
    full_line = " ".join(f"{p['x']},{p['y_full']}" for p in points)
    sent_line = " ".join(f"{p['x']},{p['y_sent']}" for p in points)
    y_ticks = [{"y": round(y(v), 1), "label": f"{v:,}"} for v in range(0, y_max + 1, step)]
    x_step = _nice_step(n, 8)
    x_ticks = [{"x": round(x(t), 1), "label": str(t)} for t in [1, *range(x_step, n + 1, x_step)]]
    chart_marks = [
        {"x": round(x(min(max(m["after_turn"] + 0.5, 1), n)), 1), **m}
        for m in marks
    ]
    return Chart(
        WIDTH,
        HEIGHT,
        (left, top, right, bottom),
        full_line,
        sent_line,
        points=points,
        marks=chart_marks,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
    )
