"""The job queue (voucher fetches) and shared counters.

One pending job per (kind, order) is a partial unique index, so queueing twice is a no-op
that may only make the job due sooner. Workers claim due jobs under a lease: a job whose
worker died becomes claimable again when its lease expires. `generation` changes whenever
the job is re-queued, so a worker finishing an older generation re-arms it instead of closing it.

A parked (dead) job's `next_run_at` is the earliest moment a call the provider answers may re-arm it
(`rearm_parked`); `revive_parked` re-arms it by its age alone, whatever the provider does.

Those moments are written on this host's clock. One written while the clock ran ahead, since put back (NTP
stepped it), lies ahead by as much as the clock was off, a day or more, and would hold its job that long:
`claim`, `rearm_parked` and `revive_parked` take a `horizon` (now plus the longest delay the caller ever
schedules, and a margin: `FetchPolicy.latest_s`), and a job whose `next_run_at` lies beyond it is made due
now first (`_put_right`, the one statement of that rule), its `updated_at` too, so a parked one is revived
within the hour.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

from sqlite_utils import Database

from partnerkit.store.db import transaction

VOUCHER_FETCH = "voucher_fetch"


def stamp(moment: datetime) -> str:
    """Fixed-width UTC text (microseconds always present), so stored times sort as text.

    YYYY-MM-DDTHH:MM:SS.ffffffZ. isoformat() of the UTC time, cut before its "+00:00", is that
    text at 60% of strftime's cost (three stamps per webhook); it also pads years below 1000."""
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")[:26] + "Z"


@dataclass(frozen=True)
class Job:
    """A claimed job."""

    id: int
    kind: str
    order_id: int
    expected_status: str | None
    expected_count: int | None
    generation: int
    attempts: int


def queue(conn: sqlite3.Connection, order_id: int, *, now: datetime, expected_status: str | None,
          expected_count: int | None, kind: str = VOUCHER_FETCH) -> None:
    """Queue (or refresh) the pending job for an order, inside the caller's transaction."""
    at = stamp(now)
    conn.execute(
        """INSERT INTO jobs (kind, order_id, state, expected_status, expected_count, next_run_at,
                             created_at, updated_at)
           VALUES (?, ?, 'pending', ?, ?, ?, ?, ?)
           ON CONFLICT (kind, order_id) WHERE state = 'pending' DO UPDATE SET
               expected_status = COALESCE(excluded.expected_status, expected_status),
               expected_count = MAX(COALESCE(excluded.expected_count, 0), COALESCE(expected_count, 0)),
               generation = generation + 1,
               next_run_at = MIN(next_run_at, excluded.next_run_at),
               updated_at = excluded.updated_at""",
        (kind, order_id, expected_status, expected_count, at, at, at))


def _put_right(conn: sqlite3.Connection, kind: str, *, now: datetime, horizon: datetime | None) -> int:
    """Make due now the pending and parked jobs due after `horizon`, inside the caller's transaction; how many.

    No clock that reads `now` scheduled them: `horizon` is now plus the longest delay the caller ever schedules
    (and a margin), so they were dated while this host's clock ran ahead, since put back. Left as they are, they
    would wait as long as the clock was off. A range of `jobs_due` past `horizon`: empty, and cheap, on every
    claim but the first after such a step."""
    if horizon is None:
        return 0
    at = stamp(now)
    return conn.execute("UPDATE jobs SET next_run_at = ?, updated_at = ? WHERE state IN ('pending', 'dead')"
                        " AND next_run_at > ? AND kind = ?", (at, at, stamp(horizon), kind)).rowcount


def claim(db: Database, *, owner: str, now: datetime, lease_until: datetime, limit: int,
          kind: str = VOUCHER_FETCH, horizon: datetime | None = None) -> list[Job]:
    """Lease up to `limit` due pending jobs to `owner`; no other owner gets them until the lease ends.

    The owner's own unexpired leases are taken back: the caller runs one claim at a time, so such a
    lease is a leftover of its previous run that could not be released (the database was full).
    A job due after `horizon` is due now (`_put_right`)."""
    at = stamp(now)
    with transaction(db) as conn:
        _put_right(conn, kind, now=now, horizon=horizon)
        rows = conn.execute(
            """SELECT id, kind, order_id, expected_status, expected_count, generation, attempts FROM jobs
               WHERE kind = ? AND state = 'pending' AND next_run_at <= ?
                 AND (lease_expires_at IS NULL OR lease_expires_at <= ? OR lease_owner = ?)
               ORDER BY next_run_at LIMIT ?""", (kind, at, at, owner, limit)).fetchall()
        for row in rows:
            conn.execute("UPDATE jobs SET lease_owner = ?, lease_expires_at = ?, updated_at = ? WHERE id = ?",
                         (owner, stamp(lease_until), at, row[0]))
    return [Job(*row) for row in rows]


