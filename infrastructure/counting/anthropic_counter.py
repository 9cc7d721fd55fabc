"""Claude token counts from Anthropic's token-counting endpoint (``messages/count_tokens``).

With ``Settings.anthropic_count_tokens`` the ledger counts a Claude conversation's
messages with ``AnthropicCountingCounter``: each message's text is sent once, alone
in a user turn, through the ``anthropic`` SDK (the ``anthropic`` extra, imported when
the first counter is made), and the answer less the reply's opening
(``reply_priming``) is the message's cost, kept per message so the same message is
never sent twice. What a call cannot price stays the estimate of ``ClaudeCounter``:

- a message with tool calls, a tool result or an image (a lone ``tool_use`` or
  ``tool_result`` is not a valid request), and bare texts (``count_text``: summary
  lengths, checked against ``max_summary_tokens`` with the same counter that sized
  them);
- every message while the endpoint fails: an error status, a refused request, no
  answer within the timeout. After a failure the counter does not call again for
  ``retry_after`` seconds, so an outage costs one timeout, not one per message.

The stated error bound (``relative_error``) stays the estimate's: a conversation's
counts may mix the endpoint's and the estimate's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from importlib import import_module
from typing import Any

from contextledger.application.shared.ports import TokenCounter
from contextledger.domain.values.errors import ConfigurationError
from contextledger.domain.values.messages import Message
from contextledger.infrastructure.counting.estimates import ClaudeCounter, counter_for_model
from contextledger.infrastructure.loopback import direct_if_loopback

__all__ = ["AnthropicCountingCounter", "counting_factory"]

log = logging.getLogger("contextledger.tokens")

#: Messages whose counts one counter keeps (the oldest are forgotten first).
CACHE_SIZE = 50_000


def _sdk() -> Any:
    try:
        return import_module("anthropic")
    except ImportError as exc:
        raise ConfigurationError(
            "counting tokens with Anthropic needs the anthropic SDK: pip install 'contextledger[anthropic]'"
        ) from exc


class AnthropicCountingCounter(ClaudeCounter):
    """A ``ClaudeCounter`` whose message costs come from Anthropic's token-counting
    endpoint when it answers (see the module's notes)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 5.0,
        retry_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(model)
        if not api_key:
            raise ConfigurationError("counting tokens with Anthropic needs an API key (ANTHROPIC_API_KEY)")
        if timeout <= 0 or retry_after < 0:
            raise ConfigurationError("timeout must be positive and retry_after not negative")
        self.base_url = base_url
        self.timeout = timeout
        self.retry_after = retry_after
        self._sdk = _sdk()
        self._client = direct_if_loopback(
            self._sdk.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0), self._sdk
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._counted: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._quiet_until = 0.0
        #: Calls made to the endpoint, and those that failed.
        self.calls = 0
        self.failures = 0

    def __repr__(self) -> str:
        return f"AnthropicCountingCounter(model={self.model!r}, base_url={self.base_url!r}, api_key=***)"

    def count_message(self, message: Message) -> int:
        text = _countable_text(message)
        if text is None:
            return super().count_message(message)
        key = (message.role, text)
        with self._lock:
            known = self._counted.get(key)
            if known is not None:
                self._counted.move_to_end(key)
                return known
            if self._clock() < self._quiet_until:
                return super().count_message(message)
        counted = self._ask(text)
        if counted is None:
            return super().count_message(message)
        tokens = max(1, counted - self.reply_priming)
        with self._lock:
            self._counted[key] = tokens
            while len(self._counted) > CACHE_SIZE:
                self._counted.popitem(last=False)
        return tokens

    def _ask(self, text: str) -> int | None:
        """The endpoint's count of a prompt of one user turn holding ``text`` (None:
        it failed; the estimate stands in, and no call is made for ``retry_after``)."""
        with self._lock:
            self.calls += 1
        try:
            answer = self._client.messages.count_tokens(
                model=self.model, messages=[{"role": "user", "content": text}]
            )
            tokens = answer.input_tokens
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
                raise ValueError(f"input_tokens is {tokens!r}")
            return tokens
        except (self._sdk.APIError, ValueError, TypeError, AttributeError) as exc:
            with self._lock:
                self.failures += 1
                self._quiet_until = self._clock() + self.retry_after
            log.warning(
                "counting tokens with Anthropic failed (%s): estimating for %g s",
                type(exc).__name__,
                self.retry_after,
            )
            return None


def _countable_text(message: Message) -> str | None:
    """The text the endpoint is asked to count for ``message`` (None: the estimate
    prices it: tool calls, a tool result, an image, no text)."""
    if message.tool_calls or message.tool_call_id is not None:
        return None
    content = message.content
    if isinstance(content, str):
        return content or None
    if content is None or any(part.get("type") != "text" for part in content):
        return None
    text = "\n".join(str(part.get("text", "")) for part in content)
    return text or None


def counting_factory(
    *, api_key: str, base_url: str | None = None, timeout: float = 5.0
) -> Callable[[str], TokenCounter]:
    """The counter of a model: ``AnthropicCountingCounter`` for Claude models, the
    local counters (``counter_for_model``) for any other."""

    def for_model(model: str) -> TokenCounter:
        if model.lower().split("/")[-1].startswith("claude-"):
            return AnthropicCountingCounter(model, api_key=api_key, base_url=base_url, timeout=timeout)
        return counter_for_model(model)

    return for_model
