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
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, PersistenceError
from eventsourcing.utils import Environment, EnvType, TopicError, resolve_topic

from contextledger.application import items as items_module
from contextledger.application.audit import Audit
from contextledger.application.counting import TokenCounters
from contextledger.application.items import SummaryRole
from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.results import (
    AuditEvent,
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
)
from contextledger.application.store import ConversationStore
from contextledger.application.summary_service import SummaryService
from contextledger.domain.client_ids import ClientMessageId
from contextledger.domain.conversation import Conversation, ConversationSnapshot
from contextledger.domain.errors import (
    ConfigurationError,
    ContextLedgerError,
    DuplicateConversationError,
    InvalidArgumentError,
    InvalidMessageError,
    StoreError,
)
from contextledger.domain.events import MessageAppended, SummaryCreated
from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.validation import check_count, check_text, shown

__all__ = ["DEFAULT_POLICY", "Ledger"]

Clock = Callable[[], datetime]

DEFAULT_POLICY = ReductionPolicy(trigger_messages=100, keep_messages=10)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _resolve(topic: str) -> Any:
    """An adapter named by topic (the application never imports infrastructure)."""
    try:
        return resolve_topic(topic)
    except TopicError as exc:
        raise ConfigurationError(f"cannot load the adapter {topic!r}: {exc}") from exc


