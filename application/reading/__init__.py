"""Reading a conversation: the queries behind the façade.

- ``queries``: context (in every format), totals, transcript, summaries, what-if,
  verify (``QueryHost`` port);
- ``ledger_reads``: the ``Ledger``'s read calls, each handed to ``queries``.

May import: privacy, auditing, summaries, projections, formats, following, storage,
shared, and the domain.
"""
