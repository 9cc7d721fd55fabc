"""The conversation store: conversations loaded, saved and snapshotted.

- ``store``: ``ConversationStore``: cache, locks, load, save, snapshots, retry;
- ``saving``: ``ConversationApplication``, the lean save of conversations;
- ``store_failures``: database failures as ``StoreError``; ``LogDamagedError``;
- ``outage``: what a wait for a lock says while the store is away;
- ``remainders``: a fork whose inherited history was erased, read as what is left;
- ``sharding``: several stores: a conversation's home by hash, placements.

May import: shared, and the domain.
"""
