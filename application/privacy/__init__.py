"""Data subjects, erasure, receipts, export and retention.

- ``subjects``: a conversation's data subject, named before its first event;
- ``erasure``: erase: the subject's key tombstoned, ``ContentErased`` recorded, copies
  dropped (snapshots through an adapter named by topic);
- ``retention``: conversations idle for a number of days; a subject erased when all are;
- ``erased_structure``: the structure of what an erasure makes unreadable, taken
  before the key goes (for verify);
- ``receipts``: an erasure's receipt (what was destroyed), checked against a store later;
- ``subject_export``: everything held about a data subject (access and portability);
- ``ledger_privacy``: the ``Ledger``'s ``subject_of``, ``erase``, ``idle_conversations``.

May import: auditing, summaries, projections, formats, following, storage, shared, and
the domain.
"""
