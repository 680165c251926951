"""Bulk inserts of synthetic rows, for the benchmarks and the tests that need a big store quickly.

Production rows never come this way: recharges come from `reconcile.recharges` one submit at a time
and from the syncs, orders from the receiver and the order sync. These write the same tables in the
shape those leave them, many rows to a statement, inside the caller's `transaction(db)`
(bench/reconcile/run.py, `setup`; bench/reconcile/day.py makes the rows).
"""

from __future__ import annotations

import sqlite3
from typing import Any

# The recharge columns a submit through partnerkit fills, in the order bench/reconcile/day.py's rows give them.
BULK_RECHARGE_COLUMNS = ("local_id", "idempotency_key", "provider_id", "reference_number", "origin", "mobile_number",
                         "status", "face_cents", "discount_cents", "payable_cents", "currency", "submitted_at",
                         "provider_created_at", "updated_at")


def bulk_load_recharges(conn: sqlite3.Connection, rows: Any) -> None:
    """Insert synthetic recharges as the worker's submits left them (BULK_RECHARGE_COLUMNS, in that order)."""
    conn.executemany(f"INSERT INTO recharges ({', '.join(BULK_RECHARGE_COLUMNS)})"
                     f" VALUES ({', '.join('?' * len(BULK_RECHARGE_COLUMNS))})", rows)


def bulk_load_orders(conn: sqlite3.Connection, orders: Any, vouchers: Any) -> None:
    """Insert synthetic orders (id, status, currency, quantity, amount_cents, transaction_id, placed_at, now) and
    their vouchers (order_id, fingerprint, stored_at)."""
    conn.executemany("INSERT INTO orders (id, status, currency, quantity, amount_cents, transaction_id, placed_at,"
                     " source, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'bench', ?8, ?8)", orders)
    conn.executemany("INSERT INTO vouchers (order_id, fingerprint, stored_at) VALUES (?, ?, ?)", vouchers)
