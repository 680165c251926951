"""Stored vouchers: codes, PINs and claim URLs as ciphertext, one row per (order, fingerprint)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlite_utils import Database

from partnerkit.store.jobs import stamp


@dataclass(frozen=True)
class SealedVoucher:
    """A voucher ready to store: secrets already encrypted, fingerprint already computed."""

    fingerprint: str
    card_number: bytes | None
    pin_code: bytes | None
    claim_url: bytes | None
    voucher_reference_number: str | None
    expires_at: str | None
    previous_fingerprints: tuple[str, ...] = ()  # the same voucher's fingerprint under each previous key


def add(conn: sqlite3.Connection, order_id: int, vouchers: list[SealedVoucher], *, now: datetime) -> int:
    """Store the vouchers not stored yet (inside the caller's transaction); return how many were new.

    "Stored yet" is decided by the statement itself: a row of the order with the voucher's current
    fingerprint (the unique constraint) or with its fingerprint under a previous key (stored before
    a key rotation, not yet rewrapped) means it is there already."""
    added = 0
    for v in vouchers:
        known = (v.fingerprint, *v.previous_fingerprints)
        cursor = conn.execute(
            f"""INSERT INTO vouchers (order_id, fingerprint, card_number, pin_code, claim_url,
                                      voucher_reference_number, expires_at, stored_at)
                SELECT ?, ?, ?, ?, ?, ?, ?, ?
                WHERE NOT EXISTS (SELECT 1 FROM vouchers WHERE order_id = ?
                                  AND fingerprint IN ({", ".join("?" * len(known))}))
                ON CONFLICT (order_id, fingerprint) DO NOTHING""",
            (order_id, v.fingerprint, v.card_number, v.pin_code, v.claim_url, v.voucher_reference_number,
             v.expires_at, stamp(now), order_id, *known))
        added += cursor.rowcount
    return added


def count(conn: sqlite3.Connection | Database, order_id: int) -> int:
    """How many vouchers are stored for an order."""
    return conn.execute("SELECT COUNT(*) FROM vouchers WHERE order_id = ?", (order_id,)).fetchone()[0]


def for_order(db: Database, order_id: int) -> list[dict]:
    """The stored (still encrypted) vouchers of an order, oldest first."""
    cursor = db.execute(
        """SELECT id, order_id, card_number, pin_code, claim_url, voucher_reference_number, expires_at, stored_at
           FROM vouchers WHERE order_id = ? ORDER BY id""", (order_id,))
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def total(db: Database) -> int:
    """How many vouchers are stored in all."""
    return db.execute("SELECT COUNT(*) FROM vouchers").fetchone()[0]


SEALED_COLUMNS = ("card_number", "pin_code", "claim_url")


def sealed_batch(db: Database, *, after_id: int, limit: int) -> list[dict]:
    """Up to `limit` vouchers with id above `after_id`, as stored (for `partnerkit keys`)."""
    cursor = db.execute(
        """SELECT id, order_id, fingerprint, card_number, pin_code, claim_url, voucher_reference_number
           FROM vouchers WHERE id > ? ORDER BY id LIMIT ?""", (after_id, limit))
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def reseal(conn: sqlite3.Connection, row: dict, *, fingerprint: str, sealed: dict[str, bytes | None]) -> bool:
    """Replace one voucher's sealed fields and fingerprint, only if it is still as `row` read it.

    Raises sqlite3.IntegrityError when another row of the order already has `fingerprint` (the
    same voucher stored twice)."""
    return conn.execute(
        """UPDATE vouchers SET fingerprint = ?, card_number = ?, pin_code = ?, claim_url = ?
           WHERE id = ? AND fingerprint = ? AND card_number IS ? AND pin_code IS ? AND claim_url IS ?""",
        (fingerprint, *(sealed[c] for c in SEALED_COLUMNS), row["id"], row["fingerprint"],
         *(row[c] for c in SEALED_COLUMNS))).rowcount == 1


def read_only_connection(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to the file at `path` (never creates or migrates it); None when there is
    no such file or it cannot be opened (its own open reports that).

    Nor does it add a -wal or -shm file beside it (a read-only connection to a WAL database would, and leave
    them): without a -wal file no process has the database open and everything is in the file itself, read
    as immutable; with one, it is read through it."""
    if not path.is_file():
        return None
    immutable = "" if Path(f"{path}-wal").exists() else "&immutable=1"
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{immutable}", uri=True)
    except sqlite3.Error:
        return None


def keyed_values(path: Path) -> int:
    """How many rows of the database file at `path` depend on the voucher key: stored vouchers (codes
    sealed, fingerprints keyed) and saved webhook tokens; 0 when the file is not a partnerkit database.

    Read-only (never creates or migrates the file): `partnerkit.crypto` asks it before generating a
    key, because a new key beside such rows would leave them unreadable.
    """
    conn = read_only_connection(path)
    if conn is None:
        return 0
    try:
        return sum(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("vouchers", "webhook_tokens"))
    except sqlite3.Error:  # no such table yet, or not a database at all (its own open reports that)
        return 0
    finally:
        conn.close()


@dataclass(frozen=True)
class KeyedSample:
    """One stored value sealed with the voucher key, and what its ciphertext is bound to."""

    kind: str  # "voucher" or "webhook_token"
    owner: str  # the voucher's order id, or the token's webhook id
    field: str  # the voucher's sealed column, or "token"
    sealed: bytes


def keyed_samples(path: Path) -> list[KeyedSample] | None:
    """A few of the values `keyed_values` counts, read-only: a sealed field of the oldest and of the
    newest voucher, and the first and last saved webhook token (each a primary-key lookup). An empty
    list when none is stored; None when the file cannot be read as a partnerkit database."""
    conn = read_only_connection(path)
    if conn is None:
        return None
    try:
        samples = []
        for row in conn.execute(
                """SELECT order_id, card_number, pin_code, claim_url FROM vouchers
                   WHERE id IN ((SELECT MIN(id) FROM vouchers), (SELECT MAX(id) FROM vouchers)) ORDER BY id"""):
            name, value = next(((n, v) for n, v in zip(SEALED_COLUMNS, row[1:]) if v is not None), (None, None))
            if value is not None:
                samples.append(KeyedSample("voucher", str(row[0]), name, bytes(value)))
        for webhook_id, token in conn.execute(
                """SELECT webhook_id, token FROM webhook_tokens WHERE rowid IN
                   ((SELECT MIN(rowid) FROM webhook_tokens), (SELECT MAX(rowid) FROM webhook_tokens))"""):
            samples.append(KeyedSample("webhook_token", str(webhook_id), "token", bytes(token)))
        return samples
    except sqlite3.Error:  # no such table yet, or not a database at all (its own open reports that)
        return None
    finally:
        conn.close()
