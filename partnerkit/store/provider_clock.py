"""This host's clock against the provider's, as the `Date` header of its answers gives it (written by the
client's transport).

The provider refuses a signed request whose X-Timestamp is over 5 minutes from its own time, so a clock that
far off shows on writes at once (a 401 that names the timestamp: partnerkit.store.budget). Reads carry no
timestamp and pass: a kit that only reads (the receiver, the worker's syncs and its nightly reconciliation)
would never hear of a clock hours off, and that clock dates what it stores. A clock ahead by more than
PARTNERKIT_DUE_HOUR_UTC makes the nightly run report a day that has not ended as complete (docs/reliability.md,
"When the clock was wrong"). Every HTTP answer carries the time of the server that sent it (`Date`, RFC 9110, to
the second), so each answered call compares it with this host's clock: off by more than SKEW_LIMIT_S, the
difference is kept in one meta row, which the next answer within it deletes. `partnerkit status` names it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from partnerkit.errors import StorageError
from partnerkit.store import meta
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso, parse_ts

KEY = "provider.clock_skew"
# The provider's own tolerance for a signed request's X-Timestamp; the header's second adds one.
SKEW_LIMIT_S = 300.0
# A standing record is written again only when the difference moved this much (not on every answer).
REWRITE_S = 30.0


@dataclass(frozen=True)
class Skew:
    """This host's clock was `seconds` ahead of the provider's (behind when negative) at `seen_at` (this clock)."""

    seconds: int
    seen_at: datetime


def provider_time(date_header: str | None) -> datetime | None:
    """The moment an answer's `Date` header names (UTC), or None for none or one that does not parse."""
    if not date_header:
        return None
    try:
        moment = parsedate_to_datetime(date_header)
    except (TypeError, ValueError, IndexError):
        return None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def observe(db: Database, date_header: str | None, now: datetime) -> None:
    """An answer of the provider dated `date_header`, received at `now` (this host's clock): keep the difference
    while it exceeds SKEW_LIMIT_S, forget it once within. Called after every answer, so it reads first: a write
    only when the record changes."""
    provider = provider_time(date_header)
    if provider is None:
        return
    seconds = (now - provider).total_seconds()
    try:
        kept = standing(db)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the provider clock's record: {exc}") from exc
    if abs(seconds) > SKEW_LIMIT_S + 1:
        if kept is None or abs(kept.seconds - seconds) >= REWRITE_S:
            record = {"seconds": round(seconds), "seen_at": iso(now.replace(microsecond=0))}
            with transaction(db) as conn:
                meta.put(conn, KEY, json.dumps(record), now=now)
    elif kept is not None:
        meta.forget(db, KEY, what="the provider clock's record")


def standing(db: Database) -> Skew | None:
    """How far this host's clock was off at the provider's latest answer, when by more than SKEW_LIMIT_S; else
    None (within it, no answer with a Date yet, or a record this version cannot read)."""
    stored = meta.get(db, KEY)
    if not stored:
        return None
    try:
        record = json.loads(stored)
        seen_at = parse_ts(record["seen_at"])
        return None if seen_at is None else Skew(int(record["seconds"]), seen_at)
    except (ValueError, KeyError, TypeError):
        return None
