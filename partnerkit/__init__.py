"""partnerkit."""
