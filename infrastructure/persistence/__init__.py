"""The event stores and their recorders.

- ``database``: database URLs parsed once → ``Database``; the store's settings
  (``persistence_env``: the factory, mapper and cipher topics);
- ``stores``: opening a store: SQLite file checks, the read-only factories;
  ``sqlite_files``: whether a path can be a SQLite database;
- ``recorders``: names every recorder and factory (stable class paths);
- ``pgstore``, ``pgrecorder``, ``pgkeyrows``, ``group_commit``, ``pgreads``:
  PostgreSQL;
- ``sqlite_recorder``: SQLite; ``memory_recorder``: ``memory://``;
- ``dbapi_errors``: the drivers' errors as eventsourcing's;
- ``moved``: the old paths of moved modules, registered as topics.

Importing the package registers the paths modules had before they moved into rooms
(``moved``), so a kept topic through an old path still resolves.

May import: keys, summarizers, counting, the layer's loose modules, the application
layer and the domain.
"""

from contextledger.infrastructure.persistence.moved import register_moved_paths

register_moved_paths()
