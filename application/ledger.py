"""The ``Ledger``: the event-sourced application that keeps conversations.

A thin façade: commands go to the ``Conversation`` aggregate through the
conversation store (``store.py``), summaries through the summary service
(``summary_service.py``), audits to ``audit.py``; followers of the log (the
summarization policy, read models) are started, awaited and closed here.
``context()`` costs O(window), not O(history), and always shows the caller's writes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID, uuid4

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.persistence import IntegrityError, PersistenceError, Recording
from eventsourcing.utils import Environment, EnvType, TopicError, resolve_topic

from contextledger.application.addressing import (
    ConversationRef,
    check_key,
    id_for_key,
    name_keys_in_errors,
    resolve,
)
from contextledger.application.audit import Audit
from contextledger.application.counting import TokenCounters
from contextledger.application.history import (
    HistoryCache,
    shared_history,
    summary_infos,
    transcript_entries,
)
from contextledger.application.idempotency import (
    check_client_message_id,
    check_client_message_ids,
    execute_once,
    id_records,
)
from contextledger.application.inbound import Inbound, inbound
from contextledger.application.ledger_edits import LedgerEdits
from contextledger.application.lifecycle import Lifecycle, close_all, guard_methods, stop_all
from contextledger.application.limits import check_message_bytes, check_message_tokens, with_default_cap
from contextledger.application.observability import TRACER_TOPIC, NullTracer, TracedSummarizer, Tracer, log
from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.read_only import read_only_updates, refuse_writes
from contextledger.application.results import (
    AuditEvent,
    SharedHistory,
    SummaryInfo,
    TokenTotals,
    TranscriptEntry,
    VerifyReport,
    WorkingMemory,
)
from contextledger.application.settings import (
    OFFLINE_SUMMARIZER_TOPIC,
    OPENAI_SUMMARIZER_TOPIC,
    STORE_ENV_TOPIC,
    TOKEN_COUNTER_TOPIC,
    Settings,
    masked_url,
)
from contextledger.application.sharding import ShardedStore
from contextledger.application.store import ConversationStore
from contextledger.application.summary_service import SummaryService
from contextledger.application.whatif import LogSource, choose_summarizer, simulate_policy
from contextledger.application.whatif_results import WhatIfReport
from contextledger.application.wire import ContextMessage, ToolDefinition
from contextledger.domain.conversation import Conversation, ConversationSnapshot, SummaryFailure
from contextledger.domain.errors import (
    ConfigurationError,
    ContextLedgerError,
    ConversationNotFoundError,
    DuplicateConversationError,
    InvalidArgumentError,
    InvalidMessageError,
    StoreError,
)
from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.tools import check_tools
from contextledger.domain.validation import check_count, check_text, shown

__all__ = ["DEFAULT_POLICY", "Ledger"]

Clock = Callable[[], datetime]

DEFAULT_POLICY = ReductionPolicy(trigger_messages=100, keep_messages=10)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _is_creation_race(exc: Exception) -> bool:
    """Whether ``exc`` is PostgreSQL refusing one of two processes that create the same
    tables at the same moment (the other one won; trying again finds them)."""
    text = str(exc)
    return any(s in text for s in ("concurrently", "already exists", "duplicate key"))


def _resolve(topic: str) -> Any:
    """An adapter named by topic (the application never imports infrastructure)."""
    try:
        return resolve_topic(topic)
    except TopicError as exc:
        raise ConfigurationError(f"cannot load the adapter {topic!r}: {exc}") from exc


class _DeferredSummarizer:
    """The ledger's summarizer, built when it is first used."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    @property
    def model(self) -> str:
        return self._ledger.summarizer.model

    @model.setter
    def model(self, value: str) -> None:
        self._ledger.summarizer.model = value

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return self._ledger.summarizer.summarize(request)


#: Seconds the in-process policy waits before summarizing a threshold that another
#: process saved (that process's own policy summarizes it at once; the wait spares a
#: second summarizer call for the same crossing). Workers wait for nothing.
FOREIGN_THRESHOLD_DELAY = 2.0


