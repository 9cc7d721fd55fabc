"""Text from outside (a provider's error message) made safe to store and to print.

``provider_text(text)`` is what a summarization failure records and what the policy
logs: control characters and invisible formatting characters are shown as escapes
(``\\x1b``, ``\\u202e``), so a terminal escape in a provider's answer can neither
recolor nor move a terminal that prints it; whitespace runs become one space; and
anything that looks like a credential is masked (``mask_secrets``): OpenAI-style keys
(``sk-...``, ``sk-proj-...``, also partial ones such as ``sk-proj-****abc1``), bearer
tokens, Google API keys and ``api_key=...`` / ``"api_key": "..."`` values.

``error_outline(exc)`` is what leaves the process about an error (span statuses and
events, log lines): its class and HTTP status, never its text, which may quote the
conversation (a provider's 400 quotes the message it refused).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["error_outline", "mask_secrets", "provider_text"]

#: Unicode categories that never show as themselves: controls, formatting
#: characters (bidi overrides, zero-width), unassigned and private-use, surrogates.
_HIDDEN = frozenset({"Cc", "Cf", "Cn", "Co", "Cs"})

_SECRETS = (
    # OpenAI and Anthropic-style keys, whole or partly starred (sk-proj-****abc1).
    (re.compile(r"\bsk-[A-Za-z0-9_*.\-]{3,}"), "sk-***"),
    (re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=*\-]{6,}", re.IGNORECASE), r"\1***"),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"), "AIza***"),
    (
        re.compile(
            r"""(\b(?:api[_-]?key|access[_-]?token|secret)["']?\s*[:=]\s*["']?)[^\s"',;&}]+""", re.IGNORECASE
        ),
        r"\1***",
    ),
)


#: A terminal control sequence (``ESC [ ... m`` and the like): a key right after one
#: starts a word of its own.
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def mask_secrets(text: str) -> str:
    """``text`` with anything that looks like an API key or a token shown as ``***``."""
    pieces = _CSI.split(text)
    controls = _CSI.findall(text)
    masked: list[str] = []
    for index, piece in enumerate(pieces):
        for pattern, replacement in _SECRETS:
            piece = pattern.sub(replacement, piece)
        masked.append(piece)
        if index < len(controls):
            masked.append(controls[index])
    return "".join(masked)


def provider_text(text: str, *, limit: int = 2000) -> str:
    """``text`` on one line, its hidden characters escaped and its secrets masked,
    at most ``limit`` characters."""
    shown: list[str] = []
    for char in mask_secrets(str(text)):  # before escaping: an escape may abut a key
        if char.isspace():
            shown.append(" ")
        elif unicodedata.category(char) in _HIDDEN:
            code = ord(char)
            shown.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            shown.append(char)
    return mask_secrets(" ".join("".join(shown).split()))[:limit]


def error_outline(exc: BaseException) -> str:
    """``exc``'s class and, when it has one, the HTTP status it carries: nothing of
    its text (``SummarizerRequestError (status 400)``)."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return f"{type(exc).__name__} (status {status})"
    return type(exc).__name__
