"""contextledger domain layer."""