def finish(conn: sqlite3.Connection, job: Job, *, now: datetime, state: str, error: str | None = None,
           rearm_at: datetime | None = None) -> bool:
    """Close a claimed job as done or dead; if it was re-queued meanwhile, re-arm it instead.

    `rearm_at` (a job parked dead): the earliest moment `rearm_parked` may re-arm it, kept in `next_run_at`."""
    at = stamp(now)
    cursor = conn.execute(
        """UPDATE jobs SET state = ?, last_error = ?, attempts = attempts + 1, lease_owner = NULL,
                          lease_expires_at = NULL, updated_at = ?, next_run_at = COALESCE(?, next_run_at)
           WHERE id = ? AND generation = ? AND state = 'pending'""",
        (state, error, at, None if rearm_at is None else stamp(rearm_at), job.id, job.generation))
    if cursor.rowcount:
        return True
    release(conn, job, now=now, next_run_at=now, error=error, count_attempt=False)
    return False


def release(conn: sqlite3.Connection, job: Job, *, now: datetime, next_run_at: datetime, error: str | None,
            count_attempt: bool = True) -> None:
    """Give a claimed job back, due again at `next_run_at` (a re-queue meanwhile keeps its earlier time)."""
    conn.execute(
        """UPDATE jobs SET attempts = attempts + ?, last_error = ?, lease_owner = NULL, lease_expires_at = NULL,
                          next_run_at = CASE WHEN generation = ? THEN ? ELSE MIN(next_run_at, ?) END,
                          updated_at = ?
           WHERE id = ? AND state = 'pending'""",
        (1 if count_attempt else 0, error, job.generation, stamp(next_run_at), stamp(next_run_at),
         stamp(now), job.id))


# A parked job is re-armed only while it is the newest of its order (a newer job, pending or done, has taken
# over otherwise), so the one-pending-job-per-order index always holds.
_NEWEST = "id = (SELECT MAX(id) FROM jobs AS k WHERE k.kind = j.kind AND k.order_id = j.order_id)"


def revive_parked(db: Database, *, now: datetime, parked_before: datetime, limit: int,
                  kind: str = VOUCHER_FETCH, horizon: datetime | None = None) -> list[int]:
    """Re-arm dead jobs parked at or before `parked_before`: due now, one more try each; their order ids.

    Only a job that is still the newest of its order is revived (`_NEWEST`). Its attempts are kept: the
    fetch policy parks it again after a single failed try, so a parked fetch costs one call per
    revival, never a fresh series of retries. One parked under a clock since put back (`_put_right`,
    `horizon`) counts as parked now.
    """
    with transaction(db) as conn:
        _put_right(conn, kind, now=now, horizon=horizon)
        rows = conn.execute(
            f"""SELECT id, order_id FROM jobs AS j WHERE kind = ? AND state = 'dead' AND updated_at <= ? AND {_NEWEST}
                ORDER BY updated_at LIMIT ?""", (kind, stamp(parked_before), limit)).fetchall()
        return _rearm(conn, rows, now=now, counter=f"{kind}.revived")


def rearm_parked(conn: sqlite3.Connection, *, now: datetime, limit: int | None = None,
                 order_ids: Iterable[int] | None = None, whenever: bool = False, kind: str = VOUCHER_FETCH,
                 horizon: datetime | None = None) -> list[int]:
    """Re-arm, inside the caller's transaction, dead jobs whose re-arm moment (`finish(rearm_at=...)`) has
    come: due now, one more try each, as `revive_parked`; their order ids, at most `limit`.

    For a caller that has just had an answer from the provider. `order_ids`: only those orders' jobs;
    with `whenever`, each of theirs whatever its re-arm moment (a person asked for them now). A re-arm
    moment after `horizon` has come (`_put_right`).
    """
    _put_right(conn, kind, now=now, horizon=horizon)
    terms, args = ["kind = ?", "state = 'dead'", _NEWEST], [kind]
    if order_ids is not None:
        ids = sorted(set(order_ids))
        if not ids:
            return []
        terms.append(f"order_id IN ({', '.join('?' * len(ids))})")
        args += ids
    if not whenever:
        terms.append("next_run_at <= ?")
        args.append(stamp(now))
    rows = conn.execute(f"SELECT id, order_id FROM jobs AS j WHERE {' AND '.join(terms)} ORDER BY next_run_at"
                        + ("" if limit is None else " LIMIT ?"), (*args, *(() if limit is None else (limit,)))).fetchall()
    return _rearm(conn, rows, now=now, counter=f"{kind}.rearmed")


