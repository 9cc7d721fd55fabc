"""Writing to a conversation: the commands and what they take.

- ``commands``: start, append, extend, tools, policy, usage (``CommandHost`` port);
- ``ledger_edits``: retract, edit, rewind, pop, clear, fork; Responses items in;
- ``idempotency``: client message ids: a retried append returns its first position;
- ``inbound``: what ``append`` takes, decoded in one pass by ``formats.openai_chat``.

May import: reading, privacy, auditing, summaries, projections, formats, following,
storage, shared, and the domain.
"""
