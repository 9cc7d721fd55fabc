"""Base classes for pydantic domain events with pinned topics.

Every event class names its ``TOPIC`` explicitly so that renaming or moving a class
never orphans stored events, and registers it so a fresh process resolves stored
topics without importing anything by module path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.utils import register_topic
from pydantic import BaseModel, ConfigDict

__all__ = ["DomainEvent"]


class DomainEvent(BaseModel):
    """An immutable fact. ``class_version`` + ``upcast_vN_vN+1`` evolve its schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    TOPIC: ClassVar[str] = ""
    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        topic = cls.__dict__.get("TOPIC")
        if topic:
            register_topic(topic, cls)

    def mutate(self, aggregate: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError
