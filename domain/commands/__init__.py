"""The ``Conversation`` aggregate's commands beyond appending: edits and summaries.

- ``editing``: ``EditCommands``: retract, rewind, pop, clear, edit, change the system
  prompt, fork; the summaries an edit invalidates;
- ``edits``: the pure pieces of editing: the history port, the invalidation plan, the
  digest records of edits, the fold of a log into its current messages;
- ``links``: the digest chain's links as verify recomputes them: each link's
  structure and committed content, and the link an event should carry;
- ``summarizing``: ``SummaryCommands``: what the summarizer is given, the recording
  of its result (the quality gate) or of its failure.

The aggregate's class (``conversation``) inherits these commands. May import: folding,
events (with client_ids, placement and erasure beside it), values.
"""
