"""The ``Ledger``: the event-sourced application that keeps conversations.

Commands load a conversation (from an in-process cache fast-forwarded from the
store, else a bounded snapshot plus the events after it), check, trigger events and
save them with optimistic concurrency, retrying on conflicts. Queries are computed
from the same bounded state, so ``context()`` costs O(window), not O(history), and
always shows the caller's own writes.
"""

from __future__ import annotations

import contextlib
import copy
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.results import (
    AuditEvent,
    SummaryInfo,
    TokenTotals,
    TranscriptEntry,
    VerifyProblem,
    VerifyReport,
    WorkingMemory,
)
from contextledger.application.settings import (
    OFFLINE_SUMMARIZER_TOPIC,
    OPENAI_SUMMARIZER_TOPIC,
    TOKEN_COUNTER_TOPIC,
    Settings,
    persistence_env,
)
from contextledger.domain.client_ids import ClientMessageId
from contextledger.domain.conversation import Conversation, ConversationSnapshot, SummaryProvenance
from contextledger.domain.errors import (
    ConcurrencyError,
    ConfigurationError,
    ContextLedgerError,
    ConversationNotFoundError,
    DuplicateConversationError,
    InvalidMessageError,
    StoreError,
)
from contextledger.domain.events import DomainEvent
from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.reduction import (
    chain_digest,
    genesis_digest,
    placeholder_text,
    summary_message,
    summary_source_digest,
)
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, OperationalError, PersistenceError
from eventsourcing.utils import Environment, EnvType, TopicError, resolve_topic

__all__ = ["Ledger"]

T = TypeVar("T")
Clock = Callable[[], datetime]

#: How long a command keeps retrying optimistic-concurrency conflicts.
_RETRY_SECONDS = 30.0
_CACHE_SIZE = 2048
DEFAULT_POLICY = ReductionPolicy(trigger_messages=100, keep_messages=10)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _resolve(topic: str) -> Any:
    """An adapter class named by topic (the application never imports infrastructure)."""
    try:
        return resolve_topic(topic)
    except TopicError as exc:
        raise ConfigurationError(f"cannot load the adapter {topic!r}: {exc}") from exc


