"""The types of what the ledger hands to the openai SDK: context messages and tools.

For type checkers they are the SDK's own request types, so
``client.chat.completions.create(messages=ledger.context(cid), tools=ledger.tools(cid))``
type-checks under ``mypy --strict``. At run time they are plain dicts and the SDK is
not imported (the application layer never depends on it): the import below is
guarded by ``TYPE_CHECKING`` and names the SDK's pure type modules only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

__all__ = ["ContextMessage", "ToolDefinition"]

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

    #: One message of ``context()``: the SDK's ``ChatCompletionMessageParam``.
    ContextMessage: TypeAlias = ChatCompletionMessageParam
    #: One tool definition of ``tools()``: the SDK's ``ChatCompletionToolParam``.
    ToolDefinition: TypeAlias = ChatCompletionToolParam
else:
    ContextMessage = dict[str, Any]
    ToolDefinition = dict[str, Any]
