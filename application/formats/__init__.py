"""Wire formats: one adapter module per format a message can arrive in or leave as.

Each inbound adapter turns what a caller handed ``append`` into the domain's
``Message`` values in one pass (``base.Decoded``); each outbound renderer turns the
working memory into what a provider's API takes. ``base`` holds the shapes they share.

Inbound, today:

- ``openai_chat``: Chat Completions message params, ``Message`` values and the openai
  SDK's ``ChatCompletionMessage`` and ``ChatCompletion``; the default format.
- ``responses``: OpenAI Responses items (what ``append``, ``append_items`` and the agent sessions
  take) and the SDK's ``Response``; ``DecodedItems`` keeps the raw items
  (``responses_render`` renders the working memory back as a request).
- ``anthropic``: Anthropic message params and the SDK's ``Message`` replies
  (``anthropic_render`` renders the working memory back as a request).
- ``gemini``: google-genai ``Content`` values and ``GenerateContentResponse`` replies
  (``gemini_render`` renders the working memory back as a request).
- ``inbound``: ``decode(obj)``, which asks the adapters of its ``ADAPTERS`` registry
  in order and falls back on ``openai_chat``.

Adding a format: write ``formats/<name>.py`` with a class that has a ``name`` and the
``accepts``/``decode`` of ``base.InboundAdapter`` (``accepts`` true only for objects
unmistakably in the format, cheap, without decoding; ``decode`` in one pass, building
each ``Message`` once, refusing what is malformed with ``InvalidMessageError``), then
add its instance as one line to ``ADAPTERS`` in ``formats/inbound.py``, ahead of any
adapter that would also accept its objects. Nothing else changes.

This package's ``__init__`` imports nothing, so an adapter importing ``formats.base``
never loads the registry.

Beside the adapters, what messages carry of their provider's form:

- ``originals``: messages kept with the framework's own form of them;
- ``items``: Responses-format items in and out of a conversation.

May import: following, storage, shared, and the domain.
"""
