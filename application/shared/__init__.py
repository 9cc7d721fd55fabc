"""What every room of the application layer shares: ports, settings, results.

- ``ports``: ``Summarizer``, ``TokenCounter``, ``SummaryRequest``/``SummaryResult``;
- ``settings``: one typed ``Settings``, the only reader of the environment, and the
  adapters' topics (``resolve_adapter``);
- ``results``: typed, frozen results of the queries; ``wire``: the types handed to the
  openai SDK;
- ``counting``: token counters per model; ``limits``: message size, the default cap;
- ``observability``: tracing and logging hooks;
- ``addressing``: ids or string keys → conversation ids.

The bottom of the application layer. May import: the domain only.
"""
