"""receiver."""
