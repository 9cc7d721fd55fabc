"""A chat endpoint with memory: FastAPI, the openai SDK's ``AsyncOpenAI`` and
contextledger's ``AsyncLedger``.

    CONTEXTLEDGER_DATABASE_URL=sqlite:///chat.db OPENAI_BASE_URL=http://127.0.0.1:8001/v1 \\
    OPENAI_API_KEY=sk-... uvicorn --factory examples.fastapi_app:create_app

``POST /chat/{key}`` with ``{"message": "..."}`` appends the user's message to the
conversation named ``key`` (started on first use), sends the context to the model,
appends the whole completion (its usage is recorded) and answers with the reply.
``GET /context/{key}`` shows what the model is sent next. ``GET /health`` answers
when the app is up; ``GET /loop-lag`` reports how late the event loop woke a probe
task (how long something blocked it).

``CONTEXTLEDGER_EXAMPLE_LEDGER=sync`` calls the synchronous ``Ledger`` straight from
the endpoint instead (it blocks the event loop: the benchmark's baseline).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from openai import AsyncOpenAI
from pydantic import BaseModel

import contextledger as cl

PROBE_INTERVAL = 0.005


class ChatIn(BaseModel):
    message: str


class ChatOut(BaseModel):
    reply: str | None
    position: int
    context_tokens: int


class LoopLagProbe:
    """Wakes every ``interval`` seconds and records how late it woke."""

    def __init__(self, interval: float = PROBE_INTERVAL) -> None:
        self.interval = interval
        self.lags: list[float] = []

    async def run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - before - self.interval))

    def report(self) -> dict[str, float]:
        lags = sorted(self.lags) or [0.0]
        return {
            "samples": float(len(self.lags)),
            "p50_ms": 1000 * statistics.median(lags),
            "p99_ms": 1000 * lags[min(len(lags) - 1, int(0.99 * len(lags)))],
            "max_ms": 1000 * lags[-1],
        }


def create_app(
    database_url: str | None = None,
    *,
    openai_base_url: str | None = None,
    openai_api_key: str | None = None,
    model: str = "gpt-4o-mini",
    ledger_mode: str | None = None,
) -> FastAPI:
    """The app; arguments left out come from the environment (``Settings``)."""
    settings = cl.Settings.from_env()
    url = database_url or settings.database_url
    base_url = openai_base_url or settings.openai_base_url
    api_key = openai_api_key or (
        settings.openai_api_key.get_secret_value() if settings.openai_api_key else "sk-unset"
    )
    mode = ledger_mode or os.environ.get("CONTEXTLEDGER_EXAMPLE_LEDGER", "async")
    policy = cl.ReductionPolicy(trigger_messages=4, keep_messages=2)  # summaries land mid-conversation
    probe = LoopLagProbe()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = AsyncOpenAI(base_url=base_url, api_key=api_key)
        probe_task = asyncio.create_task(probe.run())
        async with cl.AsyncLedger.open(url, max_workers=8) as ledger:
            state.update(client=client, ledger=ledger)
            try:
                yield
            finally:
                probe_task.cancel()
                await client.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "ledger": mode}

    @app.get("/loop-lag")
    async def loop_lag() -> dict[str, float]:
        return probe.report()

    @app.post("/chat/{key}")
    async def chat(key: str, body: ChatIn) -> ChatOut:
        client: AsyncOpenAI = state["client"]
        ledger: cl.AsyncLedger = state["ledger"]
        if mode == "sync":  # the baseline: the synchronous ledger on the event loop
            sync = ledger.sync
            cid = sync.get_or_start(key, system_prompt="You are terse.", policy=policy)
            sync.append(cid, {"role": "user", "content": body.message})
            completion = await client.chat.completions.create(model=model, messages=sync.context(cid))
            position = sync.append(cid, completion)
            tokens = sync.totals(cid).context_tokens
        else:
            cid = await ledger.get_or_start(key, system_prompt="You are terse.", policy=policy)
            await ledger.append(cid, {"role": "user", "content": body.message})
            completion = await client.chat.completions.create(model=model, messages=await ledger.context(cid))
            position = await ledger.append(cid, completion)
            tokens = (await ledger.totals(cid)).context_tokens
        return ChatOut(reply=completion.choices[0].message.content, position=position, context_tokens=tokens)

    @app.get("/context/{key}")
    async def context(key: str) -> list[dict[str, Any]]:
        ledger: cl.AsyncLedger = state["ledger"]
        return [dict(m) for m in await ledger.context(key)]

    return app
