"""Token counting with tiktoken, the way OpenAI bills a chat prompt.

Per the OpenAI cookbook (``num_tokens_from_messages``): every message costs 3 tokens
of framing plus the tokens of each of its values (the role included), a ``name``
costs 1 more, and every prompt is primed with 3 tokens for the reply. Tool calls on
an assistant message add the tokens of each function name and arguments string; an
image part counts as 85 tokens (the low-detail price) since its pixels are unknown.

Tool definitions are counted by the cookbook's ``num_tokens_for_tools`` formula: per
function ``func_init`` (7 on o200k models, 10 on cl100k ones) plus ``name:description``;
if it has properties, ``prop_init`` (3) and per property ``prop_key`` (3) plus
``name:type:description``, and per enum ``enum_init`` (-3) plus ``enum_item`` (3) and
each item's tokens; ``func_end`` (12) once for the whole list. (Its example, one
weather function with a system and a user message, costs 101 prompt tokens on
gpt-4o-mini, as the API reports.)
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from hashlib import blake2b
from typing import Any

import tiktoken

from contextledger.domain.values.messages import Message
from contextledger.infrastructure.counting.encodings import load_encoding

__all__ = ["TiktokenCounter", "encoding_for_model"]

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_PART_TOKENS = 85
#: The cookbook's constants for tool definitions (``num_tokens_for_tools``).
FUNC_INIT = {"o200k_base": 7, "cl100k_base": 10}
PROP_INIT = 3
PROP_KEY = 3
ENUM_INIT = -3
ENUM_ITEM = 3
FUNC_END = 12

#: A counter remembers the count of each text up to ``MEMO_MAX_TEXT`` characters it has
#: encoded, the oldest forgotten first past ``MEMO_MAX_ENTRIES`` texts: a prompt counted
#: again (the same messages, a role, a tool name, a placeholder) is a look-up per text
#: instead of an encoding. It keeps a keyed BLAKE2b digest of each text (the key random
#: per counter), never the text: an erased message's words do not stay in memory there.
MEMO_MAX_TEXT = 8192
MEMO_MAX_ENTRIES = 32_768

_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada-002")


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding a model uses (o200k_base for unknown, newer models)."""
    name = model.lower().split("/")[-1]
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    try:
        return tiktoken.encoding_name_for_model(name)
    except KeyError:
        return "o200k_base"


@lru_cache(maxsize=8)
def _load(encoding_name: str) -> tiktoken.Encoding:
    """The encoding, loaded once per process: the shipped files need no download
    (``infrastructure/counting/encodings.py``)."""
    return load_encoding(encoding_name)


class TiktokenCounter:
    """The ``TokenCounter`` port on tiktoken."""

    reply_priming = REPLY_PRIMING

    def __init__(self, model: str = "gpt-4o-mini", *, encoding: str | None = None) -> None:
        self.model = model
        self.encoding_name = encoding or encoding_for_model(model)
        self._encoding = _load(self.encoding_name)
        # tiktoken's ``encode(text, disallowed_special=())`` is its core's
        # ``encode_ordinary`` behind two checks and a wrapper (about a third of the
        # call for a short message); the core is used directly where this tiktoken
        # has it, and the public call otherwise.
        core = getattr(self._encoding, "_core_bpe", None)
        self._ordinary: Callable[[str], list[int]] | None = getattr(core, "encode_ordinary", None)
        # An OrderedDict: forgetting a plain dict's oldest key scans past the keys
        # forgotten before it, which made every count past the bound slower.
        self._memo: OrderedDict[bytes, int] = OrderedDict()
        self._memo_key = os.urandom(16)
        self._memo_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TiktokenCounter(model={self.model!r}, encoding={self.encoding_name!r})"

    def count_text(self, text: str) -> int:
        if len(text) > MEMO_MAX_TEXT:
            return self._encoded_length(text)
        digest = self._digest(text)
        tokens = self._memo.get(digest)
        if tokens is None:
            tokens = self._encoded_length(text)
            self._remember(digest, tokens)
        return tokens

    def _digest(self, text: str) -> bytes:
        data = text.encode("utf-8", "surrogatepass")  # a lone surrogate is a text too
        return blake2b(data, digest_size=16, key=self._memo_key).digest()

    def _encoded_length(self, text: str) -> int:
        ordinary = self._ordinary
        if ordinary is not None:
            try:
                return len(ordinary(text))
            except UnicodeEncodeError:  # a lone surrogate: tiktoken's own handling
                pass
        return len(self._encoding.encode(text, disallowed_special=()))

    def _remember(self, digest: bytes, tokens: int) -> None:
        memo = self._memo
        with self._memo_lock:
            if digest in memo:
                return
            memo[digest] = tokens
            while len(memo) > MEMO_MAX_ENTRIES:
                memo.popitem(last=False)

    def count_message(self, message: Message) -> int:
        count = self.count_text
        tokens = TOKENS_PER_MESSAGE + count(message.role)
        content = message.content
        if isinstance(content, str):
            tokens += count(content)
        elif content is not None:
            tokens += sum(self._count_part(part) for part in content)
        if message.name is not None:
            tokens += TOKENS_PER_NAME + count(message.name)
        if message.tool_calls:
            for call in message.tool_calls:
                tokens += count(call.function.name) + count(call.function.arguments)
        if message.tool_call_id is not None:
            tokens += count(message.tool_call_id)
        return tokens

    def count_messages(self, messages: list[dict[str, Any]] | list[Message]) -> int:
        """What a whole prompt of these messages costs, reply priming included."""
        return REPLY_PRIMING + sum(self.count_message(Message.from_openai(m)) for m in messages)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        """What a list of tool definitions adds to a prompt (0 for none)."""
        if not tools:
            return 0
        count = self.count_text
        func_init = FUNC_INIT.get(self.encoding_name, FUNC_INIT["o200k_base"])
        total = 0
        for tool in tools:
            function = tool.get("function", {})
            total += func_init
            description = str(function.get("description", "")).removesuffix(".")
            total += count(f"{function.get('name', '')}:{description}")
            parameters = function.get("parameters") or {}
            properties = parameters.get("properties") if isinstance(parameters, dict) else None
            if isinstance(properties, dict) and properties:
                total += PROP_INIT
                for name, schema in properties.items():
                    schema = schema if isinstance(schema, dict) else {}
                    total += PROP_KEY
                    enum = schema.get("enum")
                    if isinstance(enum, list):
                        total += ENUM_INIT
                        for item in enum:
                            total += ENUM_ITEM + count(str(item))
                    kind = schema.get("type", "")
                    kind = kind if isinstance(kind, str) else "|".join(map(str, kind))
                    description = str(schema.get("description", "")).removesuffix(".")
                    total += count(f"{name}:{kind}:{description}")
        return total + FUNC_END

    def _count_part(self, part: dict[str, Any]) -> int:
        kind = part.get("type")
        if kind == "text":
            return self.count_text(str(part.get("text", "")))
        if kind == "refusal":
            return self.count_text(str(part.get("refusal", "")))
        return IMAGE_PART_TOKENS
