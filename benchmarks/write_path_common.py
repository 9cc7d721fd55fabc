"""What every part of benchmarks/write_path.py shares: the message written, the ledger
opened with a summarizer that answers at once, medians, and the stores (PostgreSQL's URLs,
the plain baseline's table, the Agents SDK's engine and tables).
"""

from __future__ import annotations

import asyncio
import os
import statistics
from pathlib import Path
from typing import Any

import psycopg

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult

REPO = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get("CONTEXTLEDGER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
TEXT = (
    "The customer asked about the order status and the delivery window for the parcel; "
    "the assistant looked it up and answered with the tracking details. "
) * 2
POLICY = ReductionPolicy(trigger_messages=100, keep_messages=10)


def message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {TEXT}"}


class InstantSummarizer:
    model = "instant"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult(
            text=f"Summary of {request.from_position}-{request.through_position}.",
            model=self.model,
            prompt_version="instant-1",
        )


def open_ledger(url: str, *, library: bool = False) -> Ledger:
    env = {"PERSISTENCE_MODULE": "eventsourcing.postgres", "POSTGRES_PRE_PING": "y"} if library else None
    ledger = Ledger(Settings(database_url=url), summarizer=InstantSummarizer(), env=env)
    ledger.start_policy()
    return ledger


def med(xs: list[float]) -> float:
    return statistics.median(xs)


# ------------------------------------------------------------------------ the stores


def pg_base() -> str:
    return POSTGRES.split("?")[0]


def pg_url(schema: str) -> str:
    return f"{pg_base()}?schema={schema}"


def sdk_url() -> str:
    return pg_base().replace("postgresql://", "postgresql+psycopg://", 1)


def plain_setup_pg(schema: str) -> None:
    with psycopg.connect(pg_base(), autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".plain_messages (conversation_id uuid, '
            "position bigint, body text, PRIMARY KEY (conversation_id, position))"
        )


def sdk_engine(schema: str, pool: int) -> Any:
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        sdk_url(), pool_size=pool, max_overflow=0, connect_args={"options": f"-csearch_path={schema}"}
    )


def sdk_setup(schema: str) -> None:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    async def run() -> None:
        engine = sdk_engine(schema, 1)
        session = SQLAlchemySession("setup", engine=engine, create_tables=True)
        await session.add_items([message(0)])
        await engine.dispose()

    asyncio.run(run())