class Ledger(Application[UUID]):
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
        self._listeners: list[Callable[[], None]] = []
        self._runner: Any = None
        self._followers: list[Any] = []
        merged = _resolve(STORE_ENV_TOPIC)(self.settings)
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
        self.store = ConversationStore(
            self, snapshot_interval=self.settings.snapshot_interval, on_saved=self._saved
        )
        self.counters = TokenCounters(_resolve(TOKEN_COUNTER_TOPIC), fixed=token_counter)
        self.summary_service = SummaryService(
            self.store,
            self.counters,
            self.settings,
            clock=self._clock,
            summarizer=summarizer,
            build=self._build_summarizer,
        )
        self.audit = Audit(self, self.store)

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

            self._runner = SummarizationRunner(self, self.summarizer)
            self._runner.start()

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

    def _saved(self) -> None:
        for listener in self._listeners:
            listener()

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
        check_text(system_prompt, "system_prompt", optional=True)
        check_text(model, "model", empty=False)
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
            self.store.create(conversation)
        except IntegrityError:
            raise DuplicateConversationError(
                "a conversation with this id already exists", conversation_id=cid
            ) from None
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
            return self.store.client_position(conversation_id, client_message_id)

        return self.store.execute(conversation_id, command, on_conflict=on_conflict)

    def extend(
        self, conversation_id: UUID, messages: Iterable[Message | dict[str, Any]]
    ) -> list[int]:
        """Append several messages atomically (one transaction); returns their positions."""
        if isinstance(messages, str | bytes | dict | Message) or not isinstance(messages, Iterable):
            raise InvalidArgumentError(
                "messages must be a list of messages", argument="messages", value=shown(messages)
            )
        msgs = [Message.from_openai(m) for m in messages]
        if not msgs:
            return []

        def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
            return [self._append_to(conversation, m, None) for m in msgs], []

        return self.store.execute(conversation_id, command)

    def _append_to(
        self, conversation: Conversation, message: Message, client_message_id: str | None
    ) -> int:
        conversation.check_message(message)
        tokens, placeholder_tokens = self.counters.message_cost(conversation, message)
        return conversation.append(
            message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            client_message_id=client_message_id,
            at=self._clock(),
        )

    def change_policy(self, conversation_id: UUID, policy: ReductionPolicy) -> bool:
        """Adopt a new reduction policy from now on; False if it is the same."""
        if not isinstance(policy, ReductionPolicy):
            raise ConfigurationError("policy must be a ReductionPolicy")
        return self.store.execute(
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

        self.store.execute(conversation_id, command)

    # ------------------------------------------------------- Responses items

    def append_items(self, conversation_id: UUID, items: Iterable[dict[str, Any]]) -> list[int]:
        """Append Responses-format items (the Agents SDK's and the Responses API's) in one
        transaction; returns the positions of the chat messages they became."""
        return items_module.append_items(self, conversation_id, items)

    def context_items(
        self,
        conversation_id: UUID,
        *,
        version: int | None = None,
        summary_role: SummaryRole = "system",
    ) -> list[dict[str, Any]]:
        """The working memory as Responses items (the stored items, verbatim, with the
        summary as a message item of ``summary_role`` and placeholders for old outputs)."""
        return items_module.context_items(self, conversation_id, version=version, summary_role=summary_role)

    def transcript_items(self, conversation_id: UUID) -> list[dict[str, Any]]:
        """Every item ever appended, oldest first (chat messages converted to items)."""
        return items_module.transcript_items(self, conversation_id)

    # ---------------------------------------------------------------- summaries

    def pending_summary(self, conversation_id: UUID) -> SummaryRequest | None:
        """The summarization the conversation waits for, as a summarizer request."""
        return self.summary_service.pending_summary(conversation_id)

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """Record ``result`` for ``request``'s range. Raises ``StaleSummaryError`` if
        the range is no longer pending, ``SummaryQualityError`` if the gate fails."""
        self.summary_service.record_summary(request, result)

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
        return self.summary_service.record_failure(
            request,
            kind=kind,
            error=error,
            retryable=retryable,
            called_provider=called_provider,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )

    # ------------------------------------------------------------------ queries

    def context(self, conversation_id: UUID, *, version: int | None = None) -> list[dict[str, Any]]:
        """What the model is sent next (or was sent at aggregate ``version``)."""
        return self.working_memory(conversation_id, version=version).messages

    def working_memory(self, conversation_id: UUID, *, version: int | None = None) -> WorkingMemory:
        """The context and its token cost read together (a summary landing in the
        background cannot fall between them)."""

        def read(conversation: Conversation) -> WorkingMemory:
            messages, tokens = conversation.working_memory()
            return WorkingMemory(
                messages=[m.to_openai() for m in messages], tokens=tokens, version=conversation.version
            )

        if version is not None:
            return read(self.conversation(conversation_id, version=version))
        return self.store.read(conversation_id, read)

    def conversation(self, conversation_id: UUID, *, version: int | None = None) -> Conversation:
        """A private copy of the aggregate, as it is now or was at ``version`` (audits)."""
        if version is None:
            return self.store.copy(conversation_id)
        check_count(version, "version", minimum=1, conversation_id=conversation_id)
        return self.store.at_version(conversation_id, version)

    def totals(self, conversation_id: UUID | None = None) -> TokenTotals:
        """Token accounting for one conversation, or summed over all of them."""
        if conversation_id is not None:
            return self.store.read(conversation_id, TokenTotals.of)
        return TokenTotals.sum(
            [self.store.read(cid, TokenTotals.of) for cid in self.conversation_ids()]
        )

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        """Every message ever appended, oldest first."""
        return [
            TranscriptEntry.from_event(e)
            for e in self.store.events(conversation_id)
            if isinstance(e, MessageAppended)
        ]

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        """Every summary recorded, oldest first, with ranges and provenance."""
        return [
            SummaryInfo.from_event(e)
            for e in self.store.events(conversation_id)
            if isinstance(e, SummaryCreated)
        ]

    # -------------------------------------------------------------------- audit

    def replay(self, conversation_id: UUID) -> Iterator[AuditEvent]:
        """Every stored event of the conversation, in order, for audits."""
        return self.audit.replay(conversation_id)

    def conversation_ids(self) -> list[UUID]:
        """Ids of every conversation, in the order they were started."""
        return self.audit.conversation_ids()

    def verify(self, conversation_id: UUID | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest; report what does not match."""
        return self.audit.verify(conversation_id)

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
