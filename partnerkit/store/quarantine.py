"""Provider records partnerkit could not read (recharges, orders), kept with the reason.

A list page with one bad record must not stop the good ones, nor be skipped in silence: the bad
record is held here under a stable key (`recharge:<id>`, `order:<id>`, `wallet:<id>`) with the reason (the client's
MalformedResponse names the field) and the record as received, then released when the same record
is read correctly again. It shares `transaction_quarantine` (reconciliation's table, see
m0005_ledger), so the day's report lists every quarantined provider record in one place; the key's
prefix tells the kinds apart (a transaction's key is the sha256 of its JSON, never prefixed).
Order list records carry no voucher codes; order details (which do) are never held here.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import datetime
from typing import Any, Iterable

from partnerkit.money import DecimalEncoder
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso

KINDS = ("recharge", "order", "wallet")


def key_for(kind: str, raw: Any) -> str:
    """`kind:<id>` when the record shows an integer id, else `kind:sha256:<hex>` of its JSON."""
    if kind not in KINDS:
        raise ValueError(f"unknown quarantine kind {kind!r}")
    record_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(record_id, int) and not isinstance(record_id, bool):
        return f"{kind}:{record_id}"
    text = json.dumps(raw, cls=DecimalEncoder, sort_keys=True, default=str)
    return f"{kind}:sha256:{hashlib.sha256(text.encode()).hexdigest()}"


def _day(raw: Any) -> str | None:
    if isinstance(raw, dict):
        for name in ("created_at", "placed_at"):
            value = raw.get(name)
            if isinstance(value, str) and len(value) >= 10:
                return value[:10]
    return None


def hold(db: Database, kind: str, bad: Iterable[tuple[str, Any]], *, now: datetime) -> list[str]:
    """Keep (reason, raw record) pairs of one kind; a record held again is refreshed. Their keys."""
    bad = list(bad)
    if not bad:
        return []
    with transaction(db) as conn:
        return hold_in(conn, kind, bad, now=now)


def hold_in(conn: sqlite3.Connection, kind: str, bad: Iterable[tuple[str, Any]], *, now: datetime) -> list[str]:
    """`hold` inside the caller's transaction."""
    rows = [(key_for(kind, raw), reason, json.dumps(raw, cls=DecimalEncoder, sort_keys=True, default=str), _day(raw))
            for reason, raw in bad]
    at = iso(now)
    conn.executemany(
        "INSERT INTO transaction_quarantine (key, reason, raw, day, first_seen_at, last_seen_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET reason = excluded.reason,"
        " raw = excluded.raw, last_seen_at = excluded.last_seen_at,"
        " day = COALESCE(excluded.day, transaction_quarantine.day)",
        [(key, reason, raw, day, at, at) for key, reason, raw, day in rows])
    return [row[0] for row in rows]


def release(db: Database, kind: str, ids: Iterable[int]) -> int:
    """Forget the held records of these ids (read correctly since); how many were held."""
    keys = [f"{kind}:{int(i)}" for i in ids]
    if not keys:
        return 0
    with transaction(db) as conn:
        return release_in(conn, kind, keys)


def release_in(conn: sqlite3.Connection, kind: str, keys_or_ids: Iterable[Any]) -> int:
    """`release` inside the caller's transaction (ids, or keys already prefixed)."""
    if conn.execute("SELECT 1 FROM transaction_quarantine WHERE key LIKE ? LIMIT 1", (f"{kind}:%",)).fetchone() is None:
        return 0  # the common case: nothing of this kind is held
    keys = [k if isinstance(k, str) else f"{kind}:{int(k)}" for k in keys_or_ids]
    released = 0
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        released += conn.execute(f"DELETE FROM transaction_quarantine WHERE key IN ({','.join('?' * len(chunk))})",
                                 chunk).rowcount
    return released


def held(db: Database, kind: str) -> list[dict]:
    """The records of one kind held now: key, reason, raw (JSON text), day, first and last seen."""
    cursor = db.execute("SELECT key, reason, raw, day, first_seen_at, last_seen_at FROM transaction_quarantine"
                        " WHERE key LIKE ? ORDER BY key", (f"{kind}:%",))
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]
