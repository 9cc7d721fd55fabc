"""contextledger application layer."""
