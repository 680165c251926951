"""Read transactions on one snapshot of the database, on one connection or several.

In WAL mode a read transaction sees the store as it was when its first read began, whatever other
connections commit meanwhile. The day's match (reconcile.matcher.match_day) reads every rule on one
snapshot in a deferred transaction (`transaction(db, immediate=False)`), pinned by `pin_snapshot`; on a big
day the wallet's side reads on a second connection in a thread, started on the same snapshot as the
matcher's by `pin_same_snapshot`, and ended by `end_read`.
"""

from __future__ import annotations

import os
import sqlite3

from partnerkit.store.db import connect, transaction


def pin_snapshot(conn: sqlite3.Connection) -> None:
    """Fix the snapshot of the connection's open deferred read transaction (a BEGIN): its first read does."""
    conn.execute("SELECT COUNT(*) FROM main.sqlite_master").fetchone()


def pin_same_snapshot(path: str | os.PathLike, *conns: sqlite3.Connection) -> None:
    """Start every connection's read transaction on one snapshot of the database at `path` (a BEGIN for one that
    has none open yet): no other connection can commit while a third connection of ours holds the write lock
    (BEGIN IMMEDIATE, ended at once with nothing written), for the few milliseconds that takes."""
    lock = connect(path)
    try:
        with transaction(lock):
            for conn in conns:
                if not conn.in_transaction:
                    conn.execute("BEGIN")
                pin_snapshot(conn)
    finally:
        lock.conn.close()


def end_read(conn: sqlite3.Connection) -> None:
    """End a read transaction begun by `pin_same_snapshot` (ROLLBACK: it wrote nothing)."""
    conn.execute("ROLLBACK")
