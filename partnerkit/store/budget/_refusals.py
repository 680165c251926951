"""The provider's last 401 to the key (`provider_refusals`, one row per key hash), until a call with the
key is answered 2xx: `partnerkit status` and /metrics show it, and the worker pauses its jobs that call
the provider for REFUSAL_PAUSE_S after it."""

from __future__ import annotations

import sqlite3

from partnerkit.errors import StorageError
from partnerkit.store.db import Database, transaction

# After the provider refused the API key (a 401: a rotated or revoked secret, a host off the key's
# allowlist), what calls it waits this long from the refusal: the worker's jobs and a voucher fetch.
REFUSAL_PAUSE_S = 60.0


def record(db: Database, key: str, *, status: int, message: str | None, method: str, path: str, purpose: str,
           at: float) -> None:
    """Keep the provider's refusal of the key (`key`: the budget's key hash), replacing an earlier one."""
    with transaction(db) as conn:
        conn.execute(
            "INSERT INTO provider_refusals (key_hash, status, message, method, path, purpose, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key_hash) DO UPDATE SET status = excluded.status,"
            " message = excluded.message, method = excluded.method, path = excluded.path,"
            " purpose = excluded.purpose, at = excluded.at",
            (key, status, (message or "")[:200], method, path, purpose, at))


def forget(db: Database, key: str) -> None:
    """A call with the key was answered 2xx: forget an earlier refusal (by any process).

    Called after every answered call, so it reads first: a write only when there is one to forget.
    (Threads sharing the database handle take turns in `transaction()`, which holds the handle's lock.)"""
    try:
        standing = db.execute("SELECT 1 FROM provider_refusals WHERE key_hash = ?", (key,)).fetchone()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the provider's refusals: {exc}") from exc
    if standing:
        with transaction(db) as conn:
            conn.execute("DELETE FROM provider_refusals WHERE key_hash = ?", (key,))


def standing(db: Database, key: str) -> dict | None:
    """The provider's latest refusal of the key still standing (status, message, method, path, purpose,
    at), or None."""
    row = db.execute("SELECT status, message, method, path, purpose, at FROM provider_refusals"
                     " WHERE key_hash = ?", (key,)).fetchone()
    return None if row is None else dict(zip(("status", "message", "method", "path", "purpose", "at"), row))
