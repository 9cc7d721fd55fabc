"""contextledger infrastructure layer."""
