"""What the token trigger and ``keep_tokens`` count besides the unsummarized messages.

A policy's ``token_scope`` decides it. ``prompt`` (new policies): the trigger sees what
the whole prompt costs, as the cap counts it (reply priming, tool definitions, system
prompt, summaries where the policy places them, and the messages), and ``keep_tokens``
bounds the kept messages plus the part of the prompt no summary can shrink (priming,
tools, system prompt). ``messages`` (policies stored before the option): the trigger
sees the messages and the tool definitions, and ``keep_tokens`` the kept messages.
"""

from __future__ import annotations

from uuid import UUID

from contextledger.domain.folding.queries import fixed_tokens, reported_offset
from contextledger.domain.folding.state import ConversationState
from contextledger.domain.values.errors import InvalidPolicyError
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["check_budget", "keep_offset", "keep_scale", "trigger_extra"]


def trigger_extra(s: ConversationState) -> int:
    """Tokens the token trigger adds to the unsummarized messages' own: with the
    provider's count of the prefix where a usage report gave one (``reported_offset``)."""
    return (fixed_tokens(s) if s.policy.counts_prompt else s.tools_tokens) + (reported_offset(s) or 0)


def keep_offset(s: ConversationState) -> int:
    """Tokens ``keep_tokens`` spends before the kept messages."""
    if not s.policy.counts_prompt:
        return 0
    system = s.system_tokens if s.system_prompt is not None else 0
    return _base(s.policy, system, s.reply_priming, s.tools_tokens)


def keep_scale(s: ConversationState) -> float:
    """The provider's tokens per token of our estimate, by the calibrating usage report
    the trigger counts with (``reported_offset``); 1.0 without one, or when the
    provider counted less than we did. The kept window is bounded by this calibrated
    count: a trigger that fires on the provider's count, with a keep budget counted
    by the estimate alone, could keep every unsummarized message and summarize nothing."""
    if reported_offset(s) is None or s.reported_prompt_tokens is None or s.reported_estimate_tokens <= 0:
        return 1.0
    return max(1.0, s.reported_prompt_tokens / s.reported_estimate_tokens)


def _base(policy: ReductionPolicy, system_tokens: int, reply_priming: int, tools_tokens: int) -> int:
    return system_tokens + reply_priming + tools_tokens if policy.counts_prompt else tools_tokens


def check_budget(
    policy: ReductionPolicy,
    *,
    tools_tokens: int,
    system_tokens: int,
    reply_priming: int,
    conversation_id: UUID,
) -> None:
    """Refuse a policy whose token trigger can never settle: what no summary can
    shrink (the tools; with ``token_scope="prompt"`` also the system prompt and reply
    priming) plus ``keep_tokens`` must stay below ``trigger_tokens``, or every summary
    would leave the trigger crossed and fire again at once."""
    if policy.trigger_tokens is None:
        return
    base = _base(policy, system_tokens, reply_priming, tools_tokens)
    keep = policy.keep_tokens or 0
    if base and base + keep >= policy.trigger_tokens:
        if policy.counts_prompt:
            what = (
                f"the system prompt ({system_tokens} tokens), the tool definitions "
                f"({tools_tokens}) and reply priming ({reply_priming}) plus keep_tokens ({keep})"
            )
            why = "token_scope='prompt' counts the whole prompt"
        else:
            what = f"the tool definitions ({tools_tokens} tokens) plus keep_tokens ({keep})"
            why = "the token trigger counts the tools sent with every call"
        raise InvalidPolicyError(
            f"{what} must stay below trigger_tokens ({policy.trigger_tokens}): {why}",
            conversation_id=conversation_id,
        )
