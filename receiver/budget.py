"""The API budget left, for /metrics (read from the client's shared budget store)."""

from __future__ import annotations

import logging

from partnerkit.config import Config
from partnerkit.store import Database

log = logging.getLogger(__name__)


def remaining_budget(config: Config, db: Database) -> int | None:
    """Requests left in the sliding hour for this API key ("general" class), or None if unknown."""
    if not config.api_key:
        return None
    try:
        from partnerkit.store.budget import GENERAL, Budget

        return int(Budget.from_config(config, db).usage()[GENERAL]["remaining"])
    except Exception:  # a scrape must never fail because the budget cannot be read
        log.debug("budget not readable", exc_info=True)
        return None
