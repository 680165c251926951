"""The submit guard's read: open intents that hold back a new submit of the same mobile number and amount.

`reconcile.recharges.submit` asks it inside the transaction that records a new intent, so two submits of one
recharge at once cannot both pass (the order guard's design: `partnerkit.store.order_intents.held`).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from decimal import Decimal

from partnerkit.money import cents
from partnerkit.store.db import Database
from partnerkit.store.recharges._closed import closure
from partnerkit.store.recharges._provider import OPEN_INTENT_SQL
from partnerkit.store.recharges._queries import _rows
from partnerkit.timeutil import iso


def held(db: Database | sqlite3.Connection, *, mobile_number: str, amount: Decimal, since: datetime) -> list[dict]:
    """Open intents (INTENT or UNKNOWN) of `mobile_number` and face `amount` submitted at `since` or later,
    oldest first, whatever their operator: the scope of the provider's own duplicate guard (client, number,
    amount). Times compare as text, as stored (`iso`): only within the boundary's second can the order be off,
    which a hold of hours does not notice.

    One range of the `recharges_status_newest` index: the open intents since `since`, a handful. The `+` keeps
    the planner off `recharges_mobile`, which it prefers without statistics and which holds every recharge of
    the number and amount ever made (a number topped up with the same plan every month for years, a shop's own
    number many times a day); an open intent's `submitted_at` is its COALESCE's value. Not one an operator
    closed (`closure`)."""
    rows = _rows(db.execute(
        f"SELECT * FROM recharges WHERE {OPEN_INTENT_SQL} AND COALESCE(submitted_at, provider_created_at) >= ? "
        "AND +mobile_number = ? AND amount_cents = ? ORDER BY local_id",
        (iso(since), mobile_number, cents(amount))))
    # An intent an operator closed (`recharges close`: checked with the provider, never made) holds nothing back.
    return [row for row in rows if closure(db, row) is None]
