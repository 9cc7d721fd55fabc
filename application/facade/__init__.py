"""The façade: the ``Ledger`` and its lifecycle.

- ``ledger``: ``Ledger``, the eventsourcing ``Application`` users hold; it inherits
  the calls of ``writing.ledger_edits``, ``reading.ledger_reads`` and
  ``privacy.ledger_privacy`` and hands every other call to a collaborator;
- ``opening``: what ``Ledger.open`` is given: settings, store(s), summarizer, shards;
- ``background``: the summarization policy and followers it runs, the listeners of saves;
- ``lifecycle``: closing while calls are in flight (a gate);
- ``read_only``: ``read_only=True``: the calls that write, refused;
- ``async_ledger``: ``AsyncLedger``, the same calls as coroutines;
- ``session_items``: what agent frameworks' sessions expect of Responses items.

The top of the application layer: nothing in the layer imports it (collaborators take a
``Protocol`` port of the ledger instead). May import: writing, reading, privacy,
auditing, summaries, projections, formats, following, storage, shared, and the domain.
"""
