"""The ``Ledger`` and the ``AsyncLedger`` behind one calling style, so one set of test
cases runs against both: the async one is driven from a loop in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from contextledger.application import Ledger
from contextledger.application.facade.async_ledger import AsyncLedger


class Blocking:
    """Calls an ``AsyncLedger``'s coroutines from synchronous test code."""

    def __init__(self, ledger: AsyncLedger, loop: asyncio.AbstractEventLoop) -> None:
        self.async_ledger = ledger
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.async_ledger, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop).result(120)

        return call

    @property
    def sync(self) -> Ledger:
        return self.async_ledger.sync


@contextmanager
def open_twin(kind: str, url: str, **options: Any) -> Iterator[Any]:
    """A ``Ledger`` (``kind == "sync"``) or a ``Blocking`` ``AsyncLedger`` on ``url``."""
    if kind == "sync":
        with Ledger.open(url, **options) as ledger:
            yield ledger
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    ledger = AsyncLedger.open(url, **options)
    asyncio.run_coroutine_threadsafe(ledger.start_up(), loop).result(120)
    try:
        yield Blocking(ledger, loop)
    finally:
        asyncio.run_coroutine_threadsafe(ledger.aclose(), loop).result(120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
