"""contextledger as an OpenAI Agents SDK session: bounded, summarized, auditable memory.

    from agents import Agent, Runner
    from contextledger.integrations.agents import LedgerSession

    session = LedgerSession("user-42", url="sqlite:///memory.db",
                            policy=cl.ReductionPolicy(trigger_messages=40, keep_messages=10))
    await Runner.run(agent, "hi", session=session)     # instead of SQLiteSession("user-42", ...)

``get_items()`` hands the SDK the *working memory* (the summary, then the recent items
verbatim, old tool outputs as placeholders), not the whole history; the whole history
stays in the ledger's log (``ledger.transcript_items``), and what any run was sent can
be re-derived with ``ledger.context_items(cid, version=v)``. Summaries run in the
background, as everywhere in contextledger.

Needs the ``agents`` extra (``pip install contextledger[agents]``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from agents.memory.session_settings import SessionSettings

from contextledger.application.items import SummaryRole
from contextledger.application.ledger import Ledger
from contextledger.domain.errors import UsageError
from contextledger.domain.items import items_from_messages
from contextledger.domain.messages import Message
from contextledger.domain.policy import ReductionPolicy
from contextledger.integrations._keys import SessionBinding

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["LedgerSession"]


def _plain(item: Any) -> dict[str, Any]:
    """An SDK item (a TypedDict, or a pydantic model from a response) as a plain dict."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return cast(dict[str, Any], dump(exclude_unset=True, mode="json"))
    raise TypeError(f"a session item must be a dict, not {type(item).__name__}")


class LedgerSession(SessionBinding):
    """An Agents SDK ``Session`` kept in a contextledger ``Ledger``.

    Constructed from a session id and either a ``ledger`` (shared, not closed here) or
    a database ``url`` (opened here, closed by ``close()``). The first use starts the
    conversation with ``policy``, ``model`` and ``system_prompt`` (usually None: the
    agent's instructions are sent by the SDK). The summary reaches the model as a
    message item of ``summary_role``. ``session_settings.limit`` (a ``SessionSettings``
    or a dict) caps what ``get_items()`` returns, as in the SDK's own sessions.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        ledger: Ledger | None = None,
        *,
        url: str | None = None,
        policy: ReductionPolicy | None = None,
        model: str = "gpt-4o-mini",
        system_prompt: str | None = None,
        summary_role: SummaryRole = "system",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            session_id, ledger, url=url, policy=policy, model=model, system_prompt=system_prompt
        )
        self.session_settings = (
            SessionSettings().resolve(session_settings) if session_settings is not None else SessionSettings()
        )
        self.summary_role: SummaryRole = summary_role

    # --------------------------------------------------------- Session protocol

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The working memory as input items; with ``limit`` (default
        ``session_settings.limit``), its newest ``limit`` items."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = await asyncio.to_thread(self.context_items)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the log (one transaction)."""
        plain = [_plain(i) for i in items]
        if plain:
            await asyncio.to_thread(self.ledger.append_items, self.conversation_id, plain)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None when the session is empty)."""
        return cast("TResponseInputItem | None", await asyncio.to_thread(self._pop_item))

    async def clear_session(self) -> None:
        """Forget every item of this session (the log keeps them for audits)."""
        await asyncio.to_thread(self._clear)

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
        return self.ledger.working_memory(self.conversation_id).version

    # The edit commands keep the log whole: ``pop`` and ``clear`` retract, they never
    # delete. A popped item takes its tool-call group with it (a function call and its
    # output are never split); the newest item of the group is returned.

    def _pop_item(self) -> dict[str, Any] | None:
        cid = self.conversation_id
        window = self.ledger.conversation(cid).state.window
        newest = list(window[-1].items or ()) if window else []
        try:
            popped = self.ledger.pop(cid)
        except UsageError:  # nothing left to pop
            return None
        if newest:
            return newest[-1]
        converted = items_from_messages([Message.from_openai(m) for m in popped])
        return converted[-1] if converted else None

    def _clear(self) -> None:
        self.ledger.clear(self.conversation_id)

