"""Receiver benchmark: `partnerkit serve` vs a bare Flask app under the same gunicorn settings."""
