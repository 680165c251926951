"""The provider account this database serves: its wallet ids and the API keys found to be its own
(migration 12; the rules are partnerkit.account's)."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Mapping

from sqlite_utils import Database

from partnerkit.store.jobs import stamp


def key_known(db: Database, key_hash: str) -> bool:
    """Whether this API key (its SHA-256) was found to be the account's."""
    return db.execute("SELECT 1 FROM account_keys WHERE key_hash = ?", (key_hash,)).fetchone() is not None


def state(conn: sqlite3.Connection) -> tuple[set[str], bool]:
    """(the account's wallet ids, whether any key was found to be its own), inside the caller's transaction."""
    wallets = {wallet_id for (wallet_id,) in conn.execute("SELECT wallet_id FROM account_wallets")}
    (keys,) = conn.execute("SELECT COUNT(*) FROM account_keys").fetchone()
    return wallets, keys > 0


def add_key(conn: sqlite3.Connection, key_hash: str, how: str, *, now: datetime) -> None:
    """Record an API key as the account's (a key recorded before keeps its first record)."""
    conn.execute("INSERT OR IGNORE INTO account_keys (key_hash, first_used_at, how) VALUES (?, ?, ?)",
                 (key_hash, stamp(now), how))


def add_wallets(conn: sqlite3.Connection, wallets: Mapping[str, str | None], *, now: datetime) -> int:
    """Record wallet ids (id -> currency) as the account's; return how many were new."""
    before = conn.total_changes
    conn.executemany("INSERT OR IGNORE INTO account_wallets (wallet_id, currency, first_seen_at, source)"
                     " VALUES (?, ?, ?, 'wallets')",
                     [(wallet_id, currency, stamp(now)) for wallet_id, currency in wallets.items() if wallet_id])
    return conn.total_changes - before


def wallets(db: Database) -> list[dict]:
    """The account's wallets, in id order (numbers by value): wallet_id, currency, first_seen_at, source."""
    cols = ("wallet_id", "currency", "first_seen_at", "source")
    rows = db.execute(f"SELECT {', '.join(cols)} FROM account_wallets"
                      " ORDER BY length(wallet_id), wallet_id").fetchall()
    return [dict(zip(cols, row)) for row in rows]


def keys(db: Database) -> list[dict]:
    """The API keys found to be the account's, oldest first: key_hash, first_used_at, how."""
    cols = ("key_hash", "first_used_at", "how")
    rows = db.execute(f"SELECT {', '.join(cols)} FROM account_keys ORDER BY first_used_at, key_hash").fetchall()
    return [dict(zip(cols, row)) for row in rows]