def bring_forward(db: Database, *, now: datetime, until: datetime, kind: str = VOUCHER_FETCH) -> int:
    """Make due now the pending jobs due after now and no later than `until` (a request budget block
    lifted by hand: what waited for it need not wait on); how many."""
    at = stamp(now)
    with transaction(db) as conn:
        cursor = conn.execute("UPDATE jobs SET next_run_at = ?, updated_at = ? WHERE kind = ? AND state = 'pending'"
                              " AND next_run_at > ? AND next_run_at <= ?", (at, at, kind, at, stamp(until)))
    return cursor.rowcount


def _rearm(conn: sqlite3.Connection, rows: list, *, now: datetime, counter: str) -> list[int]:
    """Make the (id, order_id) dead jobs pending and due now, their attempts kept; their order ids."""
    at = stamp(now)
    for job_id, _ in rows:
        conn.execute(
            """UPDATE jobs SET state = 'pending', generation = generation + 1, next_run_at = ?,
                              lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
               WHERE id = ? AND state = 'dead'""", (at, at, job_id))
    if rows:
        bump(conn, counter, len(rows))
    return [order_id for _, order_id in rows]


def latest_for_orders(db: Database, order_ids: list[int], kind: str = VOUCHER_FETCH) -> dict[int, dict]:
    """The newest job of each order: state, attempts, last_error, next_run_at."""
    if not order_ids:
        return {}
    marks = ", ".join("?" * len(order_ids))
    cursor = db.execute(
        f"""SELECT order_id, state, attempts, last_error, next_run_at FROM jobs
            WHERE kind = ? AND order_id IN ({marks}) ORDER BY id""", (kind, *order_ids))
    return {row[0]: {"state": row[1], "attempts": row[2], "last_error": row[3], "next_run_at": row[4]}
            for row in cursor.fetchall()}


def counts_by_state(db: Database, kind: str = VOUCHER_FETCH) -> dict[str, int]:
    """How many jobs are pending, done and dead (the states that have any).

    Read from `tallies`, which triggers keep with every job written (migration 13): `partnerkit status`
    and every /metrics scrape used to count every job ever run."""
    prefix = f"jobs.{kind}."
    rows = db.execute("SELECT substr(name, ?), n FROM tallies WHERE name > ? AND name < ?",
                      (len(prefix) + 1, prefix, prefix[:-1] + "/")).fetchall()
    return {state: n for state, n in rows if n}


def bump(conn: sqlite3.Connection, name: str, by: int = 1) -> None:
    """Add to a shared counter, inside the caller's transaction."""
    conn.execute("INSERT INTO counters (name, value) VALUES (?, ?) "
                 "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value", (name, by))


def counters(db: Database, prefix: str = "") -> dict[str, int]:
    """Shared counters whose name starts with `prefix`."""
    return dict(db.execute("SELECT name, value FROM counters WHERE name LIKE ? ORDER BY name",
                           (prefix.replace("%", "") + "%",)).fetchall())


def queue_if_idle(conn: sqlite3.Connection, order_id: int, *, now: datetime, expected_status: str | None,
                  expected_count: int | None, kind: str = VOUCHER_FETCH) -> bool:
    """Queue a job unless one is pending or one died for this same expectation; True if queued."""
    dead = conn.execute(
        """SELECT 1 FROM jobs WHERE kind = ? AND order_id = ? AND state = 'dead'
           AND expected_status IS ? AND COALESCE(expected_count, -1) >= COALESCE(?, -1)""",
        (kind, order_id, expected_status, expected_count)).fetchone()
    if dead:
        return False  # a parked job is visible in `events list`; a new status re-arms it
    at = stamp(now)
    cursor = conn.execute(
        """INSERT INTO jobs (kind, order_id, state, expected_status, expected_count, next_run_at, created_at, updated_at)
           VALUES (?, ?, 'pending', ?, ?, ?, ?, ?) ON CONFLICT (kind, order_id) WHERE state = 'pending' DO NOTHING""",
        (kind, order_id, expected_status, expected_count, at, at, at))
    return cursor.rowcount == 1
