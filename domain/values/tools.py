"""Tool definitions: the ``tools`` a conversation sends with every model call.

They are kept as the OpenAI Chat Completions API takes them
(``{"type": "function", "function": {"name", "description", "parameters", "strict"}}``),
checked for shape here and copied into plain JSON values so that stored events
never alias the caller's objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from contextledger.domain.values.errors import InvalidArgumentError, MessageTooLargeError

__all__ = ["ToolDefinitions", "check_tools"]

ToolDefinitions = tuple[dict[str, Any], ...]

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_FUNCTION_KEYS = {"name", "description", "parameters", "strict"}


def check_tools(tools: Sequence[Any] | None, *, max_bytes: int | None = None) -> ToolDefinitions | None:
    """Validate tool definitions; an empty list means no tools (None). Over
    ``max_bytes`` (the UTF-8 bytes of their JSON, counted as they are checked, so a
    huge definition is refused before it is copied or its tokens counted):
    ``MessageTooLargeError`` naming the tools and ``max_tools_bytes``."""
    if tools is None:
        return None
    size = 0
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Sequence):
        raise InvalidArgumentError("tools must be a list of tool definitions", argument="tools")
    checked: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or set(tool) - {"type", "function"}:
            raise InvalidArgumentError(
                f"{where} must be {{'type': 'function', 'function': {{...}}}}", argument="tools"
            )
        function = tool.get("function")
        if not isinstance(function, dict) or set(function) - _FUNCTION_KEYS:
            raise InvalidArgumentError(
                f"{where}.function takes only {sorted(_FUNCTION_KEYS)}", argument="tools"
            )
        name = function.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            raise InvalidArgumentError(
                f"{where}.function.name must match ^[A-Za-z0-9_-]{{1,64}}$", argument="tools"
            )
        if name in names:
            raise InvalidArgumentError(f"the tool name {name!r} is defined twice", argument="tools")
        names.add(name)
        if "description" in function and not isinstance(function["description"], str):
            raise InvalidArgumentError(f"{where}.function.description must be a string", argument="tools")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise InvalidArgumentError(f"{where}.function.parameters must be an object", argument="tools")
        try:
            text = json.dumps(tool, allow_nan=False, ensure_ascii=False)
            size += len(text.encode("utf-8"))  # lone surrogates: not text a provider can take
            if max_bytes is not None and size > max_bytes:
                raise _too_large(size, max_bytes, index, len(tools))
            copied = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"{where} is not JSON: {exc}", argument="tools") from exc
        checked.append(copied)
    return tuple(checked) or None


def _too_large(size: int, limit: int, index: int, count: int) -> MessageTooLargeError:
    upto = "" if index == count - 1 else f" (counting up to tools[{index}] of {count})"
    return MessageTooLargeError(
        f"the tool definitions are {size} bytes{upto}, over max_tools_bytes ({limit}): "
        "shorten their descriptions and parameter schemas, or raise the setting",
        field="tools",
        limit=limit,
        size=size,
        unit="bytes",
        setting="max_tools_bytes",
    )
