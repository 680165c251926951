"""A worker (re)started while the database is locked past its busy timeout waits for the lease.

Found by bench/soak: the worker restarted after a SIGKILL just as another process held a write lock,
and exited with "cannot start a transaction: database is locked" instead of standing by.

The lock is held until the test lets it go (not for a fixed time a busy machine could outlast before the
worker even tried): the waiting worker's lock is released once it has said it waits for it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest

from partnerkit.errors import StorageError
from partnerkit.store import open_db
from reconcile.scheduler import WorkerLease

WAITING = "cannot take the worker lease yet"


def _hold_lock(path, release: threading.Event, held: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    held.set()
    release.wait(30)  # the bound only ends a broken run
    conn.execute("ROLLBACK")
    conn.close()


class _ReleaseWhenSaid(logging.Handler):
    """Sets `release` when the worker logs that it waits for the locked database."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.unlock, self.said = release, 0  # not `release`: a Handler's own method of that name

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(WAITING):
            self.said += 1
            self.unlock.set()


def test_waiting_worker_takes_the_lease_once_the_lock_is_gone(db_path):
    open_db(db_path).conn.close()  # migrated before the lock
    db = open_db(db_path, busy_timeout_ms=100)
    held, release = threading.Event(), threading.Event()
    locker = threading.Thread(target=_hold_lock, args=(db_path, release, held))
    locker.start()
    said = _ReleaseWhenSaid(release)
    logger = logging.getLogger("reconcile.worker")
    logger.addHandler(said)
    try:
        assert held.wait(30)
        lease = WorkerLease(db)
        lease.acquire(wait=True, poll_s=0.2)
    finally:
        logger.removeHandler(said)
        release.set()
        locker.join(30)
    assert said.said >= 1  # it met the lock and waited, rather than exit
    assert lease.held
    lease.release()
    db.conn.close()


def test_no_wait_worker_reports_the_locked_database(db_path):
    open_db(db_path).conn.close()
    db = open_db(db_path, busy_timeout_ms=100)
    held, release = threading.Event(), threading.Event()
    locker = threading.Thread(target=_hold_lock, args=(db_path, release, held))
    locker.start()
    try:
        assert held.wait(30)
        with pytest.raises(StorageError, match="locked"):
            WorkerLease(db).acquire(wait=False)
    finally:
        release.set()
        locker.join(30)
    db.conn.close()
