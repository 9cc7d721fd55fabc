"""The event store's recorders, one module per store; this module names them all.

- ``pgrecorder``: ``PostgresConversationRecorder`` and ``PostgresConversationFactory``
  (one round trip per save, group commit, a log final past gaps), with
  ``group_commit.GroupCommit``;
- ``sqlite_recorder``: ``SQLiteConversationRecorder`` and ``SQLiteConversationFactory``
  (the library's statements without its wrappers);
- ``memory_recorder``: ``WindowedPOPORecorder`` and ``MemoryFactory`` (``memory://``:
  reads in time proportional to the events read);
- ``dbapi_errors``: the drivers' errors as eventsourcing's, for both SQL stores.

eventsourcing finds a store's factory by a class path (``PERSISTENCE_MODULE``, as
``Database.persistence_env`` writes it); paths through this module, such as
``contextledger.infrastructure.persistence.recorders:PostgresConversationFactory``, resolve to the
same classes as their defining modules' do.
"""

from contextledger.infrastructure.persistence.group_commit import MAX_BATCH_EVENTS, GroupCommit
from contextledger.infrastructure.persistence.memory_recorder import MemoryFactory, WindowedPOPORecorder
from contextledger.infrastructure.persistence.pgrecorder import (
    PollingSubscription,
    PostgresConversationFactory,
    PostgresConversationRecorder,
)
from contextledger.infrastructure.persistence.pgstore import PostgresSnapshotRecorder
from contextledger.infrastructure.persistence.sqlite_recorder import (
    SQLiteConversationFactory,
    SQLiteConversationRecorder,
)

__all__ = [
    "MAX_BATCH_EVENTS",
    "GroupCommit",
    "MemoryFactory",
    "PollingSubscription",
    "PostgresConversationFactory",
    "PostgresConversationRecorder",
    "PostgresSnapshotRecorder",
    "SQLiteConversationFactory",
    "SQLiteConversationRecorder",
    "WindowedPOPORecorder",
]
