"""Audits of the log and what-if replays.

- ``audit``: verify (the digest chains), replay, export;
- ``integrity``: what verify checks beside the chains: seals, snapshots, token counts;
- ``erased``: what verify checks of an erased part: the structure its erasure recorded;
- ``whatif``: what a candidate reduction policy would have sent;
- ``whatif_candidate``: the simulated side, one conversation in memory;
- ``whatif_results``: the replay's typed results and the price table.

May import: summaries, projections, formats, following, storage, shared, and the domain.
"""
