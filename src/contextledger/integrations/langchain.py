"""contextledger as LangChain memory: bounded, summarized, auditable, lossless.

LangChain 1.x agents (``create_agent``) take ``LedgerMiddleware``
(``contextledger.integrations.langchain_middleware``, also importable from here), a
drop-in for ``SummarizationMiddleware``; chains built on ``RunnableWithMessageHistory``
take ``LedgerChatMessageHistory``::

    from langchain_core.runnables.history import RunnableWithMessageHistory
    from contextledger.integrations.langchain import LedgerChatMessageHistory

    with_history = RunnableWithMessageHistory(
        chain, lambda session_id: LedgerChatMessageHistory(session_id, ledger),
        input_messages_key="input", history_messages_key="history")

``messages`` is the *working memory* (a ``SystemMessage`` with the summary, then the
recent messages, old tool results as placeholders), not the whole history; the log
keeps everything (``ledger.transcript``), and ``ledger.context(cid, version=v)``
re-derives what any call was sent.

Every message is stored twice over in one event, as the chat-completions message the
model is sent and as itself (``langchain_messages``, whose conversions this module
re-exports). Read back, a message no reduction touched is the very message appended
(``==``); a placeholder is the ``ToolMessage`` with the placeholder text as content
and no artifact.

Needs the ``langchain`` extra (``pip install contextledger[langchain]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from contextledger.integrations import langchain_messages
from contextledger.integrations._keys import SessionBinding
from contextledger.integrations.langchain_messages import *  # noqa: F403 -- the conversions, re-exported
from contextledger.integrations.langchain_messages import append_langchain, langchain_memory

if TYPE_CHECKING:
    from contextledger.integrations.langchain_middleware import LedgerMiddleware

__all__ = ["LedgerChatMessageHistory", "LedgerMiddleware"]
__all__ += langchain_messages.__all__


class LedgerChatMessageHistory(SessionBinding, BaseChatMessageHistory):
    """A ``BaseChatMessageHistory`` kept in a contextledger ``Ledger``, keyed by session id.

    Constructed from a session id and either a ``ledger`` (shared, not closed here) or
    a database ``url`` (opened here, closed by ``close()``); the first use starts the
    conversation with ``policy``, ``model`` and ``system_prompt`` (and the data subject
    ``subject``, when given).
    """

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The working memory as LangChain messages (summary first, as a SystemMessage);
        messages no reduction touched are the very messages appended."""
        return langchain_memory(self.ledger, self.conversation_id)[0]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` atomically (one transaction), every field kept."""
        append_langchain(self.ledger, self.conversation_id, list(messages))

    def clear(self) -> None:
        """Forget every message of this session: they are retracted from the working
        memory (the log keeps them for audits)."""
        self.ledger.clear(self.conversation_id)

    async def aget_messages(self) -> list[BaseMessage]:
        """``messages``, without blocking the event loop."""
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """``add_messages``, without blocking the event loop."""
        await asyncio.to_thread(self.add_messages, messages)

    async def aclear(self) -> None:
        """``clear``, without blocking the event loop."""
        await asyncio.to_thread(self.clear)


def __getattr__(name: str) -> Any:
    if name == "LedgerMiddleware":  # needs the ``langchain`` package, not only langchain-core
        from contextledger.integrations.langchain_middleware import LedgerMiddleware

        return LedgerMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
