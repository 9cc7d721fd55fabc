"""Token counters per model, and what a message costs where it is appended."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from contextledger.application.shared.ports import TokenCounter
from contextledger.domain.conversation import Conversation
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import placeholder_text
from contextledger.domain.values.tools import ToolDefinitions

__all__ = ["ESTIMATE_ERRORS", "TokenCounters", "relative_error"]

#: The stated bound on the relative error of the token estimate for models with no
#: local tokenizer, by model-name prefix (``infrastructure/counting/estimates.py`` says what
#: each rests on): the provider's count of a prompt is within this share of ours.
#: Models not listed are counted exactly (tiktoken, for OpenAI models).
ESTIMATE_ERRORS: dict[str, float] = {"claude-": 0.20, "gemini-": 0.20}


def relative_error(model: str) -> float:
    """The stated bound on the relative error of ``model``'s token counts (0: exact)."""
    name = model.lower().split("/")[-1]
    return next((bound for prefix, bound in ESTIMATE_ERRORS.items() if name.startswith(prefix)), 0.0)


class TokenCounters:
    """One ``TokenCounter`` per model (or the injected one for every model)."""

    def __init__(self, factory: Callable[[str], TokenCounter], *, fixed: TokenCounter | None = None) -> None:
        self._factory = factory
        self._fixed = fixed
        self._counters: dict[str, TokenCounter] = {}
        self._lock = threading.Lock()

    def for_model(self, model: str) -> TokenCounter:
        """The token counter for ``model``."""
        if self._fixed is not None:
            return self._fixed
        counter = self._counters.get(model)
        if counter is None:
            with self._lock:
                counter = self._counters.get(model)
                if counter is None:
                    counter = self._counters[model] = self._factory(model)
        return counter

    def message_cost(self, conversation: Conversation, message: Message) -> tuple[int, int | None]:
        """Tokens of ``message`` appended next to ``conversation``, and of the
        placeholder that may stand for it later (tool results only)."""
        counter = self.for_model(conversation.state.model)
        tokens = counter.count_message(message)
        if message.role != "tool":
            return tokens, None
        text = placeholder_text(
            conversation.tool_name_for(message.tool_call_id), tokens, conversation.state.next_position
        )
        placeholder = Message(role="tool", tool_call_id=message.tool_call_id, content=text)
        return tokens, counter.count_message(placeholder)

    def tools_cost(self, model: str, tools: ToolDefinitions | None) -> int:
        """What these tool definitions add to every prompt (0 for none). A counter
        with ``count_tools`` counts them as the provider does; any other counter is
        given their JSON text."""
        if not tools:
            return 0
        counter = self.for_model(model)
        count_tools = getattr(counter, "count_tools", None)
        if callable(count_tools):
            return int(count_tools(list(tools)))
        return counter.count_text(json.dumps(list(tools), sort_keys=True))
