"""``AsyncLedger``: the ``Ledger``'s methods as coroutines, for asyncio services.

    async with AsyncLedger.open("postgresql://...") as ledger:
        cid = await ledger.get_or_start("chat-7", system_prompt="You are helpful.")
        await ledger.append(cid, {"role": "user", "content": "hi"})
        messages = await ledger.context(cid)

Each call runs the synchronous ledger in a bounded thread pool of this ledger's own
(``max_workers``, 8 by default), so the event loop never blocks on the store, on token
counting or on a conversation's lock. The persistence library underneath
(eventsourcing) is synchronous; its SQLite and psycopg recorders hold connections
per thread, so a pool of threads is its natural concurrency, and at most
``max_workers`` connections are used by the pool. The summarization runner keeps
running in its own thread, as with the ``Ledger``.

``aclose()`` (or leaving ``async with``) refuses new calls at once with
``LedgerClosedError``, lets the calls in flight finish (up to ``timeout`` seconds,
``Settings.close_timeout``; those still queued in the pool are refused), then closes
the ledger; closing again does nothing.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, cast, overload
from uuid import UUID

from contextledger.application.auditing.whatif_results import WhatIfReport
from contextledger.application.facade.ledger import Clock, Ledger
from contextledger.application.facade.lifecycle import check_timeout
from contextledger.application.privacy.erasure import ErasureReport
from contextledger.application.privacy.receipts import ErasureReceipt, ReceiptCheck
from contextledger.application.privacy.subject_export import SubjectExport
from contextledger.application.shared.addressing import ConversationRef
from contextledger.application.shared.limits import DEFAULT_MODEL
from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.shared.results import (
    AuditEvent,
    SummaryInfo,
    TokenTotals,
    TranscriptEntry,
    VerifyReport,
    WorkingMemory,
)
from contextledger.application.shared.settings import Settings
from contextledger.application.shared.wire import ContextMessage, ToolDefinition
from contextledger.domain.values.errors import ConfigurationError, LedgerClosedError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["DEFAULT_MAX_WORKERS", "AsyncLedger"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_MAX_WORKERS = 8


class AsyncLedger:
    """The ``Ledger`` for asyncio: the same methods, awaited."""

    def __init__(
        self,
        ledger: Ledger | Callable[[], Ledger],
        *,
        max_workers: int = DEFAULT_MAX_WORKERS,
    ) -> None:
        """Wrap a ``Ledger`` (or a function that opens one on first use, in the pool)."""
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ConfigurationError("max_workers must be a positive integer", setting="max_workers")
        self._ledger = ledger if isinstance(ledger, Ledger) else None
        self._opener = None if isinstance(ledger, Ledger) else ledger
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="contextledger")
        self.max_workers = max_workers
        self._closed = False

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
        max_workers: int = DEFAULT_MAX_WORKERS,
        read_only: bool | None = None,
    ) -> AsyncLedger:
        """An async ledger on ``url`` (as ``Ledger.open``). The store is opened in the
        thread pool by ``async with`` (or ``await ledger.start_up()``)."""
        opener = functools.partial(
            Ledger.open,
            url,
            summarizer=summarizer,
            token_counter=token_counter,
            settings=settings,
            clock=clock,
            run_policy=run_policy,
            read_only=read_only,
        )
        return cls(opener, max_workers=max_workers)

    @property
    def sync(self) -> Ledger:
        """The synchronous ledger underneath (for code that runs in a thread of its own)."""
        if self._ledger is None:
            if self._closed:
                raise LedgerClosedError("the async ledger is closed")
            raise ConfigurationError("the async ledger is not open yet: use `async with`")
        return self._ledger

    async def start_up(self) -> AsyncLedger:
        """Open the store (once); ``async with`` calls it."""
        if self._ledger is None:
            assert self._opener is not None
            ledger = await self.run(self._opener)
            if self._closed:  # closed while it opened
                await asyncio.to_thread(ledger.close)
                raise LedgerClosedError("the async ledger is closed")
            self._ledger = ledger
        elif self._closed:
            raise LedgerClosedError("the async ledger is closed")
        return self

    async def aclose(self, timeout: float | None = None) -> None:
        """Refuse new calls (``LedgerClosedError``), let those in flight finish (up to
        ``timeout`` seconds, ``Settings.close_timeout``), then close the ledger (its
        policy, followers and store) and the thread pool. Closing again does nothing."""
        if timeout is not None:
            check_timeout(timeout)
        if self._closed:
            return
        self._closed = True
        try:
            if self._ledger is not None:
                # Not in the pool: its threads may all be busy with the calls in flight.
                await asyncio.to_thread(self._ledger.close, timeout)
        finally:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncLedger:
        return await self.start_up()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def run(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run any synchronous function (e.g. a method of ``sync``) in the pool."""
        if self._closed:
            raise LedgerClosedError("the async ledger is closed")
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, functools.partial(function, *args, **kwargs))
        except RuntimeError:
            if self._closed:  # the pool shut down since the check above
                raise LedgerClosedError("the async ledger is closed") from None
            raise
        return await future

    # ----------------------------------------------------------------- commands

    async def start(
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
        """Start a conversation; returns its id (see ``Ledger.start``)."""
        return await self.run(
            self.sync.start,
            system_prompt,
            model=model,
            policy=policy,
            conversation_id=conversation_id,
            key=key,
            tools=tools,
            subject=subject,
        )

    async def get_or_start(self, key: str, **start_args: Any) -> UUID:
        """The id of the conversation with this key, started if it does not exist."""
        return await self.run(self.sync.get_or_start, key, **start_args)

    async def append(
        self,
        conversation_id: ConversationRef,
        message: Message | dict[str, Any] | Any,
        *,
        client_message_id: str | None = None,
        hidden: bool = False,
    ) -> int:
        """Append one message (an SDK message or completion, an Anthropic or Gemini
        message or reply); returns its position (the first one's: see ``Ledger.append``)."""
        return await self.run(
            self.sync.append, conversation_id, message, client_message_id=client_message_id, hidden=hidden
        )

    async def extend(
        self,
        conversation_id: ConversationRef,
        messages: Iterable[Message | dict[str, Any] | Any],
        *,
        client_message_ids: Sequence[str | None] | None = None,
    ) -> list[int]:
        """Append several messages atomically; returns the positions of every chat
        message appended (see ``Ledger.extend``)."""
        return await self.run(
            self.sync.extend, conversation_id, messages, client_message_ids=client_message_ids
        )

    async def change_policy(self, conversation_id: ConversationRef, policy: ReductionPolicy) -> bool:
        """Adopt a new reduction policy from now on; False if it is the same."""
        return await self.run(self.sync.change_policy, conversation_id, policy)

    async def change_tools(
        self, conversation_id: ConversationRef, tools: Sequence[ToolDefinition] | None
    ) -> bool:
        """Send these tool definitions from now on; False if unchanged."""
        return await self.run(self.sync.change_tools, conversation_id, tools)

    async def record_usage(
        self,
        conversation_id: ConversationRef,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        cache_read_tokens: int | None = None,
        cache_creation_tokens: int | None = None,
    ) -> None:
        """Record the provider's reported usage for the latest model call
        (``prompt_tokens`` includes the cache reads and writes given)."""
        await self.run(
            self.sync.record_usage,
            conversation_id,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_creation_tokens=cache_creation_tokens,
        )

    async def close_open_tool_calls(
        self, conversation_id: ConversationRef, *, content: str | None = None
    ) -> list[int]:
        """Answer the open tool-call group's unanswered calls with an error result."""
        if content is None:
            return await self.run(self.sync.close_open_tool_calls, conversation_id)
        return await self.run(self.sync.close_open_tool_calls, conversation_id, content=content)

    # -------------------------------------------------------------------- edits

    async def retract(
        self, conversation_id: ConversationRef, position: int, reason: str | None = None
    ) -> list[int]:
        """Retract a message (its whole tool-call group) from the working memory."""
        return await self.run(self.sync.retract, conversation_id, position, reason)

    async def edit(
        self, conversation_id: ConversationRef, position: int, message: Message | dict[str, Any]
    ) -> bool:
        """Replace the message at ``position`` by a new version."""
        return await self.run(self.sync.edit, conversation_id, position, message)

    async def rewind(self, conversation_id: ConversationRef, position: int) -> list[int]:
        """Retract everything after ``position``."""
        return await self.run(self.sync.rewind, conversation_id, position)

    async def pop(self, conversation_id: ConversationRef) -> list[dict[str, Any]]:
        """Retract the newest message or tool-call group and return it."""
        return await self.run(self.sync.pop, conversation_id)

    async def clear(self, conversation_id: ConversationRef) -> list[int]:
        """Retract everything but the system prompt."""
        return await self.run(self.sync.clear, conversation_id)

    async def change_system_prompt(self, conversation_id: ConversationRef, text: str | None) -> bool:
        """Replace the system prompt from now on."""
        return await self.run(self.sync.change_system_prompt, conversation_id, text)

    async def fork(
        self,
        conversation_id: ConversationRef,
        version: int | None = None,
        key: str | None = None,
        subject: str | None = None,
    ) -> UUID:
        """A new conversation with this one's history up to ``version`` (of the
        source's data subject unless given another)."""
        return await self.run(self.sync.fork, conversation_id, version, key, subject)

    async def idle_conversations(self, days: float, *, now: datetime | None = None) -> list[UUID]:
        """The conversations idle for ``days`` (see ``Ledger.idle_conversations``)."""
        return await self.run(self.sync.idle_conversations, days, now=now)

    async def erase(
        self,
        subject_or_conversation: str | UUID | None = None,
        reason: str | None = None,
        *,
        subject: str | None = None,
        conversation: ConversationRef | None = None,
        force: bool = False,
    ) -> ErasureReport:
        """Erase a data subject's conversations (see ``Ledger.erase``)."""
        return await self.run(
            functools.partial(
                self.sync.erase,
                subject_or_conversation,
                reason,
                subject=subject,
                conversation=conversation,
                force=force,
            )
        )

    async def check_receipt(self, receipt: ErasureReceipt | dict[str, Any]) -> ReceiptCheck:
        """Check an erasure's receipt against the store (see ``Ledger.check_receipt``)."""
        return await self.run(self.sync.check_receipt, receipt)

    async def export_subject(self, subject: str) -> SubjectExport:
        """Everything held about a data subject (see ``Ledger.export_subject``)."""
        return await self.run(self.sync.export_subject, subject)

    async def subject_of(self, conversation_id: ConversationRef) -> str:
        """The conversation's data subject (see ``Ledger.subject_of``)."""
        return await self.run(self.sync.subject_of, conversation_id)

    async def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """Record a summarizer's result for the request's range (see ``Ledger.record_summary``)."""
        await self.run(self.sync.record_summary, request, result)

    # ------------------------------------------------------------------ queries

    @overload
    async def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: Literal["openai"] = "openai",
        cache: Literal[False] = False,
        summary: Literal["system"] = "system",
    ) -> list[ContextMessage]: ...

    @overload
    async def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: Literal["responses"],
        cache: Literal[False] = False,
        summary: Literal["system", "user"] = "system",
    ) -> dict[str, Any]: ...

    @overload
    async def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: Literal["anthropic", "gemini"],
        cache: bool = False,
        summary: Literal["system", "user", "assistant"] = "system",
    ) -> dict[str, Any]: ...

    async def context(
        self,
        conversation_id: ConversationRef,
        *,
        version: int | None = None,
        format: str = "openai",
        cache: bool = False,
        summary: str = "system",
    ) -> list[ContextMessage] | dict[str, Any]:
        """What the model is sent next (or was sent at ``version``), in ``format``
        (see ``Ledger.context``)."""
        if format == "openai" and cache is False and summary == "system":
            return await self.run(self.sync.context, conversation_id, version=version)
        render = cast("Callable[..., list[ContextMessage] | dict[str, Any]]", self.sync.context)
        rendered = await self.run(
            render, conversation_id, version=version, format=format, cache=cache, summary=summary
        )
        return rendered

    async def tools(
        self, conversation_id: ConversationRef, *, version: int | None = None
    ) -> list[ToolDefinition]:
        """The tool definitions to send with the next model call."""
        return await self.run(self.sync.tools, conversation_id, version=version)

    async def working_memory(
        self, conversation_id: ConversationRef, *, version: int | None = None
    ) -> WorkingMemory:
        """The context and its token cost, read together."""
        return await self.run(self.sync.working_memory, conversation_id, version=version)

    async def totals(self, conversation_id: ConversationRef | None = None) -> TokenTotals:
        """Token accounting for one conversation, or summed over all of them."""
        return await self.run(self.sync.totals, conversation_id)

    async def transcript(self, conversation_id: ConversationRef) -> list[TranscriptEntry]:
        """Every message ever appended, oldest first."""
        return await self.run(self.sync.transcript, conversation_id)

    async def summaries(self, conversation_id: ConversationRef) -> list[SummaryInfo]:
        """Every summary recorded, oldest first."""
        return await self.run(self.sync.summaries, conversation_id)

    async def pending_summary(self, conversation_id: ConversationRef) -> SummaryRequest | None:
        """The summarization the conversation waits for."""
        return await self.run(self.sync.pending_summary, conversation_id)

    async def replay(self, conversation_id: ConversationRef) -> list[AuditEvent]:
        """Every stored event of the conversation, in order."""
        return await self.run(lambda: list(self.sync.replay(conversation_id)))

    async def conversation_ids(self) -> list[UUID]:
        """Ids of every conversation, in the order they were started."""
        return await self.run(self.sync.conversation_ids)

    async def verify(self, conversation_id: ConversationRef | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest."""
        return await self.run(self.sync.verify, conversation_id)

    async def simulate(
        self,
        policy: ReductionPolicy | Mapping[str, Any],
        conversations: Iterable[ConversationRef] | ConversationRef | None = None,
        summarizer: Summarizer | str | None = None,
        *,
        budget_calls: int | None = None,
        prices: Mapping[str, Any] | None = None,
    ) -> WhatIfReport:
        """What ``policy`` would have sent, against what the log recorded (no writes)."""
        return await self.run(
            self.sync.simulate, policy, conversations, summarizer, budget_calls=budget_calls, prices=prices
        )

    async def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Wait (in the pool) until the policy and followers have caught up."""
        return await self.run(self.sync.wait_idle, timeout)
