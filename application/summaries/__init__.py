"""Summaries: requested, made and read back.

- ``summary_service``: which summarizer runs, what it is asked, how its answer is kept;
- ``summary_attempts``: one attempt: call the summarizer, record what came of it;
- ``summarization``: ``SummarizationRunner``, the policy: a follower of the log;
- ``history``: summarized history read back from the log (for edits and audits).

May import: projections, formats, following, storage, shared, and the domain.
"""
