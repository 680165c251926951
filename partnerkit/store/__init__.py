"""partnerkit/store."""
