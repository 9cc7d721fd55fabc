"""The ``Summarizer`` port's adapters.

- ``summary_prompt``: the prompt every model-backed summarizer sends;
- ``summarizer_base``: what they share: the timed call, the errors, the result;
- ``openai_summarizer``, ``anthropic_summarizer``, ``gemini_summarizer``: one per SDK
  (the SDKs are extras, loaded when used);
- ``offline_summarizer``: extractive and deterministic, no network.

May import: counting, the layer's loose modules, the application layer and the domain.
"""
