"""The worker's facts for `partnerkit status` and /metrics: the lease it holds, and when it last ran a job.

The worker (reconcile.scheduler) holds the lease WORKER_LEASE (named in partnerkit.store.locks) in the
`locks` table and renews it every few seconds; a clean stop deletes it. Every job run is noted in `meta`
(`note_worker_ran`, at most once a minute), so a worker stopped cleanly, or `worker --once` from a cron line
that stopped, is seen too.
A lease taken over from a holder on another host (`locks.taken_over`) is a sign of two hosts on one
database file, or of a move to a new host under way (`taken_from_another_host`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from partnerkit.processes import holder_alive, holder_is_gone, other_host
from partnerkit.store import Database, locks, meta
from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.store.locks import WORKER_LEASE
from partnerkit.timeutil import parse_ts, utcnow

# When a worker last ran a job, long-running or `worker --once` from cron alike (the lease alone cannot
# say: a clean stop deletes it). Written at most once a minute; `status` names a worker silent for longer
# than PARTNERKIT_WORKER_STALE_S.
WORKER_RAN_KEY = "worker.last_job_at"
WORKER_RAN_EVERY = timedelta(minutes=1)


def note_worker_ran(db: Database, now: datetime | None = None) -> None:
    """Record that a worker ran a job now (a write at most once per WORKER_RAN_EVERY)."""
    now = now or utcnow()
    seen = last_worker_run(db)
    if seen is not None and timedelta(0) <= now - seen < WORKER_RAN_EVERY:
        return
    with transaction(db) as conn:
        meta.put(conn, WORKER_RAN_KEY, stamp(now), now=now)


def last_worker_run(db: Database) -> datetime | None:
    """When a worker last ran a job on this database; None before the first (or an unreadable record)."""
    try:
        return parse_ts(meta.get(db, WORKER_RAN_KEY))
    except ValueError:
        return None


def worker_running(lease: locks.Lease | None, now: datetime) -> bool:
    """Whether the worker lease is held by a live worker.

    The worker renews its lease every few seconds: a lease past its expiry, or held by a process of
    this host that is gone (kill -9), was left by a worker that died (a clean stop deletes it); no
    lease at all means no worker has run since."""
    return lease is not None and lease.expires_at > now and not holder_is_gone(lease.holder)


def lease_holder_alive(lease: locks.Lease | None) -> bool | None:
    """Whether the worker lease's holder still runs (processes.holder_alive): True, False, or None when there
    is no lease or this process cannot see the holder's (another host or container)."""
    return None if lease is None else holder_alive(lease.holder, since=lease.acquired_at.timestamp())


def taken_from_another_host(db: Database, lease: locks.Lease | None) -> tuple[str, datetime] | None:
    """(the previous holder's host, when it was taken) when the current worker lease was taken over from a
    holder on another host than its own; else None (no lease, taken free, or from a holder of the same host).

    Only after that holder's lease expired: no host can see another's processes (`holder_is_gone`)."""
    takeover = locks.taken_over(db, lease)
    previous_host = other_host(takeover.previous, takeover.holder) if takeover is not None else None
    return None if takeover is None or previous_host is None else (previous_host, takeover.at)
