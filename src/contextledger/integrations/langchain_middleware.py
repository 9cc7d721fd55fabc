"""``LedgerMiddleware``: contextledger as the memory of a LangChain 1.x agent.

    from langchain.agents import create_agent
    from contextledger.integrations.langchain import LedgerMiddleware

    agent = create_agent(model, tools, middleware=[LedgerMiddleware(ledger, policy=policy)])
    agent.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "chat-7"}})

A drop-in for ``SummarizationMiddleware``: each thread (``config["configurable"]
["thread_id"]``) is one ledger conversation. Before every model call the messages
the run added since the last call are appended to the ledger (every field kept, see
``contextledger.integrations.langchain``) and the agent's ``messages`` are replaced
by the working memory: the summary, the recent turns, old tool results as
placeholders. The ledger's policy decides when to summarize, summarizes each message
once (never a summary of a summary's input again), and never cuts a tool-call group.
The model's answer is appended after the call, and whatever the run added last
(a ``return_direct`` tool's result) when the run ends.

Without a checkpointer the ledger alone is the thread's memory; with one, the
checkpoint holds only the working memory (and the mark below), the ledger the
whole history. The state keeps ``contextledger``: the id of the newest message the
ledger holds and the aggregate version the model's messages were read at (so
``ledger.context(cid, version=v)`` is what that call was sent, after the agent's own
system prompt).

Needs the ``langchain`` extra (``langchain`` and ``langgraph``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NotRequired
from uuid import UUID

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, ToolMessage
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from contextledger.application.facade.ledger import Ledger
from contextledger.domain.values.errors import InvalidArgumentError
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.integrations._keys import conversation_for_session
from contextledger.integrations.langchain_messages import LEDGER_ID_PREFIX, append_langchain, langchain_memory

__all__ = ["LedgerMiddleware", "LedgerState"]


class LedgerState(AgentState[Any]):
    """The agent state with the ledger's mark: ``{"synced": id, "version": int}``."""

    contextledger: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


class LedgerMiddleware(AgentMiddleware[LedgerState, Any, Any]):
    """Keeps each thread's messages in a contextledger ``Ledger`` and hands the model
    the working memory. Built from a ``ledger`` (shared, never closed here) or a
    database ``url`` (opened here, closed by ``close()``); a thread's conversation
    starts on its first model call with ``policy`` and ``model`` (for token counts).
    The agent's system prompt is sent by the agent, before the working memory; the
    ledger does not store it."""

    state_schema = LedgerState

    def __init__(
        self,
        ledger: Ledger | None = None,
        *,
        url: str | None = None,
        policy: ReductionPolicy | None = None,
        model: str = "gpt-4o-mini",
        hide_output: Callable[[ToolMessage], bool] | None = None,
    ) -> None:
        super().__init__()
        if ledger is not None and url is not None:
            raise InvalidArgumentError("pass a ledger or a url, not both", argument="url")
        if ledger is not None and not isinstance(ledger, Ledger):
            raise InvalidArgumentError("ledger must be a contextledger Ledger", argument="ledger")
        self._owns_ledger = ledger is None
        self.ledger = ledger if ledger is not None else Ledger.open(url)
        self._start_args: dict[str, Any] = {"model": model, "policy": policy}
        #: Which tool results to keep from the model (and the summarizer): stored hidden,
        #: as is a ``ToolMessage`` marked ``response_metadata={"hidden_from_model": True}``.
        self.hide_output = hide_output
        self._threads: dict[str, UUID] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the ledger if this middleware opened it."""
        if self._owns_ledger:
            self.ledger.close()

    def conversation_id(self, thread_id: str) -> UUID:
        """The ledger conversation of ``thread_id`` (started on first use)."""
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidArgumentError("thread_id must be a non-empty string", argument="thread_id")
        with self._lock:
            found = self._threads.get(thread_id)
        if found is None:
            found = conversation_for_session(self.ledger, thread_id, **self._start_args)
            with self._lock:
                self._threads[thread_id] = found
        return found

    def _thread(self) -> UUID:
        configurable = get_config().get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            raise InvalidArgumentError(
                "LedgerMiddleware keys memory by thread: run the agent with "
                'config={"configurable": {"thread_id": "..."}}',
                argument="thread_id",
            )
        return self.conversation_id(str(thread_id))

    def _sync(self, cid: UUID, state: LedgerState) -> list[BaseMessage]:
        """Append the messages after the mark; returns the state's messages."""
        messages: Sequence[BaseMessage] = state["messages"]
        mark = (state.get("contextledger") or {}).get("synced")
        start = 0
        if mark is not None:
            for index in range(len(messages) - 1, -1, -1):
                if messages[index].id == mark:
                    start = index + 1
                    break
        new = _with_invalid_calls_answered(list(messages[start:]))
        if new:
            append_langchain(self.ledger, cid, new, self.hide_output)
        return list(messages)

    def before_model(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Append what the run added, then show the model the working memory."""
        cid = self._thread()
        messages = self._sync(cid, state)
        memory, version = langchain_memory(self.ledger, cid)
        mark = {"synced": memory[-1].id if memory else None, "version": version}
        if memory == messages:
            return {"contextledger": mark}
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *memory], "contextledger": mark}

    def after_model(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Append the model's answer."""
        return self._mark_synced(state)

    def after_agent(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Append whatever the run added after the last model call."""
        return self._mark_synced(state)

    def _mark_synced(self, state: LedgerState) -> dict[str, Any] | None:
        messages = self._sync(self._thread(), state)
        if not messages:
            return None
        return {"contextledger": {**(state.get("contextledger") or {}), "synced": messages[-1].id}}

    async def abefore_model(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``before_model``, without blocking the event loop."""
        return await _in_thread(self.before_model, state, runtime)

    async def aafter_model(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``after_model``, without blocking the event loop."""
        return await _in_thread(self.after_model, state, runtime)

    async def aafter_agent(self, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """``after_agent``, without blocking the event loop."""
        return await _in_thread(self.after_agent, state, runtime)


def _invalid_call_answer(call: dict[str, Any]) -> ToolMessage:
    """The error ``create_agent`` sends the model for a call whose arguments did not
    parse (it adds it to each model request, never to the state), with an id made
    from the call's, so that the ledger can hold it in the call's group."""
    name = call.get("name") or "unknown"
    call_id = str(call["id"])
    return ToolMessage(
        content=(
            f"Tool call {name} with id {call_id} could not be executed - "
            "arguments were malformed or truncated."
        ),
        name=name,
        tool_call_id=call_id,
        status="error",
        id=f"{LEDGER_ID_PREFIX}invalid-call-{call_id}",
    )


def _with_invalid_calls_answered(messages: list[BaseMessage]) -> list[BaseMessage]:
    """``messages`` with an answer after each ``AIMessage``'s invalid tool calls that
    none of them answers: the agent never runs such calls (its run ends, or goes on
    with the valid calls), so the ledger records the answer the model is sent."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    out: list[BaseMessage] = []
    for message in messages:
        out.append(message)
        if isinstance(message, AIMessage):
            for call in message.invalid_tool_calls:
                call_id = call.get("id")
                if call_id and call_id not in answered:
                    out.append(_invalid_call_answer(dict(call)))
                    answered.add(call_id)
    return out


async def _in_thread(hook: Any, state: LedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
    result: dict[str, Any] | None = await asyncio.to_thread(hook, state, runtime)  # the context (and
    return result  # with it the run's config) goes along
