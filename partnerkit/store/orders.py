"""Local order state: monotonic in status rank, fed by webhooks, the order sync and creates."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from sqlite_utils import Database

from partnerkit.store.jobs import stamp

# Order states of the document ("States and transitions > Order"), ranked by progress.
# DELIVERED, FAILED and CANCELLED are final: nothing moves an order out of them.
RANK = {"PENDING": 0, "PROCESSING": 1, "PARTIALLY_DELIVERED": 2, "DELIVERED": 3, "FAILED": 4, "CANCELLED": 4}
FINAL = frozenset({"DELIVERED", "FAILED", "CANCELLED"})
DELIVERING = frozenset({"DELIVERED", "PARTIALLY_DELIVERED"})
# An open order whose placed_at is known, as the partial index `orders_open` states it (migration 13): SQLite
# uses a partial index only for a query that states its terms, literals and all, so this text is that index's.
# (tests/reconcile/test_query_plans.py checks that it names the states of FINAL.)
OPEN = "placed_at IS NOT NULL AND status NOT IN ('CANCELLED', 'DELIVERED', 'FAILED')"
FIELDS = ("reference_code", "product_id", "product_name", "currency", "denomination_cents", "quantity",
          "amount_cents", "discount_cents", "transaction_id", "email", "placed_at")


def advances(current: str | None, new: str | None) -> bool:
    """Whether `new` may replace `current`: only forward in rank, never out of a final state."""
    if new not in RANK:
        return current is None and new is not None
    if current is None or current not in RANK:
        return True
    if current in FINAL:
        return False
    return RANK[new] > RANK[current]


def apply(conn: sqlite3.Connection, order_id: int, status: str | None, *, now: datetime, source: str,
          occurred_at: datetime | None = None, delivered_quantity: int | None = None,
          **fields: Any) -> tuple[str | None, bool]:
    """Merge one observation of an order (inside a transaction); return (status, whether it moved)."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise TypeError(f"unknown order fields: {sorted(unknown)}")
    values = {k: v for k, v in fields.items() if v is not None}
    row = conn.execute("SELECT status, delivered_quantity FROM orders WHERE id = ?", (order_id,)).fetchone()
    at = stamp(now)
    if row is None:
        columns = {"id": order_id, "status": status or "PENDING", "status_at": stamp(occurred_at or now),
                   "delivered_quantity": delivered_quantity, "source": source, "created_at": at,
                   "updated_at": at, **values}
        names = ", ".join(columns)
        conn.execute(f"INSERT INTO orders ({names}) VALUES ({', '.join('?' * len(columns))})", tuple(columns.values()))
        return columns["status"], True
    current, current_delivered = row
    moved = advances(current, status)
    updates = dict(values)
    if moved:
        updates.update(status=status, status_at=stamp(occurred_at or now), source=source)
    if delivered_quantity is not None and delivered_quantity > (current_delivered or 0):
        updates["delivered_quantity"] = delivered_quantity
    if updates:
        updates["updated_at"] = at
        assignments = ", ".join(f"{name} = ?" for name in updates)
        conn.execute(f"UPDATE orders SET {assignments} WHERE id = ?", (*updates.values(), order_id))
    return (status if moved else current), moved


def get(db: Database, order_id: int) -> dict | None:
    """One local order as a dict, or None."""
    cursor = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,))
    row = cursor.fetchone()
    return None if row is None else dict(zip([c[0] for c in cursor.description], row))


def by_reference(db: Database, reference_code: str) -> dict | None:
    """The local order carrying a reference_code (the provider keeps a client's refs unique), or None.

    Through `orders_reference` (migration 14), which holds only the orders whose reference_code is known:
    a webhook never sets it, so the receiver's commits never write that index."""
    cursor = db.execute("SELECT * FROM orders WHERE reference_code = ? ORDER BY id LIMIT 1", (reference_code,))
    row = cursor.fetchone()
    return None if row is None else dict(zip([c[0] for c in cursor.description], row))


def statuses(db: Database, order_ids: list[int]) -> dict[int, str]:
    """Local status of each of `order_ids` that is known."""
    if not order_ids:
        return {}
    marks = ", ".join("?" * len(order_ids))
    return dict(db.execute(f"SELECT id, status FROM orders WHERE id IN ({marks})", order_ids).fetchall())


_VOUCHERS_STORED = "(SELECT COUNT(*) FROM vouchers v WHERE v.order_id = o.id) AS vouchers_stored"
_NEWEST_FIRST = "COALESCE(o.placed_at, o.created_at) DESC, o.id DESC"


def list_orders(db: Database, *, status: str | None = None, limit: int = 100) -> list[dict]:
    """Local orders, newest placed first (an order no sync has dated yet by when partnerkit first heard of
    it), with the number of vouchers stored for each.

    Only the `limit` orders listed are read whole and have their vouchers counted; the statement used to
    do both for every order of the store, then sort them all (docs/reconcile.md, "A store with months of
    history"). Without a status, the newest dated orders come from the `orders_placed_at` index (nearly
    every order: the sync dates them within minutes), merged with the undated ones, which only a pass over
    the table finds: an index of those would be written by every webhook that creates an order. With a
    status, that status's orders are sorted by their dates alone (walking the index newest first would
    read nearly all of it for a rare status)."""
    if status:
        chosen, args = f"SELECT o.id FROM orders o WHERE o.status = ? ORDER BY {_NEWEST_FIRST} LIMIT ?", (
            status.upper(), limit)
    else:
        chosen, args = ("SELECT id FROM (SELECT id FROM orders WHERE placed_at IS NOT NULL ORDER BY placed_at DESC, "
                        "id DESC LIMIT ?) UNION ALL SELECT id FROM orders WHERE placed_at IS NULL"), (limit,)
    cursor = db.execute(f"SELECT o.*, {_VOUCHERS_STORED} FROM orders o WHERE o.id IN ({chosen}) "
                        f"ORDER BY {_NEWEST_FIRST} LIMIT ?", (*args, limit))
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def oldest_open_placed_at(db: Database) -> str | None:
    """placed_at of the oldest order not yet in a final state (the order sync's low-water mark).

    The first entry of `orders_open`, which holds the open orders only: the final ones, nearly every
    order of the store's history, are never read (the status test used to walk them all, oldest first)."""
    return db.execute(f"SELECT MIN(placed_at) FROM orders WHERE {OPEN}").fetchone()[0]
