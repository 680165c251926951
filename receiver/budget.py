"""The API budget left, for /metrics (read from the client's shared budget store when present)."""

from __future__ import annotations

import logging

from partnerkit.config import Config
from partnerkit.store import Database

log = logging.getLogger(__name__)


def remaining_budget(config: Config, db: Database) -> int | None:
    """Requests left in the current hour for this API key, or None if it cannot be told."""
    try:
        from partnerkit.store import budget
    except ImportError:
        return None
    reader = getattr(budget, "remaining", None)
    if reader is None:
        return None
    try:
        return int(reader(db, config))
    except Exception:  # metrics must never break a scrape
        log.debug("budget not readable", exc_info=True)
        return None
