"""contextledger (placeholder, replaced by the flat namespace)."""
