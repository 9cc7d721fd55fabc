"""Read models as projections of the ledger's log, and the runner that keeps them.

- ``base``: ``ReadModelProjection``, the view ports (``Protocol`` classes) and the
  records the views return;
- one module per built-in read model: ``transcript``, ``summaries``,
  ``token_totals``, ``conversations``;
- ``runner``: ``ReadModelRunner``, the ``LogFollower`` that applies the log to
  projections and rebuilds them by name.

``contextledger.infrastructure.readmodels`` implements the views on SQL tables.

May import: formats, following, storage, shared, and the domain.
"""

from contextledger.application.projections.base import (
    ConversationRecord,
    ConversationsView,
    ReadModelProjection,
    ReadModelView,
    SummariesView,
    TokenTotalsRecord,
    TokenTotalsView,
    TranscriptView,
)
from contextledger.application.projections.conversations import ConversationsProjection
from contextledger.application.projections.runner import ProgressCallback, ReadModelRunner
from contextledger.application.projections.summaries import SummariesProjection
from contextledger.application.projections.token_totals import TokenTotalsProjection
from contextledger.application.projections.transcript import TranscriptProjection
from contextledger.domain.values.errors import TrackingRewoundError, UnknownReadModelError

__all__ = [
    "ConversationRecord",
    "ConversationsProjection",
    "ConversationsView",
    "ProgressCallback",
    "ReadModelProjection",
    "ReadModelRunner",
    "ReadModelView",
    "SummariesProjection",
    "SummariesView",
    "TokenTotalsProjection",
    "TokenTotalsRecord",
    "TokenTotalsView",
    "TrackingRewoundError",
    "TranscriptProjection",
    "TranscriptView",
    "UnknownReadModelError",
]
