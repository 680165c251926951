"""partnerkit/client."""
