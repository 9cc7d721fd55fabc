"""The edit commands of the ``Conversation`` aggregate: retract, rewind, pop, clear,
edit, change the system prompt, fork; and the invalidation of summaries they cause.

Each command checks, then triggers one event (and a ``SummaryInvalidated`` or
``ThresholdReached`` where the edit causes one). The log is never rewritten: an edit
is a new event. What an edit needs of summarized history (messages no longer in the
bounded state) comes in as a ``History`` read from the log by the application.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self
from uuid import UUID

from contextledger.domain.commands.edits import (
    History,
    edit_record,
    plan_invalidation,
    retraction_record,
    system_prompt_record,
)
from contextledger.domain.events import (
    Forked,
    ForkOrigin,
    MessageEdited,
    MessagesRetracted,
    SummaryInvalidated,
    SystemPromptChanged,
)
from contextledger.domain.folding.aggregate import ConversationRoot
from contextledger.domain.folding.budget import check_budget
from contextledger.domain.folding.queries import fixed_tokens, is_retracted, layer_of, newest_group_tokens
from contextledger.domain.values.digests import commit, edit_content, structure
from contextledger.domain.values.errors import (
    ContextOverflowError,
    InvalidEditError,
    InvalidMessageError,
    RetractedPositionError,
    SystemPromptEditError,
    UnknownPositionError,
)
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import (
    Entry,
    SummaryLayer,
)
from contextledger.domain.values.validation import check_position

__all__ = ["EditCommands"]


class EditCommands(ConversationRoot):
    """The edit commands; ``Conversation`` inherits them."""

    def retract(
        self, position: int, *, reason: str | None = None, history: History, at: datetime
    ) -> list[int]:
        """Command: retract the message at ``position`` from the working memory and all
        future summaries; returns the retracted positions.

        A tool-call group goes as a whole: retracting an assistant tool-call message
        retracts its results, retracting one result retracts its whole group.
        """
        self._check_position(position)
        group = [e.position for e in self._group_of(position, history)]
        self._retract(group, command="retract", reason=reason, history=history, at=at)
        return group

    def rewind(self, position: int, *, history: History, at: datetime) -> list[int]:
        """Command: retract every message after ``position`` (-1: all of them);
        returns the retracted positions (empty, and nothing recorded, if none)."""
        s = self.state
        check_position(position, conversation_id=self.id)
        if not -1 <= position < s.next_position:
            raise UnknownPositionError(
                "no message was appended at that position",
                conversation_id=self.id,
                position=position,
                next_position=s.next_position,
            )
        after = self._live_entries(position + 1, s.next_position - 1, history)
        if not after:
            return []
        if after[0].message.role == "tool":
            raise InvalidEditError(
                f"rewinding to {position} would split the tool-call group that answers "
                f"{after[0].message.tool_call_id!r}: rewind to the group's last result or "
                "before its assistant message",
                conversation_id=self.id,
                position=position,
            )
        positions = [e.position for e in after]
        self._retract(positions, command="rewind", reason=None, history=history, at=at, entries=after)
        return positions

    def pop(self, *, history: History, at: datetime) -> list[Entry]:
        """Command: retract the newest message or tool-call group; returns its entries."""
        s = self.state
        newest = s.next_position - 1
        for a, b in reversed(s.retracted):
            if a <= newest <= b:
                newest = a - 1
        if newest < s.erased_before:  # (0 but in a fork whose inherited part was erased)
            raise InvalidEditError("there is no message left to pop", conversation_id=self.id)
        group = self._group_of(newest, history)
        self._retract(
            [e.position for e in group], command="pop", reason=None, history=history, at=at, entries=group
        )
        return group

    def clear(self, *, history: History, at: datetime) -> list[int]:
        """Command: retract every message (the system prompt stays)."""
        s = self.state
        entries = self._live_entries(0, s.next_position - 1, history)
        if not entries:
            return []
        positions = [e.position for e in entries]
        self._retract(positions, command="clear", reason=None, history=history, at=at, entries=entries)
        return positions

    def edit(
        self,
        position: int,
        message: Message,
        *,
        tokens: int,
        placeholder_tokens: int | None,
        history: History,
        at: datetime,
    ) -> bool:
        """Command: replace the message at ``position`` with a new version (same role;
        a tool result keeps its ``tool_call_id``, a tool-call message its call ids).
        False, and nothing recorded, if it is the same message."""
        old = self.current_entry(position, history)
        if message == old.message:
            return False
        self._check_replacement(old, message)
        s = self.state
        cap = s.policy.max_context_tokens
        if cap is not None and fixed_tokens(s) + tokens > cap:
            raise ContextOverflowError(
                "the edited message cannot fit under max_context_tokens with the system prompt and summaries",
                conversation_id=self.id,
                tokens=tokens,
                limit=cap,
            )
        self._trigger(
            MessageEdited,
            at,
            position=position,
            message=message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            replaces_version=old.version,
            replaced_tokens=old.tokens,
            **commit(
                s.digest,
                structure("edit", self.version + 1, at, position, old.version),
                edit_content(edit_record(position, old.version, message)),
            ),
        )
        edited = Entry(
            position=position,
            version=self.version,
            message=message,
            tokens=tokens,
            placeholder_tokens=placeholder_tokens,
            tool_name=old.tool_name,
        )
        self._invalidate({position}, "edited", history=history, at=at, override=edited)
        self._maybe_pin_range(at)
        return True

    def change_system_prompt(self, system_prompt: str | None, *, tokens: int, at: datetime) -> bool:
        """Command: replace the system prompt from now on. False if it is the same."""
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise InvalidMessageError("system_prompt must be a string or None", conversation_id=self.id)
        s = self.state
        if system_prompt == s.system_prompt:
            return False
        tokens = tokens if system_prompt is not None else 0
        cap = s.policy.max_context_tokens
        if cap is not None:
            rest = fixed_tokens(s) - (s.system_tokens if s.system_prompt is not None else 0)
            if rest + tokens + newest_group_tokens(s, after=-1) > cap:
                raise ContextOverflowError(
                    "the new system prompt leaves no room under max_context_tokens",
                    conversation_id=self.id,
                    tokens=tokens,
                    limit=cap,
                )
        check_budget(
            s.policy,
            tools_tokens=s.tools_tokens,
            system_tokens=tokens,
            reply_priming=s.reply_priming,
            conversation_id=self.id,
        )
        self._trigger(
            SystemPromptChanged,
            at,
            system_prompt=system_prompt,
            system_tokens=tokens,
            **commit(
                s.digest,
                structure("system_prompt", self.version + 1, at),
                edit_content(system_prompt_record(system_prompt)),
            ),
        )
        if s.policy.counts_prompt:  # the trigger counts the system prompt: look again
            self._maybe_pin_range(at)
        return True

    @classmethod
    def fork(cls, source: Self, conversation_id: UUID, *, key: str | None, at: datetime) -> Self:
        """Command: a new conversation whose history is ``source``'s as it stands (pass a
        copy at a past version to fork from there). Its summaries are reused and its
        digest chain continues from the source's."""
        state = source.state.clone()
        state.summaries = [_from_origin(layer, source.id) for layer in state.summaries]
        state.inherited_summaries = source.state.summaries_created + source.state.inherited_summaries
        state.pending = None
        state.fork_of = ForkOrigin(
            conversation_id=source.id,
            version=source.version,
            through_position=state.next_position - 1,
        )
        for name in (
            "summaries_created",
            "summarizer_calls",
            "summarizer_failures",
            "summarizer_input_tokens",
            "summarizer_output_tokens",
            "provider_prompt_tokens",
            "provider_completion_tokens",
            "provider_estimated_prompt_tokens",
            "usage_records",
            "provider_cache_read_tokens",
            "provider_cache_creation_tokens",
            "reduction_hits",
            "reduction_misses",
            "summaries_invalidated",
        ):
            setattr(state, name, 0)
        state.reported_prompt_tokens = None
        state.key = key
        event = Forked(
            originator_id=conversation_id,
            originator_version=1,
            timestamp=at,
            origin=state.fork_of,
            key=key,
            state=state.model_dump(mode="json"),
            digest=state.digest,
        ).sealed()
        conversation = cls.apply(None, event)
        conversation._pending_events.append(event)
        conversation._maybe_pin_range(at)
        return conversation

    # -- edit helpers -------------------------------------------------------------------

    def _check_position(self, position: int) -> None:
        s = self.state
        check_position(position, conversation_id=self.id)
        if position == -1:
            raise SystemPromptEditError(
                "the system prompt is not a message: change it with change_system_prompt()",
                conversation_id=self.id,
                position=position,
            )
        if not 0 <= position < s.next_position:
            raise UnknownPositionError(
                "no message was appended at that position",
                conversation_id=self.id,
                position=position,
                next_position=s.next_position,
            )
        if position < s.erased_before:
            raise UnknownPositionError(
                "nothing is left of the message at that position: the fork inherited it, and "
                "its source's data subject was erased",
                conversation_id=self.id,
                position=position,
                next_position=s.next_position,
            )
        if is_retracted(s, position):
            raise RetractedPositionError(
                "the message at that position was retracted", conversation_id=self.id, position=position
            )

    def current_entry(self, position: int, history: History) -> Entry:
        """The current version of the message at ``position`` (window or log)."""
        self._check_position(position)
        for entry in self.state.window:
            if entry.position == position:
                return entry
        found = history.entries(position, position)
        if not found:  # pragma: no cover - the log and the state disagree
            raise UnknownPositionError(
                "the log holds no message at that position", conversation_id=self.id, position=position
            )
        return found[0]

    def _live_entries(self, from_position: int, through_position: int, history: History) -> list[Entry]:
        """Current non-retracted entries in the range, from the window or the log."""
        s = self.state
        if from_position > through_position:
            return []
        in_window = {e.position: e for e in s.window}
        window_from = min(in_window, default=s.next_position)
        out: list[Entry] = []
        if from_position < window_from or any(
            layer.through_position >= from_position for layer in s.summaries
        ):
            for entry in history.entries(from_position, min(through_position, s.next_position - 1)):
                if entry.position not in in_window and not is_retracted(s, entry.position):
                    out.append(entry)
        out.extend(e for p, e in in_window.items() if from_position <= p <= through_position)
        return sorted(out, key=lambda e: e.position)

    def _group_of(self, position: int, history: History) -> list[Entry]:
        """The tool-call group holding ``position`` (just the message if it is none)."""
        s = self.state
        in_window = any(e.position == position for e in s.window)
        if in_window:
            entries = list(s.window)
        else:
            layer = layer_of(s, position)
            low, high = (layer.from_position, layer.through_position) if layer else (0, s.next_position - 1)
            entries = [e for e in history.entries(low, high) if not is_retracted(s, e.position)]
        index = next(i for i, e in enumerate(entries) if e.position == position)
        start = index
        while start > 0 and not entries[start].starts_group:
            start -= 1
        end = start + 1
        while end < len(entries) and not entries[end].starts_group:
            end += 1
        return entries[start:end]

    def _check_replacement(self, old: Entry, message: Message) -> None:
        before = old.message
        if message.role != before.role:
            raise InvalidEditError(
                f"an edit keeps the role ({before.role}), it cannot become {message.role}",
                conversation_id=self.id,
                position=old.position,
                field="role",
            )
        if message.tool_call_id != before.tool_call_id:
            raise InvalidEditError(
                "an edited tool result keeps its tool_call_id",
                conversation_id=self.id,
                position=old.position,
                field="tool_call_id",
            )
        ids_before = [c.id for c in before.tool_calls or ()]
        ids_after = [c.id for c in message.tool_calls or ()]
        if ids_before != ids_after:
            raise InvalidEditError(
                f"an edited tool-call message keeps its call ids {ids_before}",
                conversation_id=self.id,
                position=old.position,
                field="tool_calls",
            )

    def _retract(
        self,
        positions: list[int],
        *,
        command: Literal["retract", "rewind", "pop", "clear"],
        reason: str | None,
        history: History,
        at: datetime,
        entries: list[Entry] | None = None,
    ) -> None:
        s = self.state
        if entries is None:
            wanted = set(positions)
            live = self._live_entries(min(positions), max(positions), history)
            entries = [e for e in live if e.position in wanted]
        self._trigger(
            MessagesRetracted,
            at,
            positions=tuple(positions),
            command=command,
            reason=reason,
            tokens=sum(e.tokens for e in entries),
            **commit(
                s.digest,
                structure("retract", self.version + 1, at, command, ",".join(map(str, positions))),
                edit_content(retraction_record(command, positions, reason)),
            ),
        )
        reason_text = {"retract": "retracted", "rewind": "rewound", "pop": "popped", "clear": "cleared"}
        self._invalidate(set(positions), reason_text[command], history=history, at=at)
        self._maybe_pin_range(at)

    def _invalidate(
        self,
        changed: set[int],
        reason: str,
        *,
        history: History,
        at: datetime,
        override: Entry | None = None,
    ) -> None:
        """Invalidate the summaries the change at ``changed`` reaches (after its event)."""
        s = self.state
        plan = plan_invalidation(s.summaries, changed)
        if plan is None:
            return
        trigger_version = self.version
        layers: list[SummaryLayer] = list(plan.kept)
        for link, chain in plan.restored:
            layers.append(
                SummaryLayer(
                    from_position=link.from_position,
                    through_position=link.through_position,
                    text=history.summary_text(link),
                    message_tokens=link.message_tokens,
                    link=link,
                    chain=chain,
                )
            )
        in_window = {e.position for e in s.window}
        reopened: list[Entry] = []
        for low, high in plan.reopened:
            for entry in history.entries(low, high):
                if entry.position in in_window or is_retracted(s, entry.position):
                    continue
                if override is not None and entry.position == override.position:
                    entry = override
                reopened.append(entry)
        self._trigger(
            SummaryInvalidated,
            at,
            reason=reason,
            trigger_version=trigger_version,
            invalidated_versions=plan.invalidated_versions,
            invalidated_inherited=plan.invalidated_inherited,
            layers=tuple(sorted(layers, key=lambda layer: layer.from_position)),
            reopened=tuple(sorted(reopened, key=lambda e: e.position)),
        )


def _from_origin(layer: SummaryLayer, origin: UUID) -> SummaryLayer:
    """The layer as a fork sees it: its links name the log that holds them."""

    def fix(link: Any) -> Any:
        return link if link is None or link.origin is not None else link.model_copy(update={"origin": origin})

    return layer.model_copy(update={"link": fix(layer.link), "chain": tuple(fix(x) for x in layer.chain)})
