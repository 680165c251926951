"""Webhook signing tokens saved by `partnerkit webhooks register`, encrypted, bound to their id."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path

from sqlite_utils import Database

from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.store.vouchers import read_only_connection


def save(db: Database, webhook_id: str, sealed_token: bytes, *, now: datetime, name: str | None = None,
         url: str | None = None, events: list[str] | None = None) -> None:
    """Save (or replace) the encrypted token of one webhook configuration."""
    with transaction(db) as conn:
        conn.execute(
            """INSERT INTO webhook_tokens (webhook_id, token, name, url, events, created_at)
               VALUES (?, ?, ?, ?, ?, ?)
               ON CONFLICT (webhook_id) DO UPDATE SET token = excluded.token, name = excluded.name,
                   url = excluded.url, events = excluded.events, created_at = excluded.created_at""",
            (webhook_id, sealed_token, name, url, json.dumps(events) if events is not None else None, stamp(now)))


def set_token(db: Database, webhook_id: str, sealed_token: bytes, *, now: datetime) -> bool:
    """Save the encrypted token of one webhook, replacing the one saved before but keeping the name, url
    and events saved with it (`partnerkit webhooks token set`); return whether one was replaced."""
    with transaction(db) as conn:
        replaced = conn.execute("SELECT 1 FROM webhook_tokens WHERE webhook_id = ?", (webhook_id,)).fetchone()
        conn.execute(
            """INSERT INTO webhook_tokens (webhook_id, token, created_at) VALUES (?, ?, ?)
               ON CONFLICT (webhook_id) DO UPDATE SET token = excluded.token, created_at = excluded.created_at""",
            (webhook_id, sealed_token, stamp(now)))
        return replaced is not None


def sealed(db: Database) -> list[tuple[str, bytes]]:
    """Every saved (webhook_id, encrypted token)."""
    return [(row[0], bytes(row[1])) for row in db.execute("SELECT webhook_id, token FROM webhook_tokens ORDER BY webhook_id")]


def sealed_batch(db: Database, *, after: str, limit: int) -> list[tuple[str, bytes]]:
    """Up to `limit` saved (webhook_id, encrypted token) with webhook_id after `after` (for `partnerkit keys`)."""
    return [(row[0], bytes(row[1])) for row in db.execute(
        "SELECT webhook_id, token FROM webhook_tokens WHERE webhook_id > ? ORDER BY webhook_id LIMIT ?", (after, limit))]


def reseal(conn: sqlite3.Connection, webhook_id: str, old: bytes, new: bytes) -> bool:
    """Replace one saved token's ciphertext, only if it is still `old` (inside the caller's transaction)."""
    return conn.execute("UPDATE webhook_tokens SET token = ? WHERE webhook_id = ? AND token = ?",
                        (new, webhook_id, old)).rowcount == 1


def listing(db: Database) -> list[dict]:
    """Saved webhooks without their tokens."""
    cursor = db.execute("SELECT webhook_id, name, url, events, created_at FROM webhook_tokens ORDER BY webhook_id")
    return [{"webhook_id": r[0], "name": r[1], "url": r[2], "events": json.loads(r[3]) if r[3] else None,
             "created_at": r[4]} for r in cursor.fetchall()]


def update_details(db: Database, webhook_id: str, *, name: str | None = None, url: str | None = None,
                   events: list[str] | None = None) -> bool:
    """Refresh the saved name, url and events of one webhook (None keeps a field; the token is
    untouched); return whether a token of it is saved."""
    with transaction(db) as conn:
        return conn.execute(
            """UPDATE webhook_tokens SET name = COALESCE(?, name), url = COALESCE(?, url),
                   events = COALESCE(?, events) WHERE webhook_id = ?""",
            (name, url, json.dumps(events) if events is not None else None, webhook_id)).rowcount > 0


def forget(db: Database, webhook_id: str) -> bool:
    """Delete the saved token of one webhook; return whether there was one."""
    with transaction(db) as conn:
        return conn.execute("DELETE FROM webhook_tokens WHERE webhook_id = ?", (webhook_id,)).rowcount > 0


def count(db: Database) -> int:
    """How many tokens are saved."""
    return db.execute("SELECT COUNT(*) FROM webhook_tokens").fetchone()[0]


def saved_ids_in_file(path: Path) -> list[str] | None:
    """The webhook ids whose tokens are saved in the database file at `path`, never the tokens; None when the
    file cannot be read as a partnerkit database (`partnerkit config` says so).

    Read-only (`vouchers.read_only_connection`): never creates, migrates or writes the file, nor adds a -wal
    or -shm file beside it (`partnerkit config` leaves PARTNERKIT_DB as it found it)."""
    conn = read_only_connection(path)
    if conn is None:
        return None
    try:
        ids = [row[0] for row in conn.execute("SELECT webhook_id FROM webhook_tokens")]
    except sqlite3.Error:  # not a database, or one no partnerkit migrated yet (no such table)
        return None
    finally:
        conn.close()
    return sorted(ids, key=lambda webhook_id: (len(webhook_id), webhook_id))  # numeric ids in number order
