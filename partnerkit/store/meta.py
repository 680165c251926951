"""The shared `meta` table: one text value per key, with when it was set (the order sync's watermark,
the poller's backoff, the worker's last run, the budget's notes, the provider's standing failures, a
worker lease taken over from another host, the last duplicate webhook delivery, the receiver's gunicorn
masters, the nightly run's last failure). JSON values are the caller's to encode."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from partnerkit.errors import StorageError
from partnerkit.store.db import Database, transaction
from partnerkit.store.jobs import stamp


def get(db: Database | sqlite3.Connection, key: str) -> str | None:
    """The value of `key`, or None (read on a handle, or inside the caller's transaction)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def with_prefix(db: Database | sqlite3.Connection, prefix: str) -> list[tuple[str, str]]:
    """Every (key, value) whose key starts with `prefix` (a non-empty ASCII text), by key: a range of the
    key's index, never a scan of the table."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)  # the first text after every key with the prefix
    return [(row[0], row[1]) for row in
            db.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key", (prefix, end))]


def put(conn: sqlite3.Connection, key: str, value: str, *, now: datetime) -> None:
    """Set `key` inside the caller's transaction."""
    conn.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                 (key, value, stamp(now)))


def delete(conn: sqlite3.Connection, key: str) -> None:
    """Remove `key` inside the caller's transaction."""
    conn.execute("DELETE FROM meta WHERE key = ?", (key,))


def forget(db: Database, key: str, *, what: str) -> None:
    """Remove `key` in a transaction of its own, reading first: a write only when it stands. For a record that
    every answer or run clears (called far more often than it stands); `what` names it in a failed read's error."""
    try:
        standing = get(db, key) is not None
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {what}: {exc}") from exc
    if standing:
        with transaction(db) as conn:
            delete(conn, key)
