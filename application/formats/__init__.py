"""Wire formats: one adapter module per format a message can arrive in or leave as.

Each inbound adapter turns what a caller handed ``append`` into the domain's
``Message`` values in one pass (``base.Decoded``); each outbound renderer turns the
working memory into what a provider's API takes. ``base`` holds the shapes they share.
"""
