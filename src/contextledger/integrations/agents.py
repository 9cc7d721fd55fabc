"""contextledger as an OpenAI Agents SDK session: bounded, summarized, auditable memory.

    from agents import Agent, Runner
    from contextledger.integrations.agents import LedgerSession

    session = LedgerSession("user-42", "sqlite:///memory.db",
                            policy=cl.ReductionPolicy(trigger_messages=40, keep_messages=10))
    await Runner.run(agent, "hi", session=session)     # instead of SQLiteSession("user-42", "memory.db")

``get_items()`` hands the SDK the *working memory* (the summary, then the recent items
verbatim, old tool outputs as placeholders), not the whole history. Under
``OpenAIResponsesCompactionSession(underlying_session=LedgerSession(...))`` a
compaction is recorded as a native summary (``SummaryInfo.native == "responses"``)
through the SDK's atomic replacement hook, never as a clear and re-added items; the whole history
stays in the ledger's log (``ledger.transcript_items``), and what any run was sent can
be re-derived with ``ledger.context_items(cid, version=v)``. Summaries run in the
background, as everywhere in contextledger.

The session's calls run on a thread of its own (``_Worker``: one long-lived thread
per session, fed by a plain queue, answering through ``loop.call_soon_threadsafe``),
in the order they were made, as ``asyncio.to_thread`` would run them but without an
executor's bookkeeping per call. One exception: on a store whose reads are local
(a SQLite file, ``memory://``), ``get_items()`` reads in place, on the caller's
thread, when no call of the session is queued or running and the read needs no
wait (the conversation cached and its lock free) and no full rendering (only new
entries since the last one); it still checks the log for newer events first, and
otherwise goes to the thread as before. Each call passes the ledger's gate
(``Ledger.gate``): after ``Ledger.close()`` a call is refused (``LedgerClosedError``).

Needs the ``agents`` extra (``pip install contextledger[agents]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar, cast, get_args

from agents.memory.session_settings import SessionSettings

from contextledger.application.facade.ledger import Ledger
from contextledger.application.facade.session_items import (
    ABANDONED_CALL_OUTPUT,
    append_session_items,
    compact_session,
    pop_session_item,
    session_items,
    session_items_now,
)
from contextledger.application.formats.items import ItemsView, SummaryRole
from contextledger.domain.values.errors import InvalidArgumentError, InvalidArgumentTypeError
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.validation import shown
from contextledger.integrations._keys import SessionBinding

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["ABANDONED_CALL_OUTPUT", "LedgerSession"]

T = TypeVar("T")

#: Seconds a session's worker thread waits for the next call before it ends (the
#: next call starts another).
WORKER_IDLE_SECONDS = 5.0


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the loop: hand the call's outcome to its awaiting task (unless cancelled)."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _Worker:
    """One thread running a session's blocking calls in order. A call is a plain queue
    entry; its outcome reaches the awaiting task through ``call_soon_threadsafe``. As
    with ``asyncio.to_thread``: the call runs in a copy of the caller's context; a
    call cancelled before the thread takes it up does not run, one already running
    finishes (its outcome is dropped). The thread ends after ``WORKER_IDLE_SECONDS``
    without calls."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False
        #: Calls queued or running (counted in by ``run``, out by the thread once a
        #: call has ended, before its outcome is handed over).
        self.pending = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = (loop, future, contextvars.copy_context(), fn, args)
        with self._lock:
            self.pending += 1
            self._calls.put(call)
            if not self._running:
                self._running = True
                threading.Thread(target=self._serve, name="contextledger-session", daemon=True).start()
        return await future

    def _serve(self) -> None:
        calls = self._calls
        while True:
            try:
                loop, future, context, fn, args = calls.get(timeout=WORKER_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if calls.empty():
                        self._running = False
                        return
                continue
            if future.cancelled():  # cancelled while it waited: not run
                self._ended()
                continue
            result, error = None, None
            try:
                result = context.run(fn, *args)
            except BaseException as exc:
                error = exc
            self._ended()
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
                loop.call_soon_threadsafe(_deliver, future, result, error)
            del loop, future, context, fn, args, result, error

    def _ended(self) -> None:
        with self._lock:
            self.pending -= 1


def _plain(item: Any) -> dict[str, Any]:
    """An SDK item (a TypedDict, or a pydantic model from a response) as a plain dict."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return cast(dict[str, Any], dump(exclude_unset=True, mode="json"))
    raise InvalidArgumentError(
        f"a session item must be a dict or a pydantic model, not {type(item).__name__}",
        argument="items",
        value=shown(item),
    )


def _local_reads(ledger: Ledger) -> bool:
    """Whether a read of ``ledger`` is local and brief (one store, a SQLite file or
    ``memory://``), so that ``get_items()`` may run it in place."""
    urls = ledger.settings.store_urls
    return len(urls) == 1 and urls[0].split(":", 1)[0].lower() in ("sqlite", "memory")


def _store_url(db: str | os.PathLike[str]) -> str:
    """The ledger URL for what ``SQLiteSession`` takes as ``db_path`` (or a URL)."""
    text = os.fspath(db)
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(
            "the database must be a non-empty URL or SQLite file path", argument="db", value=shown(db)
        )
    if text == ":memory:":
        return "memory://"
    return text if "://" in text else f"sqlite:///{text}"


def _settings(given: Any) -> SessionSettings:
    """``given`` checked as the SDK's own sessions check it: what they refuse with
    ``TypeError`` (an unknown field, not a SessionSettings or dict) is an
    ``InvalidArgumentTypeError``, a ``TypeError`` too."""
    if given is None:
        return SessionSettings()
    if not isinstance(given, SessionSettings | dict):
        raise InvalidArgumentTypeError(
            "session_settings must be a SessionSettings, a dict or None",
            argument="session_settings",
            value=shown(given),
        )
    try:
        return SessionSettings().resolve(given)
    except TypeError as exc:  # the SDK's: "Unknown session settings: limitt"
        raise InvalidArgumentTypeError(
            f"session_settings are not valid: {exc}".splitlines()[0],
            argument="session_settings",
            value=shown(given),
        ) from None
    except Exception as exc:  # the SDK's pydantic validation of the values
        raise InvalidArgumentError(
            f"session_settings are not valid: {exc}".splitlines()[0],
            argument="session_settings",
            value=shown(given),
        ) from None


class LedgerSession(SessionBinding):
    """An Agents SDK ``Session`` kept in a contextledger ``Ledger``.

    Constructed as ``SQLiteSession`` is, from a session id and where to keep it: a
    shared ``Ledger`` (never closed here), a database URL (``sqlite:///chat.db``,
    ``postgresql://...``, ``memory://``) or a SQLite file path (``chat.db``;
    ``":memory:"`` is ``memory://``), positionally, as ``url=`` or as
    ``SQLiteSession``'s ``db_path=``; a URL or path is
    opened here and closed by ``close()``. Every argument is checked before anything is
    opened. The first use starts the conversation with ``policy``, ``model`` and
    ``system_prompt`` (usually None: the agent's instructions are sent by the SDK). The
    summary reaches the model as a message item of ``summary_role``. ``subject`` names
    the data subject the conversation is about (``Ledger.start``'s ``subject``).
    ``session_settings.limit`` (a ``SessionSettings`` or a dict) caps what
    ``get_items()`` returns, as in the SDK's own sessions. A new item after function
    calls that were never answered (an abandoned approval) answers them first with
    ``abandoned_call_output``, an error output.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        db: Ledger | str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        db_path: str | os.PathLike[str] | None = None,
        policy: ReductionPolicy | None = None,
        model: str = "gpt-4o-mini",
        system_prompt: str | None = None,
        summary_role: SummaryRole = "system",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        abandoned_call_output: str = ABANDONED_CALL_OUTPUT,
        hide_output: Callable[[dict[str, Any]], bool] | None = None,
        subject: str | None = None,
    ) -> None:
        settings = _settings(session_settings)
        if summary_role not in get_args(SummaryRole):
            raise InvalidArgumentError(
                f"summary_role must be one of {', '.join(get_args(SummaryRole))}",
                argument="summary_role",
                value=shown(summary_role),
            )
        if policy is not None and not isinstance(policy, ReductionPolicy):
            raise InvalidArgumentError(
                "policy must be a ReductionPolicy or None", argument="policy", value=shown(policy)
            )
        if not isinstance(abandoned_call_output, str) or not abandoned_call_output.strip():
            raise InvalidArgumentError(
                "abandoned_call_output must be a non-empty string", argument="abandoned_call_output"
            )
        if url is not None and not isinstance(url, str):
            raise InvalidArgumentError("url must be a string", argument="url", value=shown(url))
        if db_path is not None:  # SQLiteSession's keyword
            if db is not None or url is not None:
                raise InvalidArgumentError("pass one of db, db_path and url", argument="db_path")
            if not isinstance(db_path, str | os.PathLike):
                raise InvalidArgumentError(
                    "db_path must be a SQLite file path or a URL", argument="db_path", value=shown(db_path)
                )
            db = db_path
        ledger: Ledger | None = None
        if isinstance(db, Ledger):
            ledger = db
        elif isinstance(db, str | os.PathLike):
            if url is not None:
                raise InvalidArgumentError("pass a database or a url, not both", argument="url")
            url = _store_url(db)
        elif db is not None:
            raise InvalidArgumentError(
                "the second argument must be a Ledger, a database URL or a SQLite file path, "
                f"not {type(db).__name__}",
                argument="db",
                value=shown(db),
            )
        super().__init__(
            session_id,
            ledger,
            url=url,
            policy=policy,
            model=model,
            system_prompt=system_prompt,
            subject=subject,
        )
        self.session_settings = settings
        self.summary_role: SummaryRole = summary_role
        self.abandoned_call_output = abandoned_call_output
        #: Which ``function_call_output`` items were hidden from the model (the test a
        #: ``RunConfig(call_model_input_filter=...)`` applies): stored hidden.
        self.hide_output = hide_output
        #: The last rendering of ``get_items()``, handed out again while the
        #: conversation stays as it was.
        self._view = ItemsView()
        self._worker = _Worker()
        self._reads_in_place = _local_reads(self.ledger)

    # --------------------------------------------------------- Session protocol

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The working memory as input items, then any calls still waiting for their
        outputs (as a run that stopped for an approval leaves them); with ``limit``
        (default ``session_settings.limit``), the newest ``limit`` of those items."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        found = self._items_in_place() if self._reads_in_place and not self._worker.pending else None
        items = found if found is not None else await self._worker.run(self._gated, self._items)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast("list[TResponseInputItem]", items)

    async def add_items(
        self, items: list[TResponseInputItem], *, hidden_call_ids: Collection[str] = ()
    ) -> None:
        """Append ``items`` to the log (one transaction). Function calls left open by
        an earlier run are answered first, with ``abandoned_call_output``, when the
        first of these items is not one of their outputs. The outputs of
        ``hidden_call_ids``, and those ``hide_output`` picks, are stored as hidden from
        the model: the context shows their placeholder, the summarizer too."""
        plain = [_plain(i) for i in items]
        if plain:
            await self._worker.run(self._gated, self._add, plain, hidden_call_ids)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None when the session is empty)."""
        return cast("TResponseInputItem | None", await self._worker.run(self._gated, self._pop_item))

    async def clear_session(self) -> None:
        """Forget every item of this session (the log keeps them for audits)."""
        await self._worker.run(self._gated, self._clear)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The hook ``OpenAIResponsesCompactionSession`` replaces the whole history
        through, in one step, after ``responses.compact``: the compacted items (user
        messages and one opaque ``compaction`` item) are recorded as a native summary
        of every item so far, which stay in the log, none retracted; ``get_items()``
        then gives the compacted items and what follows them. False (nothing written,
        the SDK clears and re-adds instead) for items that are not such an output."""
        plain = [_plain(i) for i in items]
        return await self._worker.run(self._gated, self._compact, plain)

    # -------------------------------------------------------------- sync side

    def context_items(self, *, version: int | None = None) -> list[dict[str, Any]]:
        """The working memory as items, now or at aggregate ``version`` (audits)."""
        return self.ledger.context_items(
            self.conversation_id, version=version, summary_role=self.summary_role
        )

    def transcript_items(self) -> list[dict[str, Any]]:
        """Every item this session's conversation ever held, oldest first."""
        return self.ledger.transcript_items(self.conversation_id)

    def version(self) -> int:
        """The conversation's current aggregate version (pairs with ``context_items``)."""
        return self.ledger.conversation(self.conversation_id).version  # a read that never writes

    # The edit commands keep the log whole: ``pop`` and ``clear`` retract, they never
    # delete. ``pop_item`` takes exactly one item: when it belongs to a tool-call group,
    # the rest of the group is appended again (contextledger.application.facade.session_items).

    def _gated(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` through the ledger's gate: refused once the ledger is closing,
        counted in flight until it returns (``close()`` waits for it)."""
        gate = self.ledger.gate
        gate.enter()
        try:
            return fn(*args)
        finally:
            gate.leave()

    def _compact(self, items: list[dict[str, Any]]) -> bool:
        return compact_session(self.ledger, self.conversation_id, items)

    def _add(self, items: list[dict[str, Any]], hidden_call_ids: Collection[str] = ()) -> None:
        hidden = set(hidden_call_ids)
        if self.hide_output is not None:
            hidden.update(
                str(i.get("call_id"))
                for i in items
                if i.get("type") == "function_call_output" and self.hide_output(i)
            )
        append_session_items(
            self.ledger,
            self.conversation_id,
            items,
            abandoned_output=self.abandoned_call_output,
            hidden_call_ids=hidden,
        )

    def _items_in_place(self) -> list[dict[str, Any]] | None:
        """``_items`` on the caller's thread if that needs no wait and no full
        rendering (``session_items_now``), else None."""
        cid = self._conversation_id
        if cid is None:  # the first call starts the conversation: a write
            return None
        return self._gated(
            lambda: session_items_now(self.ledger, cid, summary_role=self.summary_role, view=self._view)
        )

    def _items(self) -> list[dict[str, Any]]:
        cid = self.conversation_id
        return session_items(self.ledger, cid, summary_role=self.summary_role, view=self._view)

    def _pop_item(self) -> dict[str, Any] | None:
        return pop_session_item(self.ledger, self.conversation_id)

    def _clear(self) -> None:
        self.ledger.clear(self.conversation_id)
