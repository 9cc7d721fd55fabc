"""The built-in read models on SQLAlchemy tables, for SQLite and PostgreSQL.

- ``storage``: the ``cl_`` tables and the engines they live on (where: see there);
- ``models``: ``SQLReadModels`` (the four read models on one engine),
  ``attach_read_models``, ``READ_MODEL_NAMES``, ``views_path``;
- ``view``: ``SQLView``, the base whose one write path records each change with its
  tracking row in one transaction;
- ``host``: what a view needs of the read models it belongs to (``ReadModelHost``,
  ``SharedTransaction``), so that ``models`` imports the views and no view imports it;
- one module per view: ``transcript``, ``summaries``, ``token_totals``,
  ``conversations``.

May import: persistence, keys, summarizers, counting, the layer's loose modules, the
application layer and the domain.
"""

from contextledger.infrastructure.readmodels.conversations import SQLConversationsView
from contextledger.infrastructure.readmodels.models import (
    READ_MODEL_NAMES,
    SQLReadModels,
    attach_read_models,
    views_path,
)
from contextledger.infrastructure.readmodels.summaries import SQLSummariesView
from contextledger.infrastructure.readmodels.token_totals import SQLTokenTotalsView
from contextledger.infrastructure.readmodels.transcript import SQLTranscriptView
from contextledger.infrastructure.readmodels.view import SQLView

__all__ = [
    "READ_MODEL_NAMES",
    "SQLConversationsView",
    "SQLReadModels",
    "SQLSummariesView",
    "SQLTokenTotalsView",
    "SQLTranscriptView",
    "SQLView",
    "attach_read_models",
    "views_path",
]
