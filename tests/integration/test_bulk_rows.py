"""A batch writes its new rows through the driver in one call (``readmodels.bulk``):
the rows stored are exactly those SQLAlchemy's own insert stores, column for column,
on SQLite and PostgreSQL, with and without a cipher key (sealed values compared
opened, since each sealing draws a fresh nonce); a bad row is a ``StoreError`` and the
batch leaves nothing behind."""

from __future__ import annotations

import base64
import os
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Table, insert, select

from contextledger.domain.values.errors import StoreError
from contextledger.infrastructure.readmodels import SQLReadModels
from contextledger.infrastructure.readmodels.bulk import insert_rows, plan_for
from contextledger.infrastructure.readmodels.sealing import SEALED_PREFIX


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=[False, True], ids=["plain", "sealed"])
def models(request: pytest.FixtureRequest, url: str) -> Any:
    key = base64.b64encode(os.urandom(32)).decode() if request.param else None
    opened = SQLReadModels.for_url(url, cipher_key=key)
    yield opened
    opened.close()


def transcript_row(i: int, text: str, when: datetime, client_id: str | None) -> dict[str, Any]:
    cid = uuid.UUID(int=i + 1)
    return {
        "conversation_id": cid,
        "origin_id": cid,
        "position": i,
        "version": i + 1,
        "role": "user",
        "message": {"role": "user", "content": text, "extra": [1, 2.5, None, True]},
        "tokens": len(text),
        "timestamp": when,
        "digest": f"{i:064x}",
        "client_message_id": client_id,
        "client_message_lookup": None,
        "retracted": False,
        "retracted_version": None,
        "retracted_reason": None,
        "edited_from_version": None,
        "superseded_by_version": None,
    }


def raw_rows(models: SQLReadModels, table: Table) -> list[tuple[Any, ...]]:
    """The stored rows as the driver reads them (no column type's processing), with
    sealed values opened, ordered by key."""
    names = [c.name for c in table.columns]
    with models.read() as conn:
        rows = conn.exec_driver_sql(f"SELECT {', '.join(names)} FROM {table.fullname}").fetchall()
    codec = models.codec

    def opened(value: Any) -> Any:
        if isinstance(value, str) and codec is not None:
            inner = value.strip('"')
            if inner.startswith(SEALED_PREFIX):
                return ("sealed", codec.open(inner))
        return value

    return sorted((tuple(opened(v) for v in row) for row in rows), key=repr)


def write_both_ways(models: SQLReadModels, rows: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    table = models.tables["transcript"]
    with models.begin() as conn:
        conn.execute(insert(table), rows)
    by_sqlalchemy = raw_rows(models, table)
    with models.begin() as conn:
        conn.execute(table.delete())
        insert_rows(conn, plan_for(conn, table, tuple(rows[0])), rows)
    return by_sqlalchemy, raw_rows(models, table)


def test_bulk_rows_equal_sqlalchemy_rows(models: SQLReadModels) -> None:
    base = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
    rows = [
        transcript_row(0, "plain", base, None),
        transcript_row(
            1,
            'naïve 🚀 "quoted" \\ tab\t newline\n',
            base.astimezone(timezone(timedelta(hours=5))),
            "client-1",
        ),
        transcript_row(2, "", base.replace(tzinfo=None), "ключ"),
    ]
    by_sqlalchemy, by_bulk = write_both_ways(models, rows)
    assert by_bulk == by_sqlalchemy
    assert len(by_bulk) == 3
    sealed = [sum(1 for value in row if isinstance(value, tuple)) for row in by_bulk]
    # With a key: the message, and the client message id where there is one.
    assert sealed == ([0, 0, 0] if models.codec is None else [1, 2, 2])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")),
        min_size=1,
        max_size=8,
    )
)
def test_any_text_is_stored_as_sqlalchemy_stores_it(models: SQLReadModels, texts: list[str]) -> None:
    base = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        transcript_row(i, text, base + timedelta(seconds=i), text or None) for i, text in enumerate(texts)
    ]
    table = models.tables["transcript"]
    with models.begin() as conn:
        conn.execute(table.delete())
    by_sqlalchemy, by_bulk = write_both_ways(models, rows)
    assert by_bulk == by_sqlalchemy
    with models.begin() as conn:
        conn.execute(table.delete())


def test_a_bad_row_is_a_store_error_and_leaves_nothing(models: SQLReadModels) -> None:
    table = models.tables["transcript"]
    when = datetime(2026, 3, 1, tzinfo=UTC)
    row = transcript_row(0, "once", when, None)
    with pytest.raises(StoreError, match="cl_transcript"), models.begin() as conn:  # the same key twice
        insert_rows(conn, plan_for(conn, table, tuple(row)), [row, transcript_row(1, "b", when, None), row])
    with models.read() as conn:
        assert conn.execute(select(table)).fetchall() == []
