"""Leases in the `locks` table: one holder per name across processes, expiring if not renewed.

A holder takes a lease with `acquire` (BEGIN IMMEDIATE, so two processes never both see it free),
keeps it with `renew` well before `expires_at`, and gives it back with `release`. A holder that
crashes simply stops renewing; after the TTL anyone may take the lease over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso, parse_ts, utcnow


@dataclass(frozen=True)
class Lease:
    """Who holds a named lease and until when."""

    name: str
    holder: str
    acquired_at: datetime
    expires_at: datetime
    acquired: bool  # True when the caller holds it


def acquire(db: Database, name: str, holder: str, ttl_s: float, *, now: datetime | None = None) -> Lease:
    """Take the lease if it is free, expired or already ours; otherwise report the current holder."""
    now = now or utcnow()
    expires = now + timedelta(seconds=ttl_s)
    with transaction(db) as conn:
        row = conn.execute("SELECT holder, acquired_at, expires_at FROM locks WHERE name = ?", (name,)).fetchone()
        if row is not None and row[0] != holder and parse_ts(row[2]) > now:
            return Lease(name, row[0], parse_ts(row[1]), parse_ts(row[2]), acquired=False)  # type: ignore[arg-type]
        acquired_at = parse_ts(row[1]) if row is not None and row[0] == holder else now
        conn.execute("INSERT INTO locks (name, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                     "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                     (name, holder, iso(acquired_at), iso(expires)))
    return Lease(name, holder, acquired_at, expires, acquired=True)  # type: ignore[arg-type]


def renew(db: Database, name: str, holder: str, ttl_s: float, *, now: datetime | None = None) -> bool:
    """Extend our lease; False if someone else holds it now (ours expired and was taken)."""
    now = now or utcnow()
    with transaction(db) as conn:
        cursor = conn.execute("UPDATE locks SET expires_at = ? WHERE name = ? AND holder = ?",
                              (iso(now + timedelta(seconds=ttl_s)), name, holder))
        return cursor.rowcount == 1


def release(db: Database, name: str, holder: str) -> bool:
    """Give the lease back; only its holder can."""
    with transaction(db) as conn:
        cursor = conn.execute("DELETE FROM locks WHERE name = ? AND holder = ?", (name, holder))
        return cursor.rowcount == 1


def current(db: Database, name: str) -> Lease | None:
    """The lease as stored, expired or not."""
    row = db.execute("SELECT holder, acquired_at, expires_at FROM locks WHERE name = ?", (name,)).fetchone()
    if row is None:
        return None
    return Lease(name, row[0], parse_ts(row[1]), parse_ts(row[2]), acquired=False)  # type: ignore[arg-type]
