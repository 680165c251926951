"""How the hour is shared: what the long background walks leave to the voucher fetches and to the
recharge poller, and what the poller may take for itself."""

from __future__ import annotations

import math
from decimal import Decimal

def background_reserve(hourly_budget: int) -> int:
    """Requests of the hour a long background walk leaves to the voucher fetches customers wait on.

    The syncs (recharges, transactions) and the order catch-up over a date range read every page
    of their lists, which on a busy day is more than the hour holds; with no reserve they would
    take all of it and starve the fetches. A tenth: a walk's own pace barely changes.
    """
    return hourly_budget // 10


def poller_cap(hourly_budget: int, share: Decimal) -> int:
    """Requests of the hour the recharge poller may take for itself: its share (PARTNERKIT_POLLER_BUDGET_SHARE)."""
    return math.floor(hourly_budget * share)


def poller_reserve(hourly_budget: int, share: Decimal) -> int:
    """Requests of the hour the long walks leave to the recharge poller, on top of `background_reserve`.

    The poller's share is a cap on what it takes itself (`acquire(own_cap=...)`), not a part of
    the hour kept for it: without this the syncs and the order catch-up would spend everything
    above the voucher fetches' tenth on a busy day, and PROCESSING recharges would not be read at
    all until the hour slid on, late against the document's polling schedule. So the walks leave
    it a tenth of the hour as well (its whole share when that is smaller: never more than it may take).
    """
    return min(poller_cap(hourly_budget, share), hourly_budget // 10)


def walk_reserve(hourly_budget: int, share: Decimal) -> int:
    """Requests of the hour a long background walk (the syncs, an order catch-up over a range) stops
    at: the voucher fetches' tenth (`background_reserve`) and the poller's slice (`poller_reserve`)."""
    return background_reserve(hourly_budget) + poller_reserve(hourly_budget, share)
