"""Order intents in SQLite (migration 10): recorded before `POST /api/v1/orders`, resolved after.

`partnerkit.ordering.place_order` records one and marks it sending (committed before the request exists, in
the transaction that finds no open intent of the same order `held`; a resumed one is marked in the transaction
that checks it), and resolves it: PLACED with the order it placed (in the transaction that stores the order), REFUSED,
or UNKNOWN when the answer was lost. The order catch-up links an open intent to the listed order
carrying its ref (`link_by_ref`). Money is integer paise, times fixed-width UTC text
(`partnerkit.store.jobs.stamp`), so they compare as text.

An open intent an operator closed by hand (`partnerkit orders close`: searched for at the provider, not found, and
said never made) keeps its row and its state; what closes it is a record in `meta` under `closed_key`
(partnerkit.store.closures: who, when, the note, what the search saw), as a closed recharge's
(`partnerkit.store.recharges._closed`). `held` and `partnerkit status` leave it out (`closure`); the order sync
still links it by its ref (`link_by_ref`), and its record is then read as overtaken. The record names the intent's
Idempotency-Key and ref, so it is never taken for another intent's.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterable

from partnerkit.errors import StorageError
from partnerkit.money import cents, fmt, from_cents
from partnerkit.store import closures
from partnerkit.store.db import Database, transaction
from partnerkit.store.jobs import stamp

OPEN = ("INTENT", "UNKNOWN")  # no answer known: the order may or may not exist
# The one spelling of OPEN in SQL: the very text the queries wrote out, literals and all, so each keeps its plan
# (the `state` index for the open-intent probe and `held`).
OPEN_SQL = f"state IN ({', '.join(repr(state) for state in OPEN)})"


def _rows(cursor: sqlite3.Cursor) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def record(conn: sqlite3.Connection, *, idempotency_key: str, ref: str, product_id: int, denomination: Decimal,
           quantity: int, wallet_id: int | None, email: str | None, now: datetime, sender_lock: int | None = None,
           sender: str | None = None) -> int:
    """Insert an INTENT (inside the caller's transaction, committed before the order is sent); its id.
    `sender_lock` and `sender`: the lock the sending process holds, and who it is (`partnerkit.senders`)."""
    cursor = conn.execute(
        """INSERT INTO order_intents (idempotency_key, ref, product_id, denomination_cents, quantity, wallet_id,
               email, state, created_at, updated_at, sender_lock, sender)
           VALUES (?, ?, ?, ?, ?, ?, ?, 'INTENT', ?, ?, ?, ?)""",
        (idempotency_key, ref, product_id, cents(denomination), quantity, wallet_id, email, stamp(now), stamp(now),
         sender_lock, sender))
    return int(cursor.lastrowid)


def held(conn: sqlite3.Connection, *, product_id: int, denomination: Decimal, quantity: int, wallet_id: int | None,
         since: datetime) -> list[dict]:
    """Open intents (INTENT or UNKNOWN) of the same order last sent (or recorded) at `since` or later, oldest
    first: the same product, denomination and quantity, and the same wallet or one left to the provider's choice
    (its auto-selection may pick the wallet the other names). Not one an operator closed (`closure`)."""
    rows = _rows(conn.execute(
        f"SELECT * FROM order_intents WHERE {OPEN_SQL} AND product_id = ? "
        "AND denomination_cents = ? AND quantity = ? AND (wallet_id IS NULL OR ? IS NULL OR wallet_id = ?) "
        "AND COALESCE(sent_at, created_at) >= ? ORDER BY id",
        (product_id, cents(denomination), quantity, wallet_id, wallet_id, stamp(since))))
    # One an operator closed (`orders close`: checked with the provider, never made) holds nothing back.
    return [row for row in rows if closure(conn, row) is None]


def by_key(db: Database, idempotency_key: str) -> dict | None:
    """The intent of an Idempotency-Key, or None."""
    rows = _rows(db.execute("SELECT * FROM order_intents WHERE idempotency_key = ?", (idempotency_key,)))
    return rows[0] if rows else None


def holding(conn: sqlite3.Connection | Database, order_id: int, *, besides: int) -> dict | None:
    """The intent other than `besides` that placed `order_id` (its column is UNIQUE: at most one), or None."""
    rows = _rows(conn.execute("SELECT * FROM order_intents WHERE order_id = ? AND id != ?", (order_id, besides)))
    return rows[0] if rows else None


def get(db: Database, intent_id: int) -> dict | None:
    """One intent by id, or None."""
    rows = _rows(db.execute("SELECT * FROM order_intents WHERE id = ?", (intent_id,)))
    return rows[0] if rows else None


def mark_sending(conn: sqlite3.Connection, intent_id: int, now: datetime, *, sender_lock: int | None = None,
                 sender: str | None = None) -> None:
    """Mark a send about to begin (inside the caller's transaction: the one that records or resumes the intent,
    committed before the request exists): a REFUSED intent sent again is open (INTENT) until answered. The sender
    is this send's (NULL when it holds no lock), never an earlier one's, whose lock may be long free.

    `sent_at` is NULL only on an intent that was never marked, so never sent: a row of a release that committed
    the intent and this mark apart, whose mark failed (a full disk) or whose process died between the two
    (`partnerkit.ordering.never_sent`)."""
    conn.execute("UPDATE order_intents SET state = CASE state WHEN 'REFUSED' THEN 'INTENT' ELSE state END, "
                 "sent_at = ?, updated_at = ?, sender_lock = ?, sender = ? WHERE id = ?",
                 (stamp(now), stamp(now), sender_lock, sender, intent_id))


def mark_unknown(db: Database, intent_id: int, error: str, now: datetime) -> None:
    """The answer was lost (timeout, 500, an unreadable 2xx): the order may exist."""
    with transaction(db) as conn:
        conn.execute("UPDATE order_intents SET state = 'UNKNOWN', error = ?, updated_at = ? "
                     f"WHERE id = ? AND {OPEN_SQL}", (error[:500], stamp(now), intent_id))


def mark_refused(db: Database, intent_id: int, error: str, now: datetime) -> None:
    """A definite refusal: no order exists for this intent."""
    with transaction(db) as conn:
        conn.execute("UPDATE order_intents SET state = 'REFUSED', error = ?, updated_at = ? "
                     f"WHERE id = ? AND {OPEN_SQL}", (error[:500], stamp(now), intent_id))


def note_error(db: Database, intent_id: int, error: str, now: datetime) -> None:
    """Keep what the last send met, whatever the state (a PLACED intent stays PLACED)."""
    with transaction(db) as conn:
        conn.execute("UPDATE order_intents SET error = ?, updated_at = ? WHERE id = ?",
                     (error[:500], stamp(now), intent_id))


def mark_placed(conn: sqlite3.Connection, intent_id: int, order_id: int, now: datetime) -> None:
    """The intent placed `order_id` (inside the transaction that stores the order); a link once made stays."""
    conn.execute("UPDATE order_intents SET state = 'PLACED', order_id = COALESCE(order_id, ?), error = NULL, "
                 "updated_at = ? WHERE id = ?", (order_id, stamp(now), intent_id))


def link_by_ref(conn: sqlite3.Connection, listed: Iterable[tuple[Any, int, Any, Any, Any]], now: datetime) -> int:
    """Link open intents to listed orders `(reference_code, id, product_id, denomination, quantity)` carrying
    their ref and request (inside the caller's transaction); how many were linked.

    The provider keeps a client's refs unique ("Duplicate reference code"), so the order with an
    intent's ref and request is the one its lost answer announced. An order already linked to
    another intent is never linked twice."""
    if conn.execute(f"SELECT 1 FROM order_intents WHERE {OPEN_SQL} LIMIT 1").fetchone() is None:
        return 0  # the usual case: nothing waits for a link
    linked = 0
    for ref, order_id, product_id, denomination, quantity in listed:
        if not isinstance(ref, str) or not ref or denomination is None:
            continue
        cursor = conn.execute(
            "UPDATE order_intents SET state = 'PLACED', order_id = ?, error = NULL, updated_at = ? "
            f"WHERE ref = ? AND {OPEN_SQL} AND order_id IS NULL AND product_id = ? "
            "AND denomination_cents = ? AND quantity = ? "
            "AND NOT EXISTS (SELECT 1 FROM order_intents WHERE order_id = ?)",
            (order_id, stamp(now), ref, product_id, cents(denomination), quantity, order_id))
        linked += cursor.rowcount
    return linked


def open_ones(db: Database) -> list[dict]:
    """Every open intent (INTENT or UNKNOWN), oldest first: `partnerkit status` judges which nobody will
    answer (UNKNOWN; INTENT whose sender is gone, or open too long for a send)."""
    return _rows(db.execute(f"SELECT * FROM order_intents WHERE {OPEN_SQL} ORDER BY id"))


_CLOSED = "order_intent_closed:{intent_id}"


def closed_key(intent_id: int) -> str:
    """The meta key of the closure of order intent `intent_id`."""
    return _CLOSED.format(intent_id=intent_id)


def closure(db: Database | sqlite3.Connection, intent: dict) -> dict | None:
    """The closure of `intent` (`by`, `at`, `note`, `searched`, `state_closed`, ...), or None: never closed, or
    the record names another intent's Idempotency-Key or ref."""
    return closures.read(db, closed_key(intent["id"]), {"idempotency_key": intent["idempotency_key"],
                                                        "ref": intent["ref"]})


def close_intent(db: Database, intent_id: int, *, by: str, note: str, at: datetime, searched: str) -> dict:
    """Record that open intent `intent_id` is closed: kept, with who, when, why and what the search saw. Inside
    one transaction the row is read again: if it is no longer open or has an order (the sync or a replay linked it
    meanwhile), StorageError and nothing written. Returns the record."""
    with transaction(db) as conn:
        rows = _rows(conn.execute("SELECT * FROM order_intents WHERE id = ?", (intent_id,)))
        if not rows or rows[0]["state"] not in OPEN or rows[0]["order_id"] is not None:
            shown = f"{rows[0]['state']}, order {rows[0]['order_id']}" if rows else "gone"
            raise StorageError(f"order intent #{intent_id} changed meanwhile ({shown}): not closed")
        row = rows[0]
        return closures.write(conn, closed_key(intent_id), {
            "intent_id": intent_id, "idempotency_key": row["idempotency_key"], "ref": row["ref"],
            "product_id": row["product_id"], "denomination": fmt(from_cents(row["denomination_cents"])),
            "quantity": row["quantity"], "state_closed": row["state"]}, by=by, note=note, at=at, searched=searched)

