"""The budget's notes in the shared `meta` table: what a person needs to judge a block.

One row per key, class and note (`budget.<key hash prefix>.<class>.<what>`, a JSON object): `block`
(why the class was blocked: the 429's call and Retry-After), `unblocked` (who lifted a block by hand,
when, and the block it lifted), and `others` (the signs of another consumer of the key: `_others`).
Times in them are unix seconds, as the budget's own tables keep them.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from typing import Any

from partnerkit.store import meta
from partnerkit.store.db import Database
from partnerkit.timeutil import iso


def moment(epoch: float | None) -> datetime | None:
    """A unix time from the budget's tables or notes as an aware UTC datetime (None stays None)."""
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


def second(epoch: float) -> str:
    """A unix time as ISO 8601 UTC to the second, for a line a person reads."""
    return iso(moment(int(epoch)))


def _name(key: str, budget_class: str, what: str) -> str:
    return f"budget.{key[:16]}.{budget_class}.{what}"


def get(conn: Database | sqlite3.Connection, key: str, budget_class: str, what: str) -> dict | None:
    """One of the notes of the key's class (`key`: the budget's key hash), or None."""
    value = meta.get(conn, _name(key, budget_class, what))
    return None if value is None else json.loads(value)


def put(conn: sqlite3.Connection, key: str, budget_class: str, what: str, value: dict[str, Any], now: float) -> None:
    """Set one of the notes inside the caller's transaction."""
    meta.put(conn, _name(key, budget_class, what), json.dumps(value), now=moment(now))


def unblocked_line(lifted: dict[str, Any] | None) -> str | None:
    """The `unblocked` note as `partnerkit budget show` gives it (last_unblocked), or None."""
    if lifted is None:
        return None
    return (f"by {lifted['by']} at {second(lifted['at'])} (blocked until {second(lifted['blocked_until'])})"
            + (f": {lifted['note']}" if lifted.get("note") else ""))
