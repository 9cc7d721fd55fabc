"""The names of the built-in read models, apart from their SQL (SQLAlchemy) modules: the
command line lists them in ``rebuild --help`` without loading those."""

__all__ = ["READ_MODEL_NAMES"]

READ_MODEL_NAMES = ("transcript", "summaries", "token_totals", "conversations")