@name_keys_in_errors
class Ledger(LedgerEdits, Application[UUID]):
    """Conversations as event-sourced aggregates, with working memory and audit."""

    name = "contextledger"
    snapshot_class = ConversationSnapshot
    #: Page size of the notification log (followers and audits read pages this big).
    log_section_size = 500

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        summarizer: Summarizer | None = None,
        token_counter: TokenCounter | None = None,
        clock: Clock | None = None,
        env: EnvType | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self._clock = clock or _utc_now
        self._listeners: list[tuple[Callable[[], None], frozenset[str] | None]] = []
        self._event_listeners: list[Callable[[Sequence[Any]], None]] = []
        self._runner: Any = None
        self._followers: list[Any] = []
        store_env = _resolve(STORE_ENV_TOPIC)
        for url in self.settings.store_urls[1:]:
            store_env(self.settings.for_store(url))  # every URL checked before any store opens
        merged = store_env(self.settings)
        merged.update(env or {})
        for attempt in range(5):
            try:
                super().__init__(env=merged)
                break
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
        self._lifecycle = Lifecycle(
            stop=lambda: stop_all([*reversed(self._followers), self._runner]), release=super().close
        )
        cls = type(self)
        #: Whether ``save_conversations`` may skip what ``save`` builds for hooks.
        self._lean_save = (
            cls._notify is Application._notify
            and cls.notify is Application.notify
            and not self.repository.cache
            and not self.snapshotting_intervals
        )
        #: This store's own conversations (``store`` routes to every store's when sharded).
        self.local_store = ConversationStore(
            self,
            snapshot_interval=self.settings.snapshot_interval,
            on_saved=self._saved,
            deadline_seconds=self.settings.write_deadline,
        )
        self.store: ConversationStore = self.local_store
        #: One ledger per store, this one first (just this one: not sharded).
        self.shards: list[Ledger] = [self]
        self.counters = TokenCounters(_resolve(TOKEN_COUNTER_TOPIC), fixed=token_counter)
        self.summary_service = SummaryService(
            self.store,
            self.counters,
            self.settings,
            clock=self._clock,
            summarizer=summarizer,
            build=self._build_summarizer,
        )
        self.audit = Audit(self, self.store, self.counters)
        #: Spans of append, context, summarize (and the read models' rebuild).
        self.tracer: Tracer = _resolve(TRACER_TOPIC)() if self.settings.tracing else NullTracer()
        #: Folds of edited conversations' logs (an edit reaching into summarized history).
        self.history_cache = HistoryCache()
        if len(self.settings.store_urls) > 1:
            self._open_shards(summarizer, token_counter, env)
        if self.settings.read_only:
            refuse_writes(self, masked_url(self.settings.database_url))

    def _open_shards(
        self, summarizer: Summarizer | None, token_counter: TokenCounter | None, env: EnvType | None
    ) -> None:
        """Open a ledger on each further store and route every ledger's conversations
        through one ``ShardedStore`` (this ledger holds the directory of placements)."""
        try:
            for url in self.settings.store_urls[1:]:
                shard = Ledger(
                    self.settings.for_store(url),
                    summarizer=summarizer,
                    token_counter=token_counter,
                    clock=self._clock,
                    env=env,
                )
                shard.counters = self.counters
                shard.summary_service.counters = self.counters
                self.shards.append(shard)
        except BaseException:
            self.close()
            raise
        router = ShardedStore([s.local_store for s in self.shards], clock=self._clock)
        for shard in self.shards:
            shard.store = router
            shard.summary_service.store = router
            shard.audit.store = router
            shard.shards = self.shards

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        url: str | Sequence[str] | None = None,
        *,
        summarizer: Summarizer | None = None,
        token_counter: TokenCounter | None = None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        run_policy: bool | None = None,
        read_only: bool | None = None,
    ) -> Ledger:
        """Open a ledger on ``url`` (``memory://``, ``sqlite:///file.db``,
        ``postgresql://user@host:5432/db``), or a list of such URLs: conversations are
        then spread over those stores (``docs/scale.md``). No URL:
        ``CONTEXTLEDGER_STORES``, else ``CONTEXTLEDGER_DATABASE_URL``, else
        ``sqlite:///contextledger.db``. No summarizer: OpenAI when
        ``OPENAI_API_KEY`` is set, else the offline summarizer. With ``run_policy``
        (the default) summarization runs in a background thread of this process.
        With ``read_only`` nothing is created or written (``application/read_only.py``).
        """
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
        ledger = cls(base, summarizer=summarizer, token_counter=token_counter, clock=clock)
        if base.run_policy:
            ledger.start_policy()
        return ledger

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # Only the settings configure the store: os.environ is read by Settings alone.
        return Environment(name, dict(env or {}))

    def _build_summarizer(self, kind: str) -> Summarizer:
        s = self.settings
        if kind == "openai" and s.openai_api_key is not None:
            summarizer: Summarizer = _resolve(OPENAI_SUMMARIZER_TOPIC)(
                model=s.summarizer_model,
                api_key=s.openai_api_key.get_secret_value(),
                base_url=s.openai_base_url,
                timeout=s.summarizer_timeout,
            )
            return summarizer
        offline: Summarizer = _resolve(OFFLINE_SUMMARIZER_TOPIC)(
            token_counter=self.counter_for(s.summarizer_model)
        )
        return offline

    def start_policy(self) -> None:
        """Run the summarization policy in a background thread of this process."""
        if self._runner is None:
            from contextledger.application.summarization import SummarizationRunner

            # Built on the first summary, not here: opening a ledger (and its first
            # context()) does not wait for a tokenizer to load.
            summarizer: Summarizer = _DeferredSummarizer(self)
            if not isinstance(self.tracer, NullTracer):
                summarizer = TracedSummarizer(summarizer, self.tracer)
            # Thresholds this process saved are summarized at once; those of other
            # writer processes wait a little, so their own policy goes first and
            # the summarizer is not called once per process for one crossing.
            self._runner = SummarizationRunner(self, summarizer, foreign_delay=FOREIGN_THRESHOLD_DELAY)
            self._runner.start()
        if self.shards[0] is self:
            for shard in self.shards[1:]:
                shard.start_policy()

    @property
    def summarizer(self) -> Summarizer:
        """The configured summarizer (built from settings on first use)."""
        return self.summary_service.summarizer

    @property
    def fallback_summarizer(self) -> Summarizer | None:
        """The offline summarizer that takes over a range after
        ``settings.fallback_after_attempts`` failures (None when that is off)."""
        return self.summary_service.fallback

    def summarizer_model_name(self) -> str:
        return self.summary_service.model_name()

    def counter_for(self, model: str) -> TokenCounter:
        """The token counter for ``model`` (the injected one, if any)."""
        return self.counters.for_model(model)

    def attach(self, follower: Any) -> None:
        """Attach a follower of the log (an object with ``start()``, ``stop()`` and
        ``wait_idle(timeout) -> bool``, e.g. a read-model runner): it is started now,
        waited for by ``wait_idle()`` and stopped by ``close()``."""
        follower.start()
        self._followers.append(follower)

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """eventsourcing's ``Application.save``; conversations alone skip its generic
        collection, which checks each object against two runtime protocols. The
        ledger's own saves go through ``save_conversations``."""
        if kwargs or not all(isinstance(obj, Conversation) for obj in objs):
            recorded: list[Recording[UUID]] = super().save(*objs, **kwargs)
            return recorded
        processing: ProcessingEvent[UUID] = ProcessingEvent()
        for conversation in objs:
            processing.events.extend(conversation.collect_events())
            processing.aggregates[conversation.id] = conversation
        recordings = self._record(processing)
        self._take_snapshots(processing)
        self._notify(recordings)
        self.notify(processing.events)  # eventsourcing's deprecated hook, kept
        return recordings

    def save_conversations(self, *objs: Any) -> list[Any]:
        """``save`` for the conversation store (every append); returns the events it
        saved. They are written as ``save`` writes them; the recordings ``save``
        returns (a notification object per event) are not built, unless a subclass
        hooks eventsourcing's ``_notify``/``notify``, an aggregate cache or
        snapshotting intervals need them (then this is ``save``)."""
        if not self._lean_save or not all(isinstance(obj, Conversation) for obj in objs):
            events = [event for obj in objs for event in getattr(obj, "_pending_events", ())]
            self.save(*objs)
            return events
        events = []
        for conversation in objs:
            events += conversation.collect_events()
        store = self.events
        to_stored = store.mapper.to_stored_event
        store.recorder.insert_events([to_stored(event) for event in events])
        return events

    def close(self, timeout: float | None = None) -> None:
        """Refuse new calls (``LedgerClosedError``), stop the policy and followers, wait
        up to ``timeout`` s (``Settings.close_timeout``) for calls in flight, close the
        store(s) (``docs/operations.md``, shutting down). Closing again does nothing."""
        group = self.shards if self.shards[0] is self else [self]
        close_all([s._lifecycle for s in group], self.settings.close_timeout if timeout is None else timeout)

    def __enter__(self) -> Ledger:
        self._lifecycle.check_open()
        super().__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()  # the store stays open until a call still running after the timeout ends

    def add_listener(self, listener: Callable[[], None], topics: Iterable[str] | None = None) -> None:
        """Call ``listener`` after every save (wakes in-process followers); with
        ``topics``, only after a save that stored an event of one of these topics."""
        self._listeners.append((listener, None if topics is None else frozenset(topics)))

    def add_event_listener(self, listener: Callable[[Sequence[Any]], None]) -> None:
        """Call ``listener`` with the events of every save of this process, before the
        listeners of ``add_listener``."""
        self._event_listeners.append(listener)

    def _saved(self, events: Sequence[Any] = ()) -> None:
        for event_listener in self._event_listeners:
            event_listener(events)
        saved: set[str] | None = None
        for listener, topics in self._listeners:
            if topics is not None:
                if saved is None:
                    saved = {getattr(e, "TOPIC", "") for e in events}
                if topics.isdisjoint(saved):
                    continue
            listener()

    # ----------------------------------------------------------------- commands

    def start(
        self,
        system_prompt: str | None = None,
        *,
        model: str = "gpt-4o-mini",
        policy: ReductionPolicy | None = None,
        conversation_id: ConversationRef | None = None,
        key: str | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> UUID:
        """Start a conversation; returns its id.

        ``key`` is the application's own name for it (``"chat-7"``): the id is then
        ``uuid5(KEY_NAMESPACE, key)`` and every call takes the key where it takes the
        id. ``tools`` are the tool definitions sent with every model call (see
        ``tools()``); their tokens count in the context's cost.
        """
        check_text(system_prompt, "system_prompt", optional=True)
        if policy is not None and not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        check_text(model, "model", empty=False)
        policy = with_default_cap(policy or DEFAULT_POLICY, model)
        if key is not None:
            key = check_key(key)
            cid = id_for_key(key)
            if conversation_id is not None and resolve(conversation_id) != cid:
                raise InvalidArgumentError(
                    "conversation_id and key name different conversations", argument="conversation_id"
                )
        else:
            cid = uuid4() if conversation_id is None else resolve(conversation_id)
        checked_tools = check_tools(tools, max_bytes=self.settings.max_tools_bytes)
        counter = self.counter_for(model)
        tools_tokens = self.counters.tools_cost(model, checked_tools)
        system_tokens = 0
        if system_prompt is not None:
            system = Message(role="system", content=system_prompt)
            check_message_bytes(system, self.settings, field="system_prompt")
            system_tokens = counter.count_message(system)
            check_message_tokens(system_tokens, self.settings, field="system_prompt")
        conversation = Conversation.start(
            cid,
            system_prompt=system_prompt,
            system_tokens=system_tokens,
            model=model,
            policy=policy,
            reply_priming=counter.reply_priming,
            at=self._clock(),
            key=key,
            tools=checked_tools,
            tools_tokens=tools_tokens,
        )
        with self.tracer.span("start", conversation_id=cid):
            try:
                self.store.create(conversation)
            except IntegrityError:
                raise DuplicateConversationError(
                    f"a conversation with the key {key!r} already exists"
                    if key is not None
                    else "a conversation with this id already exists",
                    conversation_id=cid,
                    key=key,
                ) from None
        return cid

    def get_or_start(self, key: str, **start_args: Any) -> UUID:
        """The id of the conversation with this key, started with ``start_args`` if it
        does not exist yet. Safe under concurrent callers, in any number of processes:
        the id derives from the key, so exactly one start can be stored."""
        cid = id_for_key(check_key(key))
        with self.store.lock(cid):
            try:
                self.store.load(cid)
                return cid
            except ConversationNotFoundError:
                pass
        try:
            return self.start(key=key, **start_args)
        except DuplicateConversationError:
            return cid

    def append(
        self,
        conversation_id: ConversationRef,
        message: Message | dict[str, Any] | Any,
        *,
        client_message_id: str | None = None,
        hidden: bool = False,
    ) -> int:
        """Append one message; returns its position.

        ``message`` is an OpenAI-format dict, a ``Message``, the openai SDK's
        ``ChatCompletionMessage`` (or its ``model_dump()``), or a whole
        ``ChatCompletion``: then its first choice's message is appended and the usage
        the provider reported is recorded against the conversation, in one transaction.
        With ``client_message_id``, a retried append of the same id and message is a
        no-op that returns the original position; the id reused for another message
        raises ``IdempotencyConflictError`` (nothing is written). ``hidden=True``: a tool
        result the framework filtered from the model (shown, and summarized, as its placeholder).
        """
        cid = resolve(conversation_id)
        with self.tracer.span("append", conversation_id=cid) as span:
            given = inbound(message)
            position = self._append(cid, given, client_message_id, hidden)
            span.set("position", position)
            span.set("role", given.message.role)
            log.debug("appended %s message at %d to %s", given.message.role, position, cid)
            return position

    def _append(self, conversation_id: UUID, given: Inbound, client_id: str | None, hidden: bool) -> int:
        msg, usage = given.message, given.usage
        ids = [None if client_id is None else check_client_message_id(client_id)]

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            if usage is not None:  # the provider saw the context before its own answer
                conversation.record_usage(
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    at=self._clock(),
                )
            positions = [self._append_to(conversation, msg, ids[0], hidden)]
            return positions, id_records(conversation.id, ids, positions, at=self._clock())

        return execute_once(self.store, conversation_id, command, ids, [msg])[0]

    def extend(
        self,
        conversation_id: ConversationRef,
        messages: Iterable[Message | dict[str, Any] | Any],
        *,
        client_message_ids: Sequence[str | None] | None = None,
    ) -> list[int]:
        """Append several messages atomically (one transaction); returns their positions.
        ``client_message_ids`` (one per message, or None) make a retry a no-op, as in
        ``append``."""
        conversation_id = resolve(conversation_id)
        if isinstance(messages, str | bytes | dict | Message) or not isinstance(messages, Iterable):
            raise InvalidArgumentError(
                "messages must be a list of messages", argument="messages", value=shown(messages)
            )
        msgs = [inbound(m).message for m in messages]
        ids = check_client_message_ids(client_message_ids, len(msgs))
        if not msgs:
            return []

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            positions = [self._append_to(conversation, m, i) for m, i in zip(msgs, ids, strict=True)]
            return positions, id_records(conversation.id, ids, positions, at=self._clock())

        return execute_once(self.store, conversation_id, command, ids, msgs)

    def _append_to(
        self, conversation: Conversation, message: Message, client_id: str | None, hidden: bool = False
    ) -> int:
        conversation.check_message(message)
        check_message_bytes(message, self.settings)
        tokens, placeholder_tokens = self.counters.message_cost(conversation, message)
        check_message_tokens(tokens, self.settings)
        return conversation.append(
            message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            client_message_id=client_id,
            at=self._clock(),
            hidden=hidden,
        )

    def close_open_tool_calls(
        self,
        conversation_id: ConversationRef,
        *,
        content: str = "error: the tool call was interrupted and returned no result",
    ) -> list[int]:
        """Answer every unanswered call of the open tool-call group with a ``tool``
        message saying ``content`` (an error), in one transaction; returns their
        positions, ``[]`` when no call is open. Recovery for a conversation left
        waiting for tool results (the application stopped between the model's tool
        call and the results)."""
        if not isinstance(content, str) or not content.strip():
            raise InvalidMessageError("content must be a non-empty string", field="content")
        conversation_id = resolve(conversation_id)
        text = content if content.lower().startswith("error") else f"error: {content}"

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            return [
                self._append_to(
                    conversation, Message(role="tool", tool_call_id=call_id, content=text), None
                )
                for call_id in list(conversation.state.open_calls)
            ], []

        return self.store.execute(conversation_id, command)

    def change_policy(self, conversation_id: ConversationRef, policy: ReductionPolicy) -> bool:
        """Adopt a new reduction policy from now on; False if it is the same."""
        conversation_id = resolve(conversation_id)
        if not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        return self.store.execute(
            conversation_id,
            lambda c: (c.change_policy(with_default_cap(policy, c.state.model), at=self._clock()), []),
        )

    def change_tools(
        self, conversation_id: ConversationRef, tools: Sequence[ToolDefinition] | None
    ) -> bool:
        """Send these tool definitions from now on (``ToolsChanged``); False if unchanged."""
        conversation_id = resolve(conversation_id)
        checked = check_tools(tools, max_bytes=self.settings.max_tools_bytes)

        def command(conversation: Conversation) -> tuple[bool, list[Any]]:
            cost = self.counters.tools_cost(conversation.state.model, checked)
            return conversation.change_tools(checked, tools_tokens=cost, at=self._clock()), []

        return self.store.execute(conversation_id, command)

    def record_usage(
        self, conversation_id: ConversationRef, *, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Record the provider's reported usage for the latest model call."""
        conversation_id = resolve(conversation_id)

        def command(conversation: Conversation) -> tuple[None, list[Any]]:
            conversation.record_usage(
                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, at=self._clock()
            )
            return None, []

        self.store.execute(conversation_id, command)

    # ---------------------------------------------------------------- summaries

    def pending_summary(self, conversation_id: ConversationRef) -> SummaryRequest | None:
        """The summarization the conversation waits for, as a summarizer request."""
        return self.summary_service.pending_summary(resolve(conversation_id))

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """Record ``result`` for ``request``'s range. Raises ``StaleSummaryError`` if
        the range is no longer pending, ``SummaryQualityError`` if the gate fails."""
        self.summary_service.record_summary(request, result)

    def record_summary_failure(self, request: SummaryRequest, failure: SummaryFailure) -> int:
        """Record a failed attempt at ``request``'s range; returns the attempt number."""
        return self.summary_service.record_failure(request, failure)

    # ------------------------------------------------------------------ queries

    def context(
        self, conversation_id: ConversationRef, *, version: int | None = None
    ) -> list[ContextMessage]:
        """What the model is sent next (or was sent at aggregate ``version``): OpenAI
        chat messages, typed as the openai SDK's ``ChatCompletionMessageParam``."""
        return self.working_memory(conversation_id, version=version).messages

    def tools(self, conversation_id: ConversationRef, *, version: int | None = None) -> list[ToolDefinition]:
        """The tool definitions to send with the next model call (empty: none)."""
        state = self.conversation(conversation_id, version=version).state
        return cast("list[ToolDefinition]", [dict(t) for t in state.tools or ()])

    def working_memory(
        self, conversation_id: ConversationRef, *, version: int | None = None
    ) -> WorkingMemory:
        """The context and its token cost read together (a summary landing in the
        background cannot fall between them)."""
        conversation_id = resolve(conversation_id)
        with self.tracer.span("context", conversation_id=conversation_id, version=version) as span:
            memory = self._working_memory(conversation_id, version)
            span.set("messages", len(memory.messages))
            span.set("context_tokens", memory.tokens)
            span.set("aggregate_version", memory.version)
            return memory

    def _working_memory(self, conversation_id: UUID, version: int | None) -> WorkingMemory:

        def read(conversation: Conversation) -> WorkingMemory:
            messages, tokens = conversation.working_memory()
            return WorkingMemory(
                messages=cast("list[ContextMessage]", [m.to_openai() for m in messages]),
                tokens=tokens,
                version=conversation.version,
            )

        if version is not None:
            return read(self.conversation(conversation_id, version=version))
        return self.store.read(conversation_id, read)

    def conversation(self, conversation_id: ConversationRef, *, version: int | None = None) -> Conversation:
        """A private copy of the aggregate, as it is now or was at ``version`` (audits)."""
        conversation_id = resolve(conversation_id)
        if version is None:
            return self.store.copy(conversation_id)
        check_count(version, "version", minimum=1, conversation_id=conversation_id)
        return self.store.at_version(conversation_id, version)

    def totals(self, conversation_id: ConversationRef | None = None) -> TokenTotals:
        """Token accounting for one conversation, or summed over all of them.

        A fork's own totals count the history it shares with its source (its prompts
        carry it); the sum counts each stored message once: ``messages``,
        ``appended_tokens``, ``retracted_messages`` and ``edited_messages`` leave out
        what forks inherited."""
        if conversation_id is not None:
            return self.store.read(resolve(conversation_id), TokenTotals.of)
        found: list[TokenTotals] = []
        shared: list[SharedHistory] = []
        for cid in self.conversation_ids():
            totals, forked = self.store.read(cid, _totals_and_fork)
            found.append(totals)
            if forked and (inherited := shared_history(self.store, cid)) is not None:
                shared.append(inherited)
        return TokenTotals.sum(found, shared)

    def transcript(self, conversation_id: ConversationRef) -> list[TranscriptEntry]:
        """Every message ever appended and every edited version, oldest first (a fork
        starts with the history it shares). Retracted entries are marked
        ``retracted``; an edited version names the version it replaced."""
        return transcript_entries(self.store, resolve(conversation_id))

    def summaries(self, conversation_id: ConversationRef) -> list[SummaryInfo]:
        """Every summary recorded, oldest first, with ranges and provenance; one that a
        retraction or an edit invalidated is marked ``valid=False``."""
        return summary_infos(self.store, resolve(conversation_id))

    def simulate(
        self,
        policy: ReductionPolicy | Mapping[str, Any],
        conversations: Iterable[ConversationRef] | ConversationRef | None = None,
        summarizer: Summarizer | str | None = None,
        *,
        budget_calls: int | None = None,
        prices: Mapping[str, Any] | None = None,
    ) -> WhatIfReport:
        """What ``policy`` would have sent, turn by turn, against what the log recorded:
        an in-memory replay that writes nothing (see ``contextledger.application.whatif``).
        ``summarizer``: None or "offline" (no network), "openai", or a ``Summarizer``."""
        source = LogSource(self.conversation_ids, self.store.events, self.counter_for)
        chosen = choose_summarizer(
            summarizer, self._build_summarizer, openai_configured=self.settings.openai_api_key is not None
        )
        return simulate_policy(
            policy, source, summarizer=chosen, conversations=conversations,
            budget_calls=budget_calls, prices=prices,
        )

    # -------------------------------------------------------------------- audit

    def replay(self, conversation_id: ConversationRef) -> Iterator[AuditEvent]:
        """Every stored event of the conversation, in order, for audits."""
        return self.audit.replay(resolve(conversation_id))

    def conversation_ids(self) -> list[UUID]:
        """Ids of every conversation, in the order they were started (with several
        stores: store by store, each in that order)."""
        return [cid for shard in self.shards for cid in shard.audit.conversation_ids()]

    def verify(self, conversation_id: ConversationRef | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest; report what does not match."""
        if conversation_id is not None:
            return self.audit.verify(resolve(conversation_id))
        reports = [shard.audit.verify(None) for shard in self.shards]
        if len(reports) == 1:
            return reports[0]
        return VerifyReport(
            conversations=sum(r.conversations for r in reports),
            events=sum(r.events for r in reports),
            messages=sum(r.messages for r in reports),
            summaries=sum(r.summaries for r in reports),
            problems=tuple(p for r in reports for p in r.problems),
        )

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Block until the summarization policy has caught up with the log and has no
        summary in flight (True), or ``timeout`` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.shards[0] is self and len(self.shards) > 1:
            for shard in self.shards:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not shard._wait_own_followers(remaining):
                    return False
            return True
        return self._wait_own_followers(timeout)

    def _wait_own_followers(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        followers = [*([self._runner] if self._runner is not None else []), *self._followers]
        for follower in followers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not follower.wait_idle(remaining):
                return False
        # Summaries recorded while a later follower caught up: check the policy once more.
        if self._runner is not None and self._followers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            return bool(self._runner.wait_idle(remaining))
        return True


def _totals_and_fork(conversation: Conversation) -> tuple[TokenTotals, bool]:
    return TokenTotals.of(conversation), conversation.state.fork_of is not None


# Every public method refuses calls once close() has begun (LedgerClosedError).
guard_methods(Ledger, module_prefix="contextledger.", exempt=(
    "close", "construct_env", "add_listener", "add_event_listener", "counter_for",
    "summarizer_model_name", "save_conversations"))
