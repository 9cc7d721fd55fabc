"""What the command line prints: JSON, one-line excerpts of messages, escaping of
conversation content for terminals, errors, and progress on stderr.

Conversation content is untrusted: printed as text, its control characters and
escape sequences are made visible (``"\\x1b[2J"`` shows as ``\\x1b[2J`` and clears
nothing). JSON output is exact JSON (``json.dumps`` escapes control characters).
"""

from __future__ import annotations

import json
import sys
import time
import unicodedata
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO
from uuid import UUID

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = [
    "Progress",
    "counted",
    "dump",
    "error",
    "excerpt",
    "is_terminal",
    "one_line",
    "out",
    "visible",
]

#: Unicode categories never printed as they are: controls (C0, DEL, C1), format
#: characters (bidirectional overrides, zero-width joiners) and line/paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def dump(value: Any) -> str:
    """``value`` as compact JSON (datetimes in ISO 8601, UUIDs as strings)."""
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def counted(number: int, noun: str, plural: str | None = None, *, grouped: bool = False) -> str:
    """``number`` and ``noun``, plural (``plural``, else ``noun`` + s) unless the number
    is one: ``1 conversation``, ``2 conversations`` (``grouped``: ``1,234 tokens``)."""
    shown = f"{number:,}" if grouped else str(number)
    return f"{shown} {noun}" if number == 1 else f"{shown} {plural or noun + 's'}"


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control or invisible formatting character shown as an
    escape (``\\x1b``, ``\\u202e``), so it cannot move the cursor or recolor a terminal."""
    shown: list[str] = []
    for char in text:
        if keep_newlines and char == "\n":
            shown.append(char)
        elif unicodedata.category(char) in _HIDDEN_CATEGORIES:
            code = ord(char)
            shown.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            shown.append(char)
    return "".join(shown)


def one_line(text: str) -> str:
    """``text`` with runs of whitespace (newlines included) collapsed to one space."""
    return " ".join(str(text).split())


def out(text: str, *, stream: TextIO | None = None) -> None:
    """Print a line of text output, its control characters made visible."""
    print(visible(text, keep_newlines=True), file=stream or sys.stdout)


def error(where: str, message: str, *, secrets: tuple[str, ...] = ()) -> None:
    """One line on stderr: ``where: error: message`` (any of ``secrets`` masked)."""
    text = visible(" ".join(str(message).split()))
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    print(f"{where}: error: {text}", file=sys.stderr)


def excerpt(message: dict[str, Any], width: int = 140) -> str:
    """One line of an OpenAI-format message: its text, its tool calls, the call it
    answers; escaped for a terminal and cut to ``width`` characters."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", f"[{p.get('type')}]")) for p in content)
    text = " ".join(str(content or "").split())
    calls = message.get("tool_calls") or []
    if calls:
        called = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls)
        text = f"{text} -> {called}" if text else f"-> {called}"
    if message.get("tool_call_id"):
        text = f"[{message['tool_call_id']}] {text}"
    text = visible(text)
    return text if len(text) <= width else text[: width - 1] + "…"


class Progress:
    """Progress of long work on stderr, as a ``(done, total)`` callback.

    On a terminal: a tqdm bar. Otherwise (a log file, a pipe, a CI job): a plain line
    ``label [#####-----] done/total pct`` at the start, every ``interval`` seconds or
    10% and at the end; nothing with ``show=False``. ``should_stop`` is asked at every
    update; when it says so the work stops there with ``KeyboardInterrupt``, between
    two units of work (the command line's Ctrl-C).
    """

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        interval: float = 2.0,
        should_stop: Callable[[], bool] | None = None,
        unit: str = "it",
        show: bool = True,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.interval = interval
        self.should_stop = should_stop
        self.unit = unit
        self.show = show
        self._bar: tqdm[Any] | None = None
        self._is_terminal = _is_terminal(self.stream)
        self._last_time = float("-inf")
        self._last_fraction = -1.0
        self._last_done: int | None = None
        #: Where and when the first update came (the rate is measured from there).
        self._first: tuple[int, float] | None = None

    def __call__(self, done: int, total: int) -> None:
        if self.should_stop is not None and self.should_stop():
            raise KeyboardInterrupt
        if not self.show:
            return
        if self._is_terminal:
            self._update_bar(done, total)
        else:
            self._update_line(done, total)

    def _update_bar(self, done: int, total: int) -> None:
        if self._bar is None:
            from tqdm import tqdm  # a terminal's bar: loaded when one is first drawn

            self._bar = tqdm(
                total=total, desc=self.label, file=self.stream, unit=self.unit, leave=True,
                dynamic_ncols=True,
            )
        if self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def _rate(self, done: int, total: int, now: float) -> str:
        """`` 12345 event/s, 0:01:02 left`` once there is a rate to tell."""
        if self._first is None:
            self._first = (done, now)
            return ""
        first_done, first_time = self._first
        if now <= first_time or done <= first_done:
            return ""
        rate = (done - first_done) / (now - first_time)
        left = max(0, total - done) / rate
        minutes, seconds = divmod(int(left), 60)
        hours, minutes = divmod(minutes, 60)
        return f" {rate:,.0f} {self.unit}/s, {hours}:{minutes:02d}:{seconds:02d} left"

    def _update_line(self, done: int, total: int) -> None:
        now = time.monotonic()
        fraction = 1.0 if total <= 0 else min(1.0, done / total)
        due = (
            self._last_done is None
            or now - self._last_time >= self.interval
            or fraction - self._last_fraction >= 0.1
            or (fraction >= 1.0 and self._last_fraction < 1.0)
        )
        if not due or done == self._last_done:
            return
        self._last_time, self._last_fraction, self._last_done = now, fraction, done
        filled = round(fraction * 30)
        bar = "#" * filled + "-" * (30 - filled)
        rate = self._rate(done, total, now)
        self.stream.write(f"{self.label} [{bar}] {done}/{total} {int(fraction * 100):3d}%{rate}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar (a terminal's line is left showing where the work stopped)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal."""
    return _is_terminal(stream)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
