"""The database URL parser agrees with SQLAlchemy's ``make_url`` (whose grammar it
keeps) on every text, and opening a ledger no longer imports SQLAlchemy."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from contextledger.infrastructure.persistence.database import parse_url

PIECES = st.sampled_from(
    [
        "postgresql://",
        "sqlite:///",
        "postgres+psycopg://",
        "sqlite://",
        "memory://",
        "u",
        ":",
        "@",
        "/",
        "?",
        "&",
        "=",
        "[",
        "]",
        "%40",
        "%2F",
        "+",
        " ",
        "5432",
        "host",
        "db",
        "a=b",
        "é",
        "::1",
    ]
)
TEXTS = st.lists(PIECES | st.text(max_size=4), max_size=10).map("".join)


def _parts(url: object) -> tuple[object, ...]:
    names = ("drivername", "username", "password", "host", "port", "database")
    return (*(getattr(url, n) for n in names), dict(url.query))  # type: ignore[attr-defined]


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_any_text_parses_as_sqlalchemy_parses_it(text: str) -> None:
    try:
        theirs = make_url(text)
    except (ArgumentError, ValueError) as exc:
        with pytest.raises(ValueError):
            parse_url(text)
        assert exc is not None
        return
    ours = parse_url(text)
    assert _parts(ours) == _parts(theirs)
    assert ours.get_backend_name() == theirs.get_backend_name()
    for hide in (True, False):
        assert ours.render_as_string(hide_password=hide) == theirs.render_as_string(hide_password=hide)
    assert ours.to_sqlalchemy() == theirs


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://user:p%40ss@db.example:5433/app?schema=s&pool_size=4&host=a:1&host=b:2",
        "sqlite:////tmp/some%20file.db",
        "postgresql://u@[::1]:5432/db?target_session_attrs=read-write",
        "sqlite://",
    ],
)
def test_the_documented_forms_parse_as_sqlalchemy_parses_them(text: str) -> None:
    ours, theirs = parse_url(text), make_url(text)
    assert _parts(ours) == _parts(theirs)
    assert ours.render_as_string(hide_password=False) == theirs.render_as_string(hide_password=False)
    assert hash(ours) == hash(parse_url(text))


def test_a_ledger_on_a_sqlite_file_starts_without_importing_sqlalchemy(tmp_path: object) -> None:
    code = (
        "import sys, contextledger as cl\n"
        f"with cl.Ledger.open('sqlite:///{tmp_path}/s.db') as ledger:\n"
        "    cid = ledger.start('s'); ledger.append(cid, {'role': 'user', 'content': 'hi'})\n"
        "    ledger.context(cid)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
