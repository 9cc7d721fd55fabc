"""The ``TokenCounter`` port's adapters.

- ``tokens``: ``TiktokenCounter``, OpenAI's per-message formula;
- ``encodings``: o200k_base and cl100k_base, shipped in ``bpe/`` and checksummed;
- ``estimates``: Claude and Gemini counts by calibrated estimate;
- ``anthropic_counter``: Claude counts from Anthropic's ``count_tokens`` endpoint.

The bottom of the infrastructure layer's rooms. May import: the layer's loose
modules, the application layer and the domain.
"""