class Ledger(Application[UUID]):
    """Conversations as event-sourced aggregates, with working memory and audit."""

    name = "contextledger"
    snapshot_class = ConversationSnapshot

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
        self._token_counter = token_counter
        self._counters: dict[str, TokenCounter] = {}
        self._summarizer = summarizer
        self._fallback: Summarizer | None = None
        self._cache: OrderedDict[UUID, Conversation] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._locks: dict[UUID, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._runner: Any = None
        self._followers: list[Any] = []
        merged = persistence_env(self.settings)
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
                if attempt < 4 and "concurrently" in str(exc):
                    time.sleep(0.05 * (attempt + 1) * (1 + random.random()))
                    continue
                raise StoreError(f"cannot open the event store: {exc}") from exc
            except OSError as exc:
                raise StoreError(f"cannot open the event store: {exc}") from exc

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        summarizer: Summarizer | None = None,
        token_counter: TokenCounter | None = None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        run_policy: bool | None = None,
    ) -> Ledger:
        """Open a ledger on ``url`` (``memory://``, ``sqlite:///file.db``,
        ``postgresql://user@host:5432/db``). No URL: ``CONTEXTLEDGER_DATABASE_URL``,
        else ``sqlite:///contextledger.db``. No summarizer: OpenAI when
        ``OPENAI_API_KEY`` is set, else the offline summarizer. With ``run_policy``
        (the default) summarization runs in a background thread of this process.
        """
        base = settings or Settings.from_env()
        updates: dict[str, Any] = {}
        if url is not None:
            updates["database_url"] = url
        if run_policy is not None:
            updates["run_policy"] = run_policy
        if updates:
            base = base.model_copy(update=updates)
        ledger = cls(base, summarizer=summarizer, token_counter=token_counter, clock=clock)
        if base.run_policy:
            ledger.start_policy()
        return ledger

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # Only the settings configure the store: os.environ is read by Settings alone.
        return Environment(name, dict(env or {}))

    def start_policy(self) -> None:
        """Run the summarization policy in a background thread of this process."""
        if self._runner is None:
            from contextledger.application.summarization import SummarizationRunner

            self._runner = SummarizationRunner(self, self.summarizer)
            self._runner.start()

    @property
    def summarizer(self) -> Summarizer:
        """The configured summarizer (built from settings on first use)."""
        if self._summarizer is None:
            s = self.settings
            if s.openai_api_key is not None:
                cls = _resolve(OPENAI_SUMMARIZER_TOPIC)
                self._summarizer = cls(
                    model=s.summarizer_model,
                    api_key=s.openai_api_key.get_secret_value(),
                    base_url=s.openai_base_url,
                    timeout=s.summarizer_timeout,
                )
            else:
                cls = _resolve(OFFLINE_SUMMARIZER_TOPIC)
                self._summarizer = cls(token_counter=self.counter_for(s.summarizer_model))
        return self._summarizer

    @property
    def fallback_summarizer(self) -> Summarizer | None:
        """The offline summarizer that takes over a range after
        ``settings.fallback_after_attempts`` failures (None when that is off)."""
        if self.settings.fallback_after_attempts is None:
            return None
        if self._fallback is None:
            cls = _resolve(OFFLINE_SUMMARIZER_TOPIC)
            self._fallback = cls(token_counter=self.counter_for(self.settings.summarizer_model))
        return self._fallback

    def counter_for(self, model: str) -> TokenCounter:
        """The token counter for ``model`` (the injected one, if any)."""
        if self._token_counter is not None:
            return self._token_counter
        counter = self._counters.get(model)
        if counter is None:
            counter = _resolve(TOKEN_COUNTER_TOPIC)(model)
            self._counters[model] = counter
        return counter

    def attach(self, follower: Any) -> None:
        """Attach a follower of the log (an object with ``start()``, ``stop()`` and
        ``wait_idle(timeout) -> bool``, e.g. a read-model runner): it is started now,
        waited for by ``wait_idle()`` and stopped by ``close()``."""
        follower.start()
        self._followers.append(follower)

    def close(self) -> None:
        for follower in reversed(self._followers):
            follower.stop()
        self._followers.clear()
        if self._runner is not None:
            self._runner.stop()
            self._runner = None
        super().close()

    def __enter__(self) -> Ledger:
        super().__enter__()
        return self

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every save (wakes in-process followers)."""
        self._listeners.append(listener)

    # ----------------------------------------------------------------- commands

    def start(
        self,
        system_prompt: str | None = None,
        *,
        model: str = "gpt-4o-mini",
        policy: ReductionPolicy | None = None,
        conversation_id: UUID | None = None,
    ) -> UUID:
        """Start a conversation; returns its id."""
        if policy is not None and not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        policy = policy or DEFAULT_POLICY
        cid = conversation_id or uuid4()
        counter = self.counter_for(model)
        system_tokens = (
            counter.count_message(Message(role="system", content=system_prompt))
            if system_prompt is not None
            else 0
        )
        conversation = Conversation.start(
            cid,
            system_prompt=system_prompt,
            system_tokens=system_tokens,
            model=model,
            policy=policy,
            reply_priming=counter.reply_priming,
            at=self._clock(),
        )
        try:
            self._save(conversation)
        except IntegrityError:
            raise DuplicateConversationError(
                "a conversation with this id already exists", conversation_id=cid
            ) from None
        self._cache_put(conversation)
        return cid

    def append(
        self,
        conversation_id: UUID,
        message: Message | dict[str, Any],
        *,
        client_message_id: str | None = None,
    ) -> int:
        """Append one message (OpenAI-format dict or ``Message``); returns its position.

        With ``client_message_id``, a retried append of the same id is a no-op that
        returns the original position.
        """
        msg = Message.from_openai(message)
        if client_message_id is not None and (
            not isinstance(client_message_id, str) or not 0 < len(client_message_id) <= 200
        ):
            raise InvalidMessageError("client_message_id must be a string of 1 to 200 characters")

        def command(conversation: Conversation) -> tuple[int, list[Any]]:
            position = self._append_to(conversation, msg, client_message_id)
            extra: list[Any] = []
            if client_message_id is not None:
                extra.append(
                    ClientMessageId.record(
                        conversation.id, client_message_id, position, at=self._clock()
                    )
                )
            return position, extra

        def on_conflict() -> int | None:
            if client_message_id is None:
                return None
            return self._client_position(conversation_id, client_message_id)

        return self._execute(conversation_id, command, on_conflict=on_conflict)

    def extend(
        self, conversation_id: UUID, messages: Iterable[Message | dict[str, Any]]
    ) -> list[int]:
        """Append several messages atomically (one transaction); returns their positions."""
        msgs = [Message.from_openai(m) for m in messages]
        if not msgs:
            return []

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            return [self._append_to(conversation, m, None) for m in msgs], []

        return self._execute(conversation_id, command)

    def change_policy(self, conversation_id: UUID, policy: ReductionPolicy) -> bool:
        """Adopt a new reduction policy from now on; False if it is the same."""
        if not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        return self._execute(
            conversation_id, lambda c: (c.change_policy(policy, at=self._clock()), [])
        )

    def record_usage(
        self, conversation_id: UUID, *, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Record the provider's reported usage for the latest model call."""

        def command(conversation: Conversation) -> tuple[None, list[Any]]:
            conversation.record_usage(
                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, at=self._clock()
            )
            return None, []

        self._execute(conversation_id, command)

    def pending_summary(self, conversation_id: UUID) -> SummaryRequest | None:
        """The summarization the conversation waits for, as a summarizer request."""
        with self._lock(conversation_id):
            conversation = self._load(conversation_id)
            pending = conversation.state.pending
            if pending is None:
                return None
            policy = conversation.policy
            return SummaryRequest(
                conversation_id=conversation_id,
                from_position=pending.from_position,
                through_position=pending.through_position,
                messages=tuple(e.message for e in conversation.pending_messages_for_summary()),
                previous_summary=conversation.previous_summary_text(),
                model=policy.summarizer_model or self.summarizer_model_name(),
                max_summary_tokens=policy.max_summary_tokens,
                idempotency_key=f"{conversation_id}:{pending.threshold_version}",
                attempt=pending.attempts + 1,
            )

    def summarizer_model_name(self) -> str:
        model = getattr(self._summarizer, "model", None)
        return model if isinstance(model, str) and model else self.settings.summarizer_model

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """Record ``result`` for ``request``'s range. Raises ``StaleSummaryError`` if
        the range is no longer pending, ``SummaryQualityError`` if the gate fails."""
        digest = summary_source_digest(request.previous_summary, request.messages)

        def command(conversation: Conversation) -> tuple[None, list[Any]]:
            counter = self.counter_for(conversation.state.model)
            text = result.text.strip()
            tokens = counter.count_text(text)
            rendered = summary_message(
                0 if conversation.previous_summary_text() is not None else request.from_position,
                request.through_position,
                text,
            )
            conversation.record_summary(
                from_position=request.from_position,
                through_position=request.through_position,
                text=text,
                tokens=tokens,
                message_tokens=counter.count_message(rendered),
                source_digest=digest,
                provenance=SummaryProvenance(
                    model=result.model,
                    prompt_version=result.prompt_version,
                    input_tokens=result.input_tokens,
                    output_tokens=result.output_tokens,
                    latency_ms=result.latency_ms,
                ),
                at=self._clock(),
            )
            return None, []

        self._execute(request.conversation_id, command)

    def record_summary_failure(
        self,
        request: SummaryRequest,
        *,
        kind: str,
        error: str,
        retryable: bool,
        called_provider: bool,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> int:
        """Record a failed attempt at the pending range; returns the attempt number."""
        return self._execute(
            request.conversation_id,
            lambda c: (
                c.record_summarization_failure(
                    from_position=request.from_position,
                    through_position=request.through_position,
                    kind=kind,
                    error=error,
                    retryable=retryable,
                    called_provider=called_provider,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    at=self._clock(),
                ),
                [],
            ),
        )

    # ------------------------------------------------------------------ queries

    def context(self, conversation_id: UUID, *, version: int | None = None) -> list[dict[str, Any]]:
        """What the model is sent next (or was sent at aggregate ``version``)."""
        return self.working_memory(conversation_id, version=version).messages

    def working_memory(self, conversation_id: UUID, *, version: int | None = None) -> WorkingMemory:
        """The context and its token cost read together (a summary landing in the
        background cannot fall between them)."""
        if version is not None:
            conversation = self.conversation(conversation_id, version=version)
            messages, tokens = conversation.working_memory()
        else:
            with self._lock(conversation_id):
                conversation = self._load(conversation_id)
                messages, tokens = conversation.working_memory()
        return WorkingMemory(
            messages=[m.to_openai() for m in messages], tokens=tokens, version=conversation.version
        )

    def conversation(self, conversation_id: UUID, *, version: int | None = None) -> Conversation:
        """A private copy of the aggregate, as it is now or was at ``version`` (audits)."""
        if version is not None:
            if not isinstance(version, int) or version < 1:
                raise ConversationNotFoundError(
                    "version must be a positive integer", conversation_id=conversation_id
                )
            try:
                conversation: Conversation = self.repository.get(conversation_id, version=version)
            except AggregateNotFoundError:
                raise ConversationNotFoundError(
                    "no such conversation", conversation_id=conversation_id, version=version
                ) from None
            if conversation.version != version:
                raise ConversationNotFoundError(
                    f"the conversation has only {conversation.version} versions",
                    conversation_id=conversation_id,
                    version=version,
                )
            return conversation
        with self._lock(conversation_id):
            return copy.deepcopy(self._load(conversation_id))

    def totals(self, conversation_id: UUID | None = None) -> TokenTotals:
        """Token accounting for one conversation, or summed over all of them."""
        if conversation_id is None:
            return self._global_totals()
        with self._lock(conversation_id):
            return _totals_of(self._load(conversation_id))

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        """Every message ever appended, oldest first."""
        return [
            TranscriptEntry.from_event(e)
            for e in self._events(conversation_id)
            if isinstance(e, Conversation.MessageAppended)
        ]

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        """Every summary recorded, oldest first, with ranges and provenance."""
        return [
            SummaryInfo.from_event(e)
            for e in self._events(conversation_id)
            if isinstance(e, Conversation.SummaryCreated)
        ]

    def replay(self, conversation_id: UUID) -> Iterator[AuditEvent]:
        """Every stored event of the conversation, in order, for audits."""
        for event in self._events(conversation_id):
            data = event.model_dump(
                mode="json", exclude={"originator_id", "originator_version", "timestamp"}
            )
            yield AuditEvent(
                version=event.originator_version,
                timestamp=event.timestamp,
                kind=type(event).__name__,
                data=data,
            )

    def conversation_ids(self) -> list[UUID]:
        """Ids of every conversation, in the order they were started."""
        ids: list[UUID] = []
        for notification in self._notifications(topics=(Conversation.Started.TOPIC,)):
            ids.append(UUID(str(notification.originator_id)))
        return ids

    def verify(self, conversation_id: UUID | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest; report what does not match."""
        ids = [conversation_id] if conversation_id is not None else self.conversation_ids()
        problems: list[VerifyProblem] = []
        events = messages = summaries = 0
        for cid in ids:
            found = _verify_conversation(cid, self._events(cid))
            events += found[0]
            messages += found[1]
            summaries += found[2]
            problems.extend(found[3])
        return VerifyReport(
            conversations=len(ids),
            events=events,
            messages=messages,
            summaries=summaries,
            problems=tuple(problems),
        )

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Block until the summarization policy has caught up with the log and has no
        summary in flight (True), or ``timeout`` seconds pass (False)."""
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

    # --------------------------------------------------------------- internals

    def _append_to(
        self, conversation: Conversation, message: Message, client_message_id: str | None
    ) -> int:
        conversation.check_message(message)
        counter = self.counter_for(conversation.state.model)
        tokens = counter.count_message(message)
        placeholder_tokens = None
        if message.role == "tool":
            text = placeholder_text(
                conversation.tool_name_for(message.tool_call_id),
                tokens,
                conversation.state.next_position,
            )
            placeholder_tokens = counter.count_message(
                Message(role="tool", tool_call_id=message.tool_call_id, content=text)
            )
        return conversation.append(
            message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            client_message_id=client_message_id,
            at=self._clock(),
        )

    def _execute(
        self,
        conversation_id: UUID,
        command: Callable[[Conversation], tuple[T, list[Any]]],
        *,
        on_conflict: Callable[[], T | None] | None = None,
    ) -> T:
        """Run ``command`` on the conversation and save, retrying on conflicts."""
        deadline = time.monotonic() + _RETRY_SECONDS
        attempt = 0
        while True:
            attempt += 1
            with self._lock(conversation_id):
                conversation = self._load(conversation_id, fresh=False)
                try:
                    result, others = command(conversation)
                except BaseException:
                    self._cache_evict(conversation_id)  # it may hold half-applied events
                    raise
                pending = list(conversation._pending_events)
                if not pending:
                    return result
                try:
                    self._save(conversation, *others)
                except IntegrityError:
                    self._cache_evict(conversation_id)
                    if self._landed(conversation_id, pending):
                        return result
                    if on_conflict is not None:
                        found = on_conflict()
                        if found is not None:
                            return found
                except BaseException:
                    self._cache_evict(conversation_id)
                    raise
                else:
                    self._cache_put(conversation)
                    return result
            if time.monotonic() > deadline:
                raise ConcurrencyError(
                    f"gave up after {attempt} conflicting concurrent writes in {_RETRY_SECONDS} s",
                    conversation_id=conversation_id,
                )
            time.sleep(min(0.1, 0.002 * (2 ** min(attempt, 6))) * random.random())

    def _landed(self, conversation_id: UUID, pending: list[DomainEvent]) -> bool:
        """Whether these exact events are stored already: a commit whose answer was
        lost (a dropped connection) and whose retry then conflicted with itself."""
        stored = list(
            self.events.get(
                conversation_id,
                gt=pending[0].originator_version - 1,
                lte=pending[-1].originator_version,
            )
        )
        return stored == pending

    def _save(self, conversation: Conversation, *others: Any) -> None:
        before = conversation.version - len(conversation._pending_events)
        try:
            self.save(conversation, *others)
        except IntegrityError:
            raise
        except (OperationalError, PersistenceError) as exc:
            raise StoreError(
                f"the event store failed: {exc}", conversation_id=conversation.id
            ) from exc
        interval = self.settings.snapshot_interval
        if conversation.version // interval > before // interval and self.snapshots is not None:
            with contextlib.suppress(IntegrityError):  # another writer took the same one
                self.snapshots.put([ConversationSnapshot.take(conversation)])
        for listener in self._listeners:
            listener()

    def _load(self, conversation_id: UUID, *, fresh: bool = True) -> Conversation:
        """The conversation from the cache (brought up to date from the store when
        ``fresh``), else from its latest snapshot and the events after it. Commands
        skip the freshness query: a stale copy fails its save with a conflict and
        is reloaded."""
        with self._cache_lock:
            cached = self._cache.get(conversation_id)
            if cached is not None:
                self._cache.move_to_end(conversation_id)
        try:
            if cached is not None:
                if fresh:
                    for event in self.events.get(conversation_id, gt=cached.version):
                        event.mutate(cached)  # type: ignore[attr-defined]
                return cached
            conversation: Conversation = self.repository.get(conversation_id)
        except AggregateNotFoundError:
            raise ConversationNotFoundError(
                "no such conversation", conversation_id=conversation_id
            ) from None
        except ContextLedgerError:
            raise
        except (OperationalError, PersistenceError) as exc:
            raise StoreError(f"the event store failed: {exc}", conversation_id=conversation_id) from exc
        if not isinstance(conversation, Conversation):
            raise ConversationNotFoundError(
                "no such conversation", conversation_id=conversation_id
            )
        self._cache_put(conversation)
        return conversation

    def _events(self, conversation_id: UUID) -> list[DomainEvent]:
        try:
            events = list(self.events.get(conversation_id))
        except ContextLedgerError:
            raise
        except (OperationalError, PersistenceError) as exc:
            raise StoreError(f"the event store failed: {exc}", conversation_id=conversation_id) from exc
        if not events or not isinstance(events[0], Conversation.Started):
            raise ConversationNotFoundError("no such conversation", conversation_id=conversation_id)
        return events  # type: ignore[return-value]

    def _notifications(self, topics: Sequence[str] = (), start: int = 1) -> Iterator[Any]:
        while True:
            batch = self.recorder.select_notifications(start, 1000, topics=topics)
            yield from batch
            if len(batch) < 1000:
                return
            start = batch[-1].id + 1

    def _global_totals(self) -> TokenTotals:
        sums: dict[str, int] = {}
        ids = self.conversation_ids()
        for cid in ids:
            with self._lock(cid):
                totals = _totals_of(self._load(cid))
            for key, value in vars(totals).items():
                sums[key] = sums.get(key, 0) + int(value)
        if not ids:
            return TokenTotals(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, conversations=0)
        sums["conversations"] = len(ids)
        return TokenTotals(**sums)

    def _client_position(self, conversation_id: UUID, client_message_id: str) -> int | None:
        try:
            index: ClientMessageId = self.repository.get(
                ClientMessageId.id_for(conversation_id, client_message_id)
            )
        except AggregateNotFoundError:
            return None
        return index.position

    def _lock(self, conversation_id: UUID) -> threading.Lock:
        with self._locks_lock:
            lock = self._locks.get(conversation_id)
            if lock is None:
                if len(self._locks) > 4 * _CACHE_SIZE:
                    self._locks = {k: v for k, v in self._locks.items() if v.locked()}
                lock = self._locks[conversation_id] = threading.Lock()
            return lock

    def _cache_put(self, conversation: Conversation) -> None:
        with self._cache_lock:
            self._cache[conversation.id] = conversation
            self._cache.move_to_end(conversation.id)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)

    def _cache_evict(self, conversation_id: UUID) -> None:
        with self._cache_lock:
            self._cache.pop(conversation_id, None)


def _totals_of(conversation: Conversation) -> TokenTotals:
    s = conversation.state
    context_tokens = conversation.context_tokens()
    full = conversation.full_history_tokens
    return TokenTotals(
        messages=s.next_position,
        appended_tokens=s.appended_tokens,
        context_tokens=context_tokens,
        full_history_tokens=full,
        saved_tokens=max(0, full - context_tokens),
        summaries=s.summaries_created,
        summarizer_calls=s.summarizer_calls,
        summarizer_failures=s.summarizer_failures,
        summarizer_input_tokens=s.summarizer_input_tokens,
        summarizer_output_tokens=s.summarizer_output_tokens,
        provider_prompt_tokens=s.provider_prompt_tokens,
        provider_completion_tokens=s.provider_completion_tokens,
    )


def _verify_conversation(
    cid: UUID, events: list[DomainEvent]
) -> tuple[int, int, int, list[VerifyProblem]]:
    problems: list[VerifyProblem] = []
    messages: dict[int, Message] = {}
    started = events[0]
    assert isinstance(started, Conversation.Started)
    digest = genesis_digest(str(cid), started.system_prompt, started.model)
    if digest != started.digest:
        problems.append(VerifyProblem(cid, 1, "the Started event was altered"))
    layers: list[str] = []
    n_messages = n_summaries = 0
    for index, event in enumerate(events):
        if event.originator_version != index + 1:
            problems.append(VerifyProblem(cid, event.originator_version, "version gap"))
        if isinstance(event, Conversation.MessageAppended):
            n_messages += 1
            if event.position != len(messages):
                problems.append(VerifyProblem(cid, event.originator_version, "position gap"))
            digest = chain_digest(digest, event.message)
            if digest != event.digest:
                problems.append(
                    VerifyProblem(
                        cid,
                        event.originator_version,
                        f"message {event.position} does not match its digest",
                    )
                )
                digest = event.digest
            messages[event.position] = event.message
        elif isinstance(event, Conversation.SummaryCreated):
            n_summaries += 1
            covered = [messages.get(p) for p in range(event.from_position, event.through_position + 1)]
            if any(m is None for m in covered):
                problems.append(
                    VerifyProblem(cid, event.originator_version, "summary covers unknown messages")
                )
                continue
            prev = "\n\n".join(layers) if event.covers_from == 0 and layers else None
            expected = summary_source_digest(prev, [m for m in covered if m is not None])
            if expected != event.source_digest:
                problems.append(
                    VerifyProblem(
                        cid,
                        event.originator_version,
                        f"summary of {event.from_position}-{event.through_position} does not "
                        "match the messages it covers",
                    )
                )
            layers = [event.text] if event.covers_from == 0 else [*layers, event.text]
    return len(events), n_messages, n_summaries, problems
