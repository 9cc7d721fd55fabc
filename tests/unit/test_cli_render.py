"""What the command line prints: escaped conversation content, exact JSON, progress."""

from __future__ import annotations

import io
import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.infrastructure.cli.render import Progress, dump, excerpt, visible

HIDDEN = {"Cc", "Cf", "Zl", "Zp"}


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_an_escape_sequence_in_a_message_is_shown_not_obeyed() -> None:
    message = {"role": "user", "content": "hello\x1b[2J\x1b]0;pwned\x07 world\u202e"}
    line = excerpt(message)
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line
    assert "\\x1b[2J" in line and "\\x07" in line and "\\u202e" in line


def test_json_output_keeps_the_content_exact() -> None:
    content = "clear\x1b[2J\r\nbell\x07 \u2028 ok"
    assert json.loads(dump({"content": content})) == {"content": content}


@given(st.text())
def test_nothing_printed_as_text_can_control_a_terminal(text: str) -> None:
    shown = visible(text)
    assert not any(unicodedata.category(char) in HIDDEN for char in shown)
    assert visible(shown) == shown  # already safe text is left alone


@given(st.text(alphabet=st.characters(exclude_categories=("Cc", "Cf", "Zl", "Zp", "Cs"))))
def test_ordinary_text_is_printed_unchanged(text: str) -> None:
    assert visible(text) == text


def test_progress_off_a_terminal_is_a_few_plain_lines() -> None:
    stream = io.StringIO()
    with Progress("rebuild transcript", stream=stream, interval=3600) as progress:
        for done in range(1001):
            progress(done, 1000)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert 10 <= len(lines) <= 12
    assert lines[0].startswith("rebuild transcript [") and lines[0].endswith("0/1000   0%")
    # After the first line: the rate and the time left.
    assert "1000/1000 100% " in lines[-1] and "it/s" in lines[-1] and lines[-1].endswith("0:00:00 left")


def test_progress_on_a_terminal_is_a_tqdm_bar() -> None:
    stream = Terminal()
    with Progress("demo", stream=stream, unit="msg") as progress:
        for done in range(1, 51):
            progress(done, 50)
    shown = stream.getvalue()
    assert "\r" in shown and "demo" in shown and "50/50" in shown and "msg" in shown


def test_progress_stops_the_work_when_asked_to() -> None:
    asked = [False]
    progress = Progress("replay", stream=io.StringIO(), should_stop=lambda: asked[0])
    progress(1, 10)
    asked[0] = True
    with pytest.raises(KeyboardInterrupt):
        progress(2, 10)
