"""Time `orders list` and the order lookup by reference_code on a store of many orders, before and after.

    python scripts/orders_listing_timing.py [--orders 300000] [--repeat 5] [--store PATH]

Builds (once, then reuses: `--store`, default /tmp/partnerkit-orders-timing.db) a store of N orders over
30 days with two vouchers each, a few undated (placed_at NULL: a webhook created them and no sync has
dated them yet), one in three with a reference_code and an ORDER debit each. Then prints, best of
`--repeat` runs, wall milliseconds of:

- `orders list` (the newest 100): the statement before (every order sorted, each one's vouchers counted)
  and `partnerkit.store.orders.list_orders` now (the newest dated ones from `orders_placed_at`, merged
  with the undated ones); both answers are compared;
- `orders list --status DELIVERED`: before (every such order sorted whole, each one's vouchers counted) and
  now (sorted by date and id alone, the 100 read whole);
- `transactions list --reference R` for an order's ref, and a ref no order has, and `orders.by_reference`:
  without `orders_reference` (dropped inside a transaction that is rolled back) and with it;
- what a webhook creating an order writes into `orders_reference` (entries before and after: none).

Nothing is asserted: the numbers are for docs/reconcile.md ("A store with months of history"). Not part of
`make bench`; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from partnerkit.crypto import Cipher  # noqa: E402
from partnerkit.store import inbox, ledger, open_db, orders, transaction  # noqa: E402

START = datetime(2025, 3, 1, tzinfo=timezone.utc)
UNDATED_EVERY = 5000  # one order in this many has no placed_at (a webhook's, not yet read by the sync)
OLD_LIST = """SELECT o.*, (SELECT COUNT(*) FROM vouchers v WHERE v.order_id = o.id) AS vouchers_stored
              FROM orders o ORDER BY COALESCE(o.placed_at, o.created_at) DESC, o.id DESC LIMIT ?"""


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def build(path: Path, count: int) -> None:
    """N orders over 30 days, two vouchers each, one in three with a ref and its ORDER debit."""
    db = open_db(path)
    try:
        span = timedelta(days=30) / count
        rows, vouchers, debits = [], [], []
        for i in range(1, count + 1):
            at = _stamp(START + span * i)
            dated = i % UNDATED_EVERY != 0
            ref = f"REF{i:08d}" if i % 3 == 0 else None
            rows.append((i, ref, "DELIVERED" if i % 50 else "FAILED", 2, 2, 100000, at if dated else None, at,
                         "sync" if dated else "webhook", at, at))
            vouchers += [(i, f"fp{i}-{k}", b"\0" * 60, at) for k in range(2)]
            if ref:
                debits.append((f"{900000000 + i}", "ORDER", -100000, "INR", at, i, at))
        db.conn.execute("BEGIN")
        db.conn.executemany("INSERT INTO orders (id, reference_code, status, quantity, delivered_quantity, "
                            "amount_cents, placed_at, status_at, source, created_at, updated_at) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.conn.executemany("INSERT INTO vouchers (order_id, fingerprint, card_number, stored_at) VALUES (?,?,?,?)",
                            vouchers)
        db.conn.executemany("INSERT INTO transactions (id, type, amount_cents, currency, created_at, order_id, "
                            "raw, synced_at) VALUES (?, ?, ?, ?, ?, ?, '{}', ?)", debits)
        db.conn.execute("COMMIT")
    finally:
        db.conn.close()


def best_ms(run, repeat: int) -> tuple[float, object]:
    """The fastest of `repeat` runs in milliseconds, and the last answer."""
    best, answer = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        answer = run()
        best = min(best, time.perf_counter() - started)
    return best * 1000, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", type=Path, default=Path("/tmp/partnerkit-orders-timing.db"))
    args = parser.parse_args()
    if not args.store.exists():
        started = time.perf_counter()
        partial = args.store.with_name(args.store.name + ".building")
        for leftover in partial.parent.glob(partial.name + "*"):
            leftover.unlink()
        build(partial, args.orders)
        partial.rename(args.store)  # closed, so its WAL was checkpointed into it
        print(f"built {args.store} with {args.orders:,} orders in {time.perf_counter() - started:.1f} s")
    db = open_db(args.store)  # migrated: orders_reference is built here on a store made before it
    count = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    print(f"store: {count:,} orders, {db.execute('SELECT COUNT(*) FROM vouchers').fetchone()[0]:,} vouchers")

    def old_list():
        cursor = db.execute(OLD_LIST, (101,))
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    before, old_rows = best_ms(old_list, args.repeat)
    after, new_rows = best_ms(lambda: orders.list_orders(db, limit=101), args.repeat)
    print(f"orders list (newest 100)          before {before:9.2f} ms   after {after:9.2f} ms   "
          f"same answer: {old_rows == new_rows}")
    def old_status_list():
        cursor = db.execute(OLD_LIST.replace("FROM orders o", "FROM orders o WHERE o.status = ?"), ("DELIVERED", 101))
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    status_before, old_status = best_ms(old_status_list, args.repeat)
    by_status, status_rows = best_ms(lambda: orders.list_orders(db, status="DELIVERED", limit=101), args.repeat)
    print(f"orders list --status DELIVERED    before {status_before:9.2f} ms   after {by_status:9.2f} ms   "
          f"same answer: {old_status == status_rows}")

    ref = db.execute("SELECT reference_code FROM orders WHERE reference_code IS NOT NULL ORDER BY id DESC LIMIT 1"
                     ).fetchone()[0]
    lookups = {
        f"transactions list --reference {ref}": lambda: ledger.list_transactions(db, reference=ref, limit=100),
        "transactions list --reference NOSUCHREF": lambda: ledger.list_transactions(db, reference="NOSUCHREF",
                                                                                    limit=100),
        f"orders.by_reference({ref!r})": lambda: orders.by_reference(db, ref),
    }
    for label, run in lookups.items():
        db.conn.execute("BEGIN")
        db.conn.execute("DROP INDEX orders_reference")  # before migration 14; rolled back below
        try:
            before, old_answer = best_ms(run, args.repeat)
        finally:
            db.conn.execute("ROLLBACK")
        after, new_answer = best_ms(run, args.repeat)
        print(f"{label:42s} before {before:9.2f} ms   after {after:9.2f} ms   same answer: {old_answer == new_answer}")

    def entries() -> int:
        return db.execute("SELECT COUNT(*) FROM orders INDEXED BY orders_reference WHERE reference_code IS NOT NULL"
                          ).fetchone()[0]

    had = entries()
    order_id = count + 1
    body = json.dumps({"event_id": f"evt-timing-{order_id}", "event_type": "order.delivered",
                       "created_at": _stamp(START + timedelta(days=31)),
                       "data": {"id": order_id, "reference_code": "REF-FROM-A-WEBHOOK", "status": "DELIVERED",
                                "quantity": 1, "amount": "500.00"}}).encode()
    from receiver.envelope import normalise

    event_id = f"evt-timing-{order_id}"
    try:
        inbox.record(db, normalise(body, {}), body, cipher=Cipher(b"orders-timing-voucher-key-012345"), now=START)
        print(f"a webhook creating order {order_id} (its body carries a reference_code): orders_reference "
              f"entries {had:,} -> {entries():,}")
    finally:  # the store is left as it was
        with transaction(db) as conn:
            conn.execute("DELETE FROM jobs WHERE order_id = ?", (order_id,))
            conn.execute("DELETE FROM inbox WHERE dedup_key = ?", (event_id,))
            conn.execute("DELETE FROM orders WHERE id = ?", (order_id,))
    db.conn.close()


if __name__ == "__main__":
    main()
