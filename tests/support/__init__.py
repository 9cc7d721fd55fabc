"""Project-internal test helpers: whole-conversation invariants and the worker process
of the fault tests. What a user of the library would want ships in
``contextledger.testing``."""
