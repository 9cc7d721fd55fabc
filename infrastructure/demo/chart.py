"""The demo's chart: tokens per model call, full history against what was sent, as a
self-contained HTML page (inline SVG, no scripts)."""

from __future__ import annotations

import html
import math
from pathlib import Path

from contextledger.infrastructure.demo.run import DemoResult

__all__ = ["write_chart"]


_W, _H = 960, 460
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 24, 56, 64


def write_chart(result: DemoResult, path: Path, *, cap: int | None = None) -> Path:
    """Write tokens per model call (full history vs sent) as a self-contained HTML page."""
    calls = result.calls
    n = max(1, len(calls) - 1)
    top = max([c.full_history_tokens for c in calls] + [cap or 0, 1])
    step = _nice_step(top)
    y_max = step * math.ceil(top / step)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(i: int) -> float:
        return _LEFT + plot_w * i / n

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / y_max)

    def line(values: list[int]) -> str:
        return " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))

    parts: list[str] = []
    for k in range(0, int(y_max / step) + 1):
        v = k * step
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>')
        parts.append(f'<text x="{_LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,}</text>')
    x_step = _nice_step(n, ticks=10)
    for i in range(0, n + 1, x_step):
        parts.append(f'<text x="{x(i):.1f}" y="{_H - _BOTTOM + 18}" text-anchor="middle">{i}</text>')
    previous = 0
    for c in calls:
        if c.summaries > previous:
            parts.append(
                f'<line x1="{x(c.index):.1f}" x2="{x(c.index):.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" '
                f'class="summary"><title>summary {c.summaries} landed before call {c.index} '
                f"(message {c.position})</title></line>"
            )
            previous = c.summaries
    if cap is not None:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(cap):.1f}" y2="{y(cap):.1f}" class="cap"/>'
        )
        parts.append(f'<text x="{_W - _RIGHT}" y="{y(cap) - 6:.1f}" text-anchor="end" class="caplabel">'
                     f"max_context_tokens {cap:,}</text>")
    parts.append(f'<polyline points="{line([c.full_history_tokens for c in calls])}" class="full"/>')
    parts.append(f'<polyline points="{line([c.sent_tokens for c in calls])}" class="sent"/>')
    parts.append(f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_H - _BOTTOM}" class="axis"/>')
    parts.append(
        f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_H - _BOTTOM}" y2="{_H - _BOTTOM}" class="axis"/>'
    )
    parts.append(f'<text x="{_LEFT + plot_w / 2}" y="{_H - 16}" text-anchor="middle">model call</text>')
    parts.append(f'<text x="18" y="{_TOP + plot_h / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 18 {_TOP + plot_h / 2})">prompt tokens</text>')
    legend = [("full", "full history (every message, every call)"),
              ("sent", "sent with contextledger (context())"),
              ("summary", "a summary landed")]
    for k, (cls, label) in enumerate(legend):
        lx = _LEFT + 10 + k * 290
        parts.append(f'<line x1="{lx}" x2="{lx + 28}" y1="30" y2="30" class="{cls}"/>')
        parts.append(f'<text x="{lx + 36}" y="34">{html.escape(label)}</text>')
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
        f'role="img" aria-label="prompt tokens per model call">{"".join(parts)}</svg>'
    )
    stats = [
        ("messages", f"{result.messages:,} ({result.tool_messages:,} tool results)"),
        ("model calls", f"{len(calls):,}"),
        ("summaries", f"{result.summaries} (summarizer calls {result.summarizer_calls}, "
                      f"minimum {result.minimum_summarizer_calls})"),
        ("tokens appended", f"{result.appended_tokens:,}"),
        ("tokens sent, full history", f"{result.full_history_sent_tokens:,}"),
        ("tokens sent, contextledger", f"{result.sent_tokens:,}"),
        ("savings", f"{result.savings:.1%}"),
        ("verify", "OK" if result.verified else f"FAILED ({result.verify_problem})"),
    ]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in stats)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>contextledger demo: tokens per model call</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #444; }}
.grid {{ stroke: #eee; }} .axis {{ stroke: #888; }}
.full {{ fill: none; stroke: #c0392b; stroke-width: 2; }}
.sent {{ fill: none; stroke: #2471a3; stroke-width: 2; }}
.summary {{ stroke: #27ae60; stroke-dasharray: 4 3; stroke-width: 1.5; }}
.cap {{ stroke: #999; stroke-dasharray: 8 4; }} .caplabel {{ fill: #777; }}
table {{ border-collapse: collapse; margin-top: 16px; }}
th, td {{ text-align: left; padding: 2px 12px 2px 0; }} th {{ font-weight: 600; }}
</style></head><body>
<h1>contextledger demo</h1>
<p>Conversation <code>{result.conversation_id}</code>: prompt tokens each time the model would be
called, sending the full history vs sending <code>context()</code>.</p>
{svg}
<table>{rows}</table>
</body></html>
"""
    path.write_text(page, encoding="utf-8")
    return path


def _nice_step(span: float, *, ticks: int = 6) -> int:
    raw = max(1.0, span / ticks)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * magnitude >= raw:
            return max(1, int(factor * magnitude))
    return int(10 * magnitude)
