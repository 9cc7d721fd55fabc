"""Opening a ledger: the settings ``Ledger.open`` is given, the event store opened
(retrying PostgreSQL's race between processes creating the same tables), adapters
named by topic (the application never imports infrastructure), and the summarizer
built from the settings, and a ledger on several stores joined into one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from eventsourcing.persistence import PersistenceError
from eventsourcing.utils import EnvType

from contextledger.application.auditing.audit import Audit
from contextledger.application.facade.read_only import read_only_updates
from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.ports import Summarizer, TokenCounter
from contextledger.application.shared.settings import (
    ANTHROPIC_COUNTER_TOPIC,
    OFFLINE_SUMMARIZER_TOPIC,
    OPENAI_SUMMARIZER_TOPIC,
    STORE_ENV_TOPIC,
    TOKEN_COUNTER_TOPIC,
    Settings,
    resolve_adapter,
)
from contextledger.application.storage.sharding import ShardedStore
from contextledger.application.storage.store import ConversationStore
from contextledger.application.summaries.summary_service import SummaryService
from contextledger.domain.values.errors import ConfigurationError, ContextLedgerError, StoreError

__all__ = [
    "ShardLedger",
    "build_summarizer",
    "counter_factory",
    "open_event_store",
    "open_settings",
    "open_shards",
    "store_env",
]


def open_settings(
    url: str | Sequence[str] | None,
    *,
    settings: Settings | None,
    run_policy: bool | None,
    read_only: bool | None,
) -> Settings:
    """The settings of ``Ledger.open``: ``settings`` (else the environment's) with the
    store(s), ``run_policy`` and ``read_only`` given, validated together."""
    base = settings or Settings.from_env()
    updates: dict[str, Any] = {}
    if isinstance(url, list | tuple):
        stores = tuple(url)
        if not stores:
            raise ConfigurationError("url must name at least one store", setting="stores")
        updates["database_url"] = stores[0]
        updates["stores"] = stores if len(stores) > 1 else ()
        base = Settings(**{**base.model_dump(exclude={"database_url", "stores"}), **updates})
        updates = {}
    elif url is not None:
        updates["database_url"] = url
        updates["stores"] = ()
    if run_policy is not None:
        updates["run_policy"] = run_policy
    if read_only is not None:
        updates = {**updates, **read_only_updates(read_only, run_policy)}
    if updates:
        base = Settings(**{**base.model_dump(), **updates})  # validated, as the given URL needs
    return base


def store_env(settings: Settings, env: EnvType | None) -> dict[str, str]:
    """The eventsourcing environment of the settings' first store, ``env`` over it;
    every further store's URL is checked before any store opens."""
    make = resolve_adapter(STORE_ENV_TOPIC)
    for url in settings.store_urls[1:]:
        make(settings.for_store(url))
    merged: dict[str, str] = make(settings)
    merged.update(env or {})
    return merged


def _is_creation_race(exc: Exception) -> bool:
    """Whether ``exc`` is PostgreSQL refusing one of two processes that create the same
    tables at the same moment (the other one won; trying again finds them)."""
    text = str(exc)
    return any(s in text for s in ("concurrently", "already exists", "duplicate key"))


def open_event_store(init: Callable[..., None], env: dict[str, str]) -> None:
    """Call eventsourcing's ``Application.__init__`` (``init``) with ``env``; a store
    that cannot open is a ``StoreError``."""
    for attempt in range(5):
        try:
            init(env=env)
            return
        except ContextLedgerError:
            raise
        except PersistenceError as exc:
            # Instances starting together race to create the same tables on
            # PostgreSQL ("tuple concurrently updated"): the loser tries again.
            if attempt < 4 and _is_creation_race(exc):
                time.sleep(0.05 * (attempt + 1) * (1 + random.random()))
                continue
            raise StoreError(f"cannot open the event store: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot open the event store: {exc}") from exc


def counter_factory(settings: Settings) -> Callable[[str], TokenCounter]:
    """What makes the token counter of a model: with ``anthropic_count_tokens``, one
    that asks Anthropic's token-counting endpoint for Claude models (the estimate
    standing in when it fails), else the local counters (``estimates.counter_for_model``)."""
    if settings.anthropic_count_tokens and settings.anthropic_api_key is not None:
        factory: Callable[[str], TokenCounter] = resolve_adapter(ANTHROPIC_COUNTER_TOPIC)(
            api_key=settings.anthropic_api_key.get_secret_value(),
            base_url=settings.anthropic_base_url,
            timeout=settings.count_tokens_timeout,
        )
        return factory
    local: Callable[[str], TokenCounter] = resolve_adapter(TOKEN_COUNTER_TOPIC)
    return local


def build_summarizer(settings: Settings, kind: str, counter_for: Callable[[str], TokenCounter]) -> Summarizer:
    """The summarizer of ``kind``: "openai" (when an API key is set), else the offline
    one counting with ``counter_for``'s counter of the summarizer model."""
    if kind == "openai" and settings.openai_api_key is not None:
        summarizer: Summarizer = resolve_adapter(OPENAI_SUMMARIZER_TOPIC)(
            model=settings.summarizer_model,
            api_key=settings.openai_api_key.get_secret_value(),
            base_url=settings.openai_base_url,
            timeout=settings.summarizer_timeout,
        )
        return summarizer
    offline: Summarizer = resolve_adapter(OFFLINE_SUMMARIZER_TOPIC)(
        token_counter=counter_for(settings.summarizer_model)
    )
    return offline


class ShardLedger(Protocol):
    """A ledger on one of several stores, as joining them sees it."""

    store: ConversationStore
    counters: TokenCounters
    summary_service: SummaryService
    audit: Audit
    shards: list[Any]

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def local_store(self) -> ConversationStore: ...

    def close(self, timeout: float | None = None) -> None: ...


L = TypeVar("L", bound=ShardLedger)


def open_shards(first: L, stores: Sequence[Settings], make: Callable[[Settings], L]) -> None:
    """Open a ledger with ``make`` on each of ``stores`` beside ``first`` (which holds
    the directory of placements) and route every ledger's conversations through one
    ``ShardedStore``; a store that fails to open closes those opened."""
    try:
        for settings in stores:
            shard = make(settings)
            shard.counters = first.counters
            shard.summary_service.counters = first.counters
            first.shards.append(shard)
    except BaseException:
        first.close()
        raise
    router = ShardedStore([s.local_store for s in first.shards], clock=first.clock)
    for shard in first.shards:
        shard.store = router
        shard.summary_service.store = router
        shard.audit.store = router
        shard.shards = first.shards
