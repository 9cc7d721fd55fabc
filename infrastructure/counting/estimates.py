"""Token estimates for models with no local tokenizer: Anthropic Claude, Google Gemini.

Neither provider publishes the tokenizer of its current models, so a prompt is
estimated from a tiktoken count of its text, scaled per provider, plus each API's
framing. What the calibration rests on (published facts, not counts measured here:
the fake servers cannot know the real tokenizers):

- Claude: Anthropic states that a token is about 3.5 English characters, and that
  its newer tokenizer spends up to about 35% more tokens than its previous one on the
  same text. Measured on the English dialogues in the shared corpora, cl100k_base
  spends 3.8 to 4.5 characters a token, so Claude's 3.5 is 1.1 to 1.3 times the
  cl100k count; the estimate takes 1.15 times cl100k. A true ratio anywhere in
  1.0..1.35 leaves the text estimate within 15%.
- Gemini: Google states that a token is about 4 characters (100 tokens are about
  60-80 English words); on the corpora's English dialogues o200k_base spends 3.9 to
  4.5 characters a token, so the estimate takes the o200k count as it is (within
  about 12% of the 4-character rule on prose). Chat turns are framed as in the
  published Gemma chat template (``<start_of_turn>role\\n ... <end_of_turn>\\n``: 5
  tokens a turn, 3 to open the reply), and an image costs 258 tokens (Google's
  figure for an image up to 384 pixels a side).

The characters-a-token rules hold for prose only: on JSON and code (tool calls,
tool results) every BPE tokenizer spends more tokens a character, which is why the
estimate scales a BPE count rather than dividing characters. Each counter states its
``relative_error`` (``application.shared.counting.ESTIMATE_ERRORS``): the share of the
estimate the provider's count may differ by, framing and tool definitions included.
The totals report it in tokens (``TokenTotals.estimate_error_bound``), and where a
reply reported the provider's own count, it replaces the estimate of the prefix the
provider saw.
"""

from __future__ import annotations

import json
import math
from typing import Any

from contextledger.application.shared.counting import ESTIMATE_ERRORS
from contextledger.application.shared.counting import relative_error as stated_error
from contextledger.application.shared.ports import TokenCounter
from contextledger.domain.values.messages import Message
from contextledger.infrastructure.counting.tokens import TiktokenCounter

__all__ = ["ClaudeCounter", "EstimatingCounter", "GeminiCounter", "counter_for_model"]


class EstimatingCounter:
    """A ``TokenCounter`` that estimates a provider's count from a tiktoken count.

    ``scale`` multiplies the tiktoken count of each text; ``per_message`` is the
    framing of one message, ``reply_priming`` what opens the reply; ``per_tool_call``
    and ``per_tool_result`` the framing of a tool-use and a tool-result block;
    ``image_tokens`` an image part; ``tools_prompt`` what the API adds to a prompt
    that defines tools.
    """

    encoding = "o200k_base"
    scale = 1.0
    per_message = 3
    reply_priming = 3
    per_tool_call = 3
    per_tool_result = 3
    image_tokens = 258
    tools_prompt = 0
    #: The stated bound on the estimate's relative error (``ESTIMATE_ERRORS``).
    relative_error = 0.0

    def __init__(self, model: str) -> None:
        self.model = model
        self._tiktoken = TiktokenCounter(model, encoding=self.encoding)
        self.relative_error = stated_error(model) or type(self).relative_error

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return math.ceil(self._tiktoken.count_text(text) * self.scale)

    def count_message(self, message: Message) -> int:
        count = self.count_text
        tokens = self.per_message
        content = message.content
        if isinstance(content, str):
            tokens += count(content)
        elif content is not None:
            for part in content:
                kind = part.get("type")
                if kind == "text":
                    tokens += count(str(part.get("text", "")))
                elif kind == "refusal":
                    tokens += count(str(part.get("refusal", "")))
                else:
                    tokens += self.image_tokens
        for call in message.tool_calls or ():
            tokens += self.per_tool_call + count(call.function.name) + count(call.function.arguments)
        if message.tool_call_id is not None:
            tokens += self.per_tool_result + count(message.tool_call_id)
        return tokens

    def count_messages(self, messages: list[dict[str, Any]] | list[Message]) -> int:
        """What a whole prompt of these messages costs, reply priming included."""
        return self.reply_priming + sum(self.count_message(Message.from_openai(m)) for m in messages)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        """What a list of tool definitions adds to a prompt (0 for none): the API's
        tool-use prompt and each definition's JSON text."""
        if not tools:
            return 0
        return self.tools_prompt + sum(
            self.count_text(json.dumps(tool.get("function", tool), sort_keys=True)) for tool in tools
        )


class ClaudeCounter(EstimatingCounter):
    """Anthropic Claude. Anthropic publishes the tool-use system prompt's size (346
    tokens with ``tool_choice`` auto, on Claude 3.7 and 4 models) and an image's
    (about ``width * height / 750``, up to about 1,600 tokens: an unknown image is
    taken at that ceiling); a turn's framing (``\\n\\nHuman:`` / ``\\n\\nAssistant:``)
    and a tool block's are a few tokens each."""

    encoding = "cl100k_base"
    scale = 1.15
    per_message = 4
    reply_priming = 4
    per_tool_call = 8
    per_tool_result = 8
    image_tokens = 1600
    tools_prompt = 346
    relative_error = ESTIMATE_ERRORS["claude-"]


class GeminiCounter(EstimatingCounter):
    """Google Gemini (see the module's notes for the framing and image figures)."""

    encoding = "o200k_base"
    scale = 1.0
    per_message = 5
    reply_priming = 3
    per_tool_call = 5
    per_tool_result = 5
    image_tokens = 258
    tools_prompt = 0
    relative_error = ESTIMATE_ERRORS["gemini-"]


def counter_for_model(model: str) -> TokenCounter:
    """The token counter for ``model``: an estimate for Claude and Gemini models,
    tiktoken (exact for OpenAI models) for any other."""
    name = model.lower().split("/")[-1]
    if name.startswith("claude-"):
        return ClaudeCounter(model)
    if name.startswith("gemini-"):
        return GeminiCounter(model)
    return TiktokenCounter(model)
