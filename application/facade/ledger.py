"""The ``Ledger``: the event-sourced application that keeps conversations.

A thin façade: commands go to the ``Conversation`` aggregate through
``commands.py`` and the conversation store (``store.py``), edits through
``ledger_edits.py``, queries and audits through ``ledger_reads.py`` to ``queries.py``,
summaries through the summary service (``summary_service.py``); ``opening.py`` opens
the store, and the followers of the log (the summarization policy, read models) are
started, awaited and stopped by ``background.py``. Each collaborator takes the small port it needs,
which the ledger satisfies. ``context()`` costs O(window), not O(history), and always
shows the caller's writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any
from uuid import UUID

from eventsourcing.utils import Environment, EnvType

from contextledger.application.auditing.audit import Audit
from contextledger.application.facade.background import Background, wait_all
from contextledger.application.facade.lifecycle import Gate, Lifecycle, close_all, guard_methods
from contextledger.application.facade.opening import (
    build_summarizer,
    counter_factory,
    open_event_store,
    open_settings,
    open_shards,
    store_env,
)
from contextledger.application.facade.read_only import refuse_writes
from contextledger.application.formats.native_readable import make_readable_now
from contextledger.application.privacy.erasure import DELETE_SNAPSHOTS_TOPIC, Erasures
from contextledger.application.privacy.ledger_privacy import LedgerPrivacy
from contextledger.application.privacy.subjects import Subjects, erased_subjects_check
from contextledger.application.reading.ledger_reads import LedgerReads
from contextledger.application.reading.queries import ConversationQueries
from contextledger.application.shared.addressing import ConversationRef, name_keys_in_errors, resolve
from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.limits import DEFAULT_MODEL
from contextledger.application.shared.observability import TRACER_TOPIC, NullTracer, Tracer
from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.shared.settings import Settings, masked_url, resolve_adapter
from contextledger.application.shared.wire import ToolDefinition
from contextledger.application.storage.saving import ConversationApplication
from contextledger.application.storage.store import ConversationStore
from contextledger.application.summaries.history import HistoryCache
from contextledger.application.summaries.summary_service import SummaryService
from contextledger.application.writing.commands import DEFAULT_POLICY, ConversationCommands
from contextledger.application.writing.ledger_edits import LedgerEdits
from contextledger.domain.conversation import ConversationSnapshot, SummaryFailure
from contextledger.domain.values.messages import Message
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["DEFAULT_POLICY", "Ledger"]

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@name_keys_in_errors
class Ledger(LedgerEdits, LedgerPrivacy, LedgerReads, ConversationApplication):
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
        #: Where every event's time comes from.
        self.clock: Clock = clock or _utc_now
        #: The policy, the attached followers and the listeners of saves.
        self.background = Background()
        open_event_store(super().__init__, store_env(self.settings, env))
        self._lifecycle = Lifecycle(stop=self.background.stop, release=super().close)
        #: The gate every public method passes, for calls an integration runs on a
        #: thread of its own (``LedgerSession``): refused once closing, waited for by ``close()``.
        self.gate: Gate = self._lifecycle
        #: This store's own conversations (``store`` routes to every store's when sharded).
        self.local_store = ConversationStore(
            self,
            snapshot_interval=self.settings.snapshot_interval,
            on_saved=self.background.saved,
            deadline_seconds=self.settings.write_deadline,
        )
        self.store: ConversationStore = self.local_store
        #: One ledger per store, this one first (just this one: not sharded).
        self.shards: list[Ledger] = [self]
        self.counters = TokenCounters(counter_factory(self.settings), fixed=token_counter)
        self.summary_service = SummaryService(
            self.store,
            self.counters,
            self.settings,
            clock=self.clock,
            summarizer=summarizer,
            build=self._build_summarizer,
        )
        self.audit = Audit(self, self.store, self.counters)
        #: Spans of append, context, summarize (and the read models' rebuild).
        self.tracer: Tracer = resolve_adapter(TRACER_TOPIC)() if self.settings.tracing else NullTracer()
        #: Folds of edited conversations' logs (an edit reaching into summarized history).
        self.history_cache = HistoryCache()
        #: The data subjects of conversations (their keys: ``docs/privacy.md``).
        self.subjects = Subjects(self)
        self.local_store.erased_subjects = erased_subjects_check(self)
        self.commands = ConversationCommands(self)
        self.queries = ConversationQueries(self, self._build_summarizer)
        self.erasures = Erasures(lambda: self.shards, lambda: resolve_adapter(DELETE_SNAPSHOTS_TOPIC))
        if len(self.settings.store_urls) > 1:
            make = partial(
                Ledger, summarizer=summarizer, token_counter=token_counter, clock=self.clock, env=env
            )
            open_shards(self, [self.settings.for_store(url) for url in self.settings.store_urls[1:]], make)
        if self.settings.read_only:
            refuse_writes(self, masked_url(self.settings.database_url))

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
        With ``read_only`` nothing is created or written (``application/facade/read_only.py``).
        """
        base = open_settings(url, settings=settings, run_policy=run_policy, read_only=read_only)
        ledger = cls(base, summarizer=summarizer, token_counter=token_counter, clock=clock)
        if base.run_policy:
            ledger.start_policy()
        return ledger

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        # Only the settings configure the store: os.environ is read by Settings alone.
        return Environment(name, dict(env or {}))

    def _build_summarizer(self, kind: str) -> Summarizer:
        return build_summarizer(self.settings, kind, self.counter_for)

    def start_policy(self) -> None:
        """Run the summarization policy in a background thread of this process."""
        self.background.start_policy(self, lambda: self.summarizer, self.tracer)
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
        self.background.attach(follower)

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
        self.background.add_listener(listener, topics)

    def add_event_listener(self, listener: Callable[[Sequence[Any]], None]) -> None:
        """Call ``listener`` with the events of every save of this process, before the
        listeners of ``add_listener``."""
        self.background.add_event_listener(listener)

    # ----------------------------------------------------------------- commands

    def start(
        self,
        system_prompt: str | None = None,
        *,
        model: str = DEFAULT_MODEL,
        policy: ReductionPolicy | None = None,
        conversation_id: ConversationRef | None = None,
        key: str | None = None,
        tools: Sequence[ToolDefinition] | None = None,
        subject: str | None = None,
    ) -> UUID:
        """Start a conversation; returns its id.

        ``key`` is the application's own name for it (``"chat-7"``): the id is then
        ``uuid5(KEY_NAMESPACE, key)`` and every call takes the key where it takes the
        id. ``tools`` are the tool definitions sent with every model call (see
        ``tools()``); their tokens count in the context's cost. ``subject`` names the
        data subject the conversation is about (``"user-42"``, at most 200 characters):
        its events are encrypted under that subject's key from the first one, and
        erasing the subject shreds them (needs ``key_scope="subject"``, the default).
        Without it the conversation is its own subject.
        """
        return self.commands.start(
            system_prompt,
            model=model,
            policy=policy,
            conversation_id=conversation_id,
            key=key,
            tools=tools,
            subject=subject,
        )

    def get_or_start(self, key: str, **start_args: Any) -> UUID:
        """The id of the conversation with this key, started with ``start_args`` if it
        does not exist yet. Safe under concurrent callers, in any number of processes:
        the id derives from the key, so exactly one start can be stored. An existing
        conversation given another ``subject`` than its own is ``InvalidArgumentError``."""
        return self.commands.get_or_start(key, self.start, start_args)

    def append(
        self,
        conversation_id: ConversationRef,
        message: Message | dict[str, Any] | Any,
        *,
        client_message_id: str | None = None,
        hidden: bool = False,
    ) -> int:
        """Append one message; returns its position (the first one's, when the message
        stands for several chat messages).

        ``message`` is an OpenAI-format dict, a ``Message``, the openai SDK's
        ``ChatCompletionMessage`` (or its ``model_dump()``), or a whole
        ``ChatCompletion``: then its first choice's message is appended and the usage
        the provider reported is recorded against the conversation, in one transaction.
        An Anthropic message param or ``anthropic.types.Message`` reply, a Gemini
        ``Content`` (object or dict) or ``GenerateContentResponse`` is decoded into the
        chat messages it stands for (an Anthropic user turn with two ``tool_result``
        blocks is two ``tool`` messages), appended together with the original that gives
        it back byte for byte (``context(format=...)``), in one transaction; a reply's
        usage is recorded as a completion's is. A Gemini ``function_response`` without
        an id answers the oldest open call of its name.
        With ``client_message_id``, a retried append of the same id and message is a
        no-op that returns the original position; the id reused for another message
        raises ``IdempotencyConflictError`` (nothing is written). ``hidden=True``: a tool
        result the framework filtered from the model (shown, and summarized, as its placeholder).
        """
        return self.commands.append(conversation_id, message, client_message_id, hidden)

    def extend(
        self,
        conversation_id: ConversationRef,
        messages: Iterable[Message | dict[str, Any] | Any],
        *,
        client_message_ids: Sequence[str | None] | None = None,
    ) -> list[int]:
        """Append several messages atomically (one transaction); returns the positions of
        every chat message appended (an Anthropic or Gemini message may stand for
        several). ``client_message_ids`` (one per message given, or None) make a retry a
        no-op, as in ``append``. Usage that replies report is not recorded here."""
        return self.commands.extend(conversation_id, messages, client_message_ids)

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
        return self.commands.close_open_tool_calls(conversation_id, content)

    def change_policy(self, conversation_id: ConversationRef, policy: ReductionPolicy) -> bool:
        """Adopt a new reduction policy from now on; False if it is the same."""
        return self.commands.change_policy(conversation_id, policy)

    def change_tools(self, conversation_id: ConversationRef, tools: Sequence[ToolDefinition] | None) -> bool:
        """Send these tool definitions from now on (``ToolsChanged``); False if unchanged."""
        return self.commands.change_tools(conversation_id, tools)

    def record_usage(
        self,
        conversation_id: ConversationRef,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        cache_read_tokens: int | None = None,
        cache_creation_tokens: int | None = None,
    ) -> None:
        """Record the provider's reported usage (cached input included) for the latest model call."""
        self.commands.record_usage(
            conversation_id, prompt_tokens, completion_tokens, cache_read_tokens, cache_creation_tokens
        )

    # ---------------------------------------------------------------- summaries

    def pending_summary(self, conversation_id: ConversationRef) -> SummaryRequest | None:
        """The summarization the conversation waits for, as a summarizer request.

        Its content is about to go to a summarizer: with per-subject keys the key table
        itself is read first, so a subject another process erased raises
        ``ConversationErasedError`` here even while this process's cached key still
        counts it as live (a fork of an erased source gives its remainder's range)."""
        cid = resolve(conversation_id)
        request = self.summary_service.pending_summary(cid)
        if request is not None and self.subjects.learn_erasures(cid):
            # Its content goes out to a summarizer next: another process erased a subject
            # of it since this one cached the key. Read again: it raises, or a fork's
            # remainder gives its own range.
            request = self.summary_service.pending_summary(cid)
        if request is not None and request.previous_summary is not None and make_readable_now(self, cid):
            # It extends an opaque native summary: with the readable text made just now.
            request = self.summary_service.pending_summary(cid)
        return request

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """Record ``result`` for ``request``'s range. Raises ``StaleSummaryError`` if
        the range is no longer pending, ``SummaryQualityError`` if the gate fails."""
        self.summary_service.record_summary(request, result)

    def record_summary_failure(self, request: SummaryRequest, failure: SummaryFailure) -> int:
        """Record a failed attempt at ``request``'s range; returns the attempt number."""
        return self.summary_service.record_failure(request, failure)

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Block until the summarization policy has caught up with the log and has no
        summary in flight (True), or ``timeout`` seconds pass (False)."""
        if self.shards[0] is self and len(self.shards) > 1:
            return wait_all([s.background for s in self.shards], timeout)
        return self.background.wait_idle(timeout)


# Every public method refuses calls once close() has begun (LedgerClosedError).
guard_methods(
    Ledger,
    module_prefix="contextledger.",
    exempt=(
        "close",
        "construct_env",
        "construct_repository",
        "add_listener",
        "add_event_listener",
        "counter_for",
        "summarizer_model_name",
        "save_conversations",
    ),
)
