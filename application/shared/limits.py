"""Limits on what a ledger accepts: message size (bytes and tokens), the default
context cap of a policy that sets none (see ``contextledger.domain.values.windows``), and the
model and policy a conversation gets when ``start`` is given none."""

from __future__ import annotations

from contextledger.application.shared.settings import Settings
from contextledger.domain.values.errors import InvalidPolicyError, MessageTooLargeError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.windows import default_context_cap

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_POLICY",
    "check_message_bytes",
    "check_message_tokens",
    "message_bytes",
    "with_default_cap",
]

#: The model ``start`` counts a conversation with when given none.
DEFAULT_MODEL = "gpt-4o-mini"
#: The policy ``start`` gives a conversation when given none.
DEFAULT_POLICY = ReductionPolicy(trigger_messages=100, keep_messages=10)


def message_bytes(message: Message) -> int:
    """The UTF-8 bytes of the message's JSON (what is stored, before encryption)."""
    return len(message.__pydantic_serializer__.to_json(message, exclude_none=True))


def check_message_bytes(message: Message, settings: Settings, *, field: str = "message") -> None:
    """``MessageTooLargeError`` if the message is over ``settings.max_message_bytes``.
    Runs before tokens are counted, so a huge message costs no tokenizer time."""
    limit = settings.max_message_bytes
    content = message.content
    if (
        type(content) is str
        and message.tool_calls is None
        and 6 * (len(content) + len(message.name or "") + len(message.tool_call_id or "")) + 96 <= limit
    ):
        # A text message's JSON spells each character in at most 6 bytes (4 in UTF-8,
        # 6 as a \u escape) around at most 96 bytes of keys and role: under the limit
        # whatever its text, so the common message is not serialized to be measured.
        return
    size = message_bytes(message)
    if size > limit:
        raise MessageTooLargeError(
            f"the {field} is {size} bytes, over max_message_bytes ({limit})",
            field=field,
            role=message.role,
            limit=limit,
            size=size,
            unit="bytes",
            setting="max_message_bytes",
        )


def check_message_tokens(tokens: int, settings: Settings, *, field: str = "message") -> None:
    """``MessageTooLargeError`` if ``tokens`` is over ``settings.max_message_tokens``."""
    limit = settings.max_message_tokens
    if tokens > limit:
        raise MessageTooLargeError(
            f"the {field} is {tokens} tokens, over max_message_tokens ({limit})",
            field=field,
            limit=limit,
            size=tokens,
            unit="tokens",
            setting="max_message_tokens",
        )


def with_default_cap(policy: ReductionPolicy, model: str) -> ReductionPolicy:
    """``policy`` with ``max_context_tokens`` set to the model's default cap when it
    sets none. A policy whose own windows cannot fit under that cap (``keep_tokens``
    plus ``max_summary_tokens``) is kept as it is, and so is ``ReductionPolicy.off()``
    (it reduces nothing, the cap included)."""
    if policy.max_context_tokens is not None or policy.strategy == "off":
        return policy
    hit = _CAPPED.get((id(policy), model))
    if hit is not None and hit[0] is policy:  # frozen: the same policy caps the same way
        return hit[1]
    try:
        capped = ReductionPolicy(**{**policy.model_dump(), "max_context_tokens": default_context_cap(model)})
    except InvalidPolicyError:
        capped = policy
    if len(_CAPPED) >= 256:
        _CAPPED.clear()
    _CAPPED[(id(policy), model)] = (policy, capped)
    return capped


#: ``with_default_cap``'s answers, by the policy's id and the model (the policy held,
#: so that its id names it while it is here).
_CAPPED: dict[tuple[int, str], tuple[ReductionPolicy, ReductionPolicy]] = {}
