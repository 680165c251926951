"""Local order state: monotonic in status rank, fed by webhooks, the order sync and creates.

An order id is an order's identity only together with what never changes for an order (`another_order`):
an observation under a stored id whose ref, product, denomination or placing time differs is
another order, and `apply` refuses it (`AnotherOrder`) before writing anything.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlite_utils import Database

from partnerkit.store import quarantine
from partnerkit.store.jobs import VOUCHER_FETCH, stamp
from partnerkit.timeutil import same_second

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
# What never changes for an order (the document's Order fields: the partner's ref, the catalog product, the
# per-voucher amount, when it was placed), compared where both sides have it (`another_order`). Each of them is
# stored only from the provider's list, its order detail or a create answer, never from a webhook. Not the
# quantity: an order known only from webhooks has the quantity an event gave (form 3's total_vouchers), a hint
# that must not make the order's own detail read as another order and park its vouchers. Not the amount (the create answer's "total after discounts and fees" is not said to be the list's "total"),
# nor the product name, currency, e-mail or transaction id (display or payment facts, filled in later).
IDENTITY = ("reference_code", "product_id", "denomination_cents", "placed_at")
# The reason's start of an order record not stored because its id names a stored order it is not: the order
# sync's quarantine entry (`order:<id>`), a parked voucher fetch's error, a webhook event's inbox reason.
ID_GIVEN_TWICE = "order id given twice:"
# The source of an observation that is a webhook's (inbox.record): its fields only fill what the row lacks.
# Every other source ("sync", "detail", "create": the provider's API) overwrites them (`apply`).
WEBHOOK = "webhook"
# The row as `apply` reads it, by one statement: the status, the delivered count and every field (the IDENTITY
# facts among them), so a webhook's fields are compared with values in hand.
_ROW = "status, delivered_quantity, " + ", ".join(FIELDS)
_FIELD_NAMES = frozenset(FIELDS)


class AnotherOrder(Exception):
    """An observation of an order id the store holds for another order (`another_order`): nothing was written.
    `reason` is the quarantine reason; `str()` gives it too."""

    def __init__(self, order_id: int, reason: str) -> None:
        super().__init__(reason)
        self.order_id = order_id
        self.reason = reason


def another_order(order_id: int, row: Mapping[str, Any], facts: Mapping[str, Any]) -> str | None:
    """Why the observation `facts` (IDENTITY names, values as `apply` stores them; placed_at as stored text, an
    RFC 3339 text or a datetime) is not the order of `row`, the stored order holding its id, as the reason to keep;
    None when it is that order.

    The document says an id identifies an order, and nothing of an id given twice (a provider that reuses or re-keys
    ids; the sandbox started again with `--fixed-ids` beside a kept database). An id is taken as an order's identity
    together with its facts that never change, each compared where both know it: the ref (the provider keeps a
    client's refs unique), product, denomination, and the placing time to the second (two endpoints may
    write it to different precisions). A few comparisons of values in hand: no statement of its own."""
    found = differences(row, facts)
    if not found:
        return None
    shown = facts.get("reference_code")
    held = ", ".join(part for part in (row.get("reference_code") and f"ref {row['reference_code']}",
                                       row.get("placed_at") and f"placed {row['placed_at']}") if part)
    return (f"{ID_GIVEN_TWICE} order {order_id}{f' (ref {shown})' if shown else ''} is stored for another order"
            f"{f' ({held})' if held else ''}, this record differs: {', '.join(found)}")


def differences(row: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """The IDENTITY names whose value in `facts` differs from the stored `row`'s, each compared where both have one
    (the comparison `another_order` makes; in IDENTITY's order)."""
    return [name for name in IDENTITY if facts.get(name) is not None and row.get(name) is not None
            and not _same(name, row[name], facts[name])]


def identity_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The IDENTITY facts among an observation's `apply` fields: what the order sync and the voucher fetch check."""
    return {name: fields.get(name) for name in IDENTITY}


def _same(name: str, stored: Any, seen: Any) -> bool:
    return same_second(str(stored), seen) if name == "placed_at" else stored == seen


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
          identity: Mapping[str, Any] | None = None, **fields: Any) -> tuple[str | None, bool]:
    """Merge one observation of an order (inside a transaction); return (status, whether it moved).

    `source` says whose observation it is: "sync", "detail" or "create" (the provider's API), whose fields
    overwrite the row's, or "webhook" (`WEBHOOK`), whose fields are written only where the row has none: the
    document never says that an event's `amount` / `total_amount` is the order list's "Total" (nor its
    `quantity` / `total_vouchers` the list's "Units"), and a late or redelivered event must not change the amount
    the matcher holds the ORDER debit against. The status only moves forward and `delivered_quantity` only
    grows, whatever the source.

    With `identity` (IDENTITY facts the observation shows: the order sync's and the voucher fetch's whole record,
    a webhook's ref and denomination), raises AnotherOrder, having written nothing, when the
    observation is another order than the stored one holding its id (`another_order`). The row is read by one
    statement either way; the comparison is of values in hand."""
    unknown = fields.keys() - _FIELD_NAMES
    if unknown:
        raise TypeError(f"unknown order fields: {sorted(unknown)}")
    values = {k: v for k, v in fields.items() if v is not None}
    row = conn.execute(f"SELECT {_ROW} FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        at = stamp(now)
        columns = {"id": order_id, "status": status or "PENDING", "status_at": stamp(occurred_at or now),
                   "delivered_quantity": delivered_quantity, "source": source, "created_at": at,
                   "updated_at": at, **values}
        names = ", ".join(columns)
        conn.execute(f"INSERT INTO orders ({names}) VALUES ({', '.join('?' * len(columns))})", tuple(columns.values()))
        return columns["status"], True
    current, current_delivered = row[0], row[1]
    held = dict(zip(FIELDS, row[2:]))
    if identity and any(held[name] is not None for name in IDENTITY):  # none: an order known from webhooks only
        reason = another_order(order_id, held, identity)
        if reason is not None:
            raise AnotherOrder(order_id, reason)
    moved = advances(current, status)
    # A webhook fills a field the row lacks, never one the API (or an earlier event) gave: its amount and
    # quantity are hints, not the list's total (see the docstring).
    updates = {name: value for name, value in values.items() if source != WEBHOOK or held[name] is None}
    if moved:
        updates.update(status=status, status_at=stamp(occurred_at or now), source=source)
    if delivered_quantity is not None and delivered_quantity > (current_delivered or 0):
        updates["delivered_quantity"] = delivered_quantity
    if updates:  # `now` formatted only for a write: an event that neither moves nor fills the order writes nothing
        updates["updated_at"] = stamp(now)
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


# The reason `another_order` gives, as `given_twice` reads it back: the order id.
_GIVEN_TWICE_REASON = re.compile(rf"(?:gave up after \d+ attempts: )?{re.escape(ID_GIVEN_TWICE)} order (\d+)\b")


def given_twice(db: Database) -> list[int]:
    """The ids of the stored orders that a record of another order under their id was refused for, and still is:
    the order sync's quarantine entries (released when the order's own record is listed again) and the voucher
    fetches parked on a detail of another order, while each is its order's newest fetch (until a read of the
    order's own detail ends it). Sorted.
    One range of the quarantine's primary key (its order entries, usually none) and the parked fetches."""
    held = (entry["reason"] or "" for entry in quarantine.held(db, "order"))
    parked = (error or "" for (error,) in db.execute(  # through `jobs_due` (state, ...): the parked ones only
        "SELECT last_error FROM jobs AS j WHERE kind = ? AND state = 'dead' AND instr(last_error, ?) > 0"
        " AND id = (SELECT MAX(id) FROM jobs AS k WHERE k.kind = j.kind AND k.order_id = j.order_id)",
        (VOUCHER_FETCH, ID_GIVEN_TWICE)))
    found = (_GIVEN_TWICE_REASON.match(reason) for reason in (*held, *parked))
    return sorted({int(m.group(1)) for m in found if m is not None})
