"""A conversation's state and how its events fold into it, with the reads over it.

- ``aggregate``: ``ConversationRoot``, what every part of the aggregate stands on:
  identity, version, state, the fold of its events and the triggering of new ones;
- ``state``: ``ConversationState`` (what snapshots store) and ``PendingRange``;
- ``fold``: the fold of each event into the state;
- ``queries``: the working memory, what it costs, where the summaries stand, which
  positions are retracted or summarized;
- ``sums``: running sums over the window, carried from append to append;
- ``budget``: what the token trigger and ``keep_tokens`` count besides the messages;
- ``thresholds``: when a range is pinned for the next summary (``ThresholdReached``).

May import: events (with client_ids, placement and erasure beside it), values.
"""
