"""Following the log.

- ``notifications``: the one reader of the notification log;
- ``follower``: ``LogFollower``: start/stop, wake, poll, backoff, shards, health; the
  base of the summarization policy and of the read models' runner.

May import: storage, shared, and the domain.
"""
