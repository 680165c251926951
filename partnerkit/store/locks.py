"""Leases in the `locks` table: one holder per name across processes, expiring if not renewed.

A holder takes a lease with `acquire` (BEGIN IMMEDIATE, so two processes never both see it free),
keeps it with `renew` well before `expires_at`, and gives it back with `release`. A holder that
crashes simply stops renewing; after the TTL anyone may take the lease over (or at once, with
`take_over_from`, when the caller knows that holder's process is gone).

A takeover is recorded in the same transaction, in `meta` (`lock.<name>.taken_over`: who took it, from
whom, when, and when the previous holder's lease ran out), and read back by `taken_over` while the
holder that took it still holds it: `partnerkit status` names a worker lease taken from a worker on
another host. A lease taken free (released, or never held) drops the record.

The voucher fetch jobs carry leases of their own (`jobs.lease_owner`, `lease_expires_at`), taken
only by the worker that holds WORKER_LEASE ("worker"). `release_job_leases` hands back the ones a
previous worker left behind, so a worker killed mid-fetch does not hold its jobs until they expire.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from partnerkit.store import meta
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso, parse_ts, utcnow

# The lease the worker holds while it runs jobs (reconcile.scheduler), which `partnerkit status` reads
# (partnerkit.status) and `partnerkit restore` forgets: named once, here.
WORKER_LEASE = "worker"


@dataclass(frozen=True)
class Lease:
    """Who holds a named lease and until when."""

    name: str
    holder: str
    acquired_at: datetime
    expires_at: datetime
    acquired: bool  # True when the caller holds it
    previous: str | None = None  # on acquisition: the other holder it was taken over from, if any


@dataclass(frozen=True)
class Takeover:
    """A lease its holder took over from another one (that holder's lease expired, or its process was gone)."""

    name: str
    holder: str  # who took it (and holds it still)
    previous: str  # who held it before
    previous_expires_at: datetime  # when the previous holder's lease ran out (later: taken at once, its process gone)
    at: datetime  # when it was taken


def _takeover_key(name: str) -> str:
    return f"lock.{name}.taken_over"


def acquire(db: Database, name: str, holder: str, ttl_s: float, *, now: datetime | None = None,
            take_over_from: str | None = None) -> Lease:
    """Take the lease if it is free, expired, already ours or held by `take_over_from`; else report the holder."""
    now = now or utcnow()
    expires = now + timedelta(seconds=ttl_s)
    with transaction(db) as conn:
        row = conn.execute("SELECT holder, acquired_at, expires_at FROM locks WHERE name = ?", (name,)).fetchone()
        if row is not None and row[0] not in (holder, take_over_from) and parse_ts(row[2]) > now:
            return Lease(name, row[0], parse_ts(row[1]), parse_ts(row[2]), acquired=False)  # type: ignore[arg-type]
        acquired_at = parse_ts(row[1]) if row is not None and row[0] == holder else now
        conn.execute("INSERT INTO locks (name, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                     "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                     (name, holder, iso(acquired_at), iso(expires)))
        if row is None:
            meta.delete(conn, _takeover_key(name))  # taken free: an earlier takeover is history
        elif row[0] != holder:
            meta.put(conn, _takeover_key(name), json.dumps({"holder": holder, "previous": row[0],
                                                            "previous_expires_at": row[2], "at": iso(now)}), now=now)
    previous = row[0] if row is not None and row[0] != holder else None
    return Lease(name, holder, acquired_at, expires, acquired=True, previous=previous)  # type: ignore[arg-type]


def taken_over(db: Database, lease: Lease | None) -> Takeover | None:
    """How `lease` (as `current` read it) was taken over by its holder from another one; None for no lease, a
    lease taken free, or a record of an earlier holder (or one this release cannot read)."""
    raw = meta.get(db, _takeover_key(lease.name)) if lease is not None else None
    if lease is None or raw is None:
        return None
    try:
        record = json.loads(raw)
        if record.get("holder") != lease.holder:
            return None
        return Takeover(lease.name, record["holder"], record["previous"], parse_ts(record["previous_expires_at"]),
                        parse_ts(record["at"]))  # type: ignore[arg-type]
    except (ValueError, TypeError, KeyError, AttributeError):  # not a record this release wrote
        return None


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


def release_job_leases(db: Database, *, keep_prefix: str) -> int:
    """Hand back every pending job's lease whose owner does not start with `keep_prefix`; return how many.

    Only the holder of WORKER_LEASE claims jobs, so the caller (which has just acquired it)
    knows any other job lease belongs to a worker that died or lost the lease; a job it was running
    is re-run from its last committed state (vouchers are stored once by fingerprint).
    """
    with transaction(db) as conn:
        cursor = conn.execute(
            "UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE state = 'pending' AND lease_owner IS NOT NULL AND substr(lease_owner, 1, ?) != ?",
            (len(keep_prefix), keep_prefix))
        return cursor.rowcount


def current(db: Database, name: str) -> Lease | None:
    """The lease as stored, expired or not."""
    row = db.execute("SELECT holder, acquired_at, expires_at FROM locks WHERE name = ?", (name,)).fetchone()
    if row is None:
        return None
    return Lease(name, row[0], parse_ts(row[1]), parse_ts(row[2]), acquired=False)  # type: ignore[arg-type]
