"""Context windows of known models, and the context cap derived from them.

A conversation started (or given a policy) without ``max_context_tokens`` gets
``default_context_cap(model)``: the model's context window less a reserve for its
answer (an eighth of the window, at most 16,384 tokens). The cap is written into the
policy the conversation stores, so a stored log replays identically: conversations
stored before this default keep the policy they stored (no cap).

Models are matched by the longest known prefix of their name (after any
``provider/``); an unknown model gets ``DEFAULT_CONTEXT_WINDOW``.
"""

from __future__ import annotations

__all__ = [
    "CONTEXT_WINDOWS",
    "DEFAULT_CONTEXT_WINDOW",
    "context_window",
    "default_context_cap",
]

#: Tokens of context, by model-name prefix.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-32k": 32_768,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini-1.5": 1_048_576,
    "gemini-2": 1_048_576,
    "llama-3": 128_000,
    "mistral-large": 128_000,
}

#: The window assumed for a model not in the table.
DEFAULT_CONTEXT_WINDOW = 128_000


def context_window(model: str) -> int:
    """The context window of ``model`` (``DEFAULT_CONTEXT_WINDOW`` if unknown)."""
    name = model.lower().rsplit("/", 1)[-1]
    best = max((p for p in CONTEXT_WINDOWS if name.startswith(p)), key=len, default=None)
    return CONTEXT_WINDOWS[best] if best is not None else DEFAULT_CONTEXT_WINDOW


def default_context_cap(model: str) -> int:
    """The ``max_context_tokens`` a policy without one gets for ``model``."""
    window = context_window(model)
    return window - min(window // 8, 16_384)
