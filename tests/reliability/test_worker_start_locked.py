"""A worker (re)started while the database is locked past its busy timeout waits for the lease.

Found by bench/soak: the worker restarted after a SIGKILL just as another process held a write lock,
and exited with "cannot start a transaction: database is locked" instead of standing by.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from partnerkit.errors import StorageError
from partnerkit.store import open_db
from reconcile.scheduler import WorkerLease


def _hold_lock(path, seconds: float, held: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    held.set()
    threading.Event().wait(seconds)
    conn.execute("ROLLBACK")
    conn.close()


def test_waiting_worker_takes_the_lease_once_the_lock_is_gone(db_path):
    open_db(db_path).conn.close()  # migrated before the lock
    db = open_db(db_path, busy_timeout_ms=100)
    held = threading.Event()
    locker = threading.Thread(target=_hold_lock, args=(db_path, 1.0, held))
    locker.start()
    held.wait(5)
    lease = WorkerLease(db)
    lease.acquire(wait=True, poll_s=0.2)
    locker.join()
    assert lease.held
    lease.release()
    db.conn.close()


def test_no_wait_worker_reports_the_locked_database(db_path):
    open_db(db_path).conn.close()
    db = open_db(db_path, busy_timeout_ms=100)
    held = threading.Event()
    locker = threading.Thread(target=_hold_lock, args=(db_path, 1.0, held))
    locker.start()
    held.wait(5)
    with pytest.raises(StorageError, match="locked"):
        WorkerLease(db).acquire(wait=False)
    locker.join()
    db.conn.close()
