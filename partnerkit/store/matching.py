"""Set-based matching SQL: one UTC day of recharges, orders and transactions against each other.

Everything here is INSERT ... SELECT, joins and GROUP BY over temp tables; no Python loop ever
walks the rows. `build(conn, params)` fills `temp.m_candidate` (kind, subject, reference, expected,
actual, currency, detail) with every drift detected for the day; `apply_candidates` merges them into
`drifts` (stable ids, audit trail, automatic resolution); the `day_*` queries feed the report.

Parameters (named): :start, :end (the day as an ISO range), :day, :now, :stuck_before.
The rules and why they look the way they do are in reconcile.matcher and docs/reconcile.md.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from partnerkit.store.drifts import SYSTEM_ACTOR, register_functions

# Recharge states (States and transitions > Recharge); legacy values are stored as SUCCESS by the
# worker, listed here too so that a legacy row can never escape the spend rules.
SPEND = "('SUCCESS', 'PROCESSING', 'DELIVERED', 'RECHARGED')"
CREDITED_BACK = "('FAILED', 'REVERSED')"
ORDER_REFUNDED = "('FAILED', 'CANCELLED')"

TEMP_TABLES = ("m_found", "m_state", "m_recharge", "m_link", "m_ragg", "m_order", "m_ordtx", "m_oagg", "m_daytx", "m_candidate")

_SETUP = (
    # The day's recharges (by the provider's creation time, else when partnerkit submitted it).
    f"""CREATE TEMP TABLE m_recharge AS
        SELECT local_id, provider_id, reference_number, origin, status,
               COALESCE(payable_cents, amount_cents) AS payable_cents, COALESCE(currency, 'INR') AS currency,
               COALESCE(reference_number, idempotency_key, 'local:' || local_id) AS ref,
               COALESCE(provider_created_at, submitted_at) AS created_at
        FROM recharges
        WHERE (provider_created_at >= :start AND provider_created_at < :end)
           OR (provider_created_at IS NULL AND submitted_at >= :start AND submitted_at < :end)""",
    # Transactions linked to them, on any day (a late refund arrives days later): by recharge_id,
    # else by reference_number. UNION ALL with an exclusion instead of UNION: no dedup sort.
    """CREATE TEMP TABLE m_link AS
        SELECT r.local_id, t.amount_cents FROM m_recharge r
               JOIN transactions t ON t.recharge_id = r.provider_id
        UNION ALL
        SELECT r.local_id, t.amount_cents FROM m_recharge r
               JOIN transactions t ON t.reference_number = r.reference_number
        WHERE t.recharge_id IS NULL OR t.recharge_id IS NOT r.provider_id""",
    """CREATE TEMP TABLE m_ragg (local_id INTEGER PRIMARY KEY, debit_n INTEGER, debit INTEGER,
                                 credit_n INTEGER, credit INTEGER)""",
    """INSERT INTO m_ragg
        SELECT local_id, SUM(amount_cents < 0), -SUM(MIN(amount_cents, 0)), SUM(amount_cents > 0),
               SUM(MAX(amount_cents, 0))
        FROM m_link GROUP BY local_id""",
    # The day's orders, with their stored vouchers.
    """CREATE TEMP TABLE m_order AS
        SELECT o.id, o.status, o.amount_cents, o.currency, o.quantity, o.delivered_quantity,
               CAST(o.transaction_id AS TEXT) AS tx_id,
               (SELECT COUNT(*) FROM vouchers v WHERE v.order_id = o.id) AS vouchers
        FROM orders o WHERE o.placed_at >= :start AND o.placed_at < :end""",
    # Every transaction any order names (for orphan detection on any day).
    """CREATE TEMP TABLE m_ordtx (tx_id TEXT PRIMARY KEY) WITHOUT ROWID""",
    """INSERT OR IGNORE INTO m_ordtx SELECT CAST(transaction_id AS TEXT) FROM orders
        WHERE transaction_id IS NOT NULL""",
    # Per order: the named ORDER debit, any other debits and the credits linked by order_id.
    """CREATE TEMP TABLE m_oagg AS
        SELECT o.id, o.status, o.amount_cents, o.currency, o.quantity, o.delivered_quantity, o.vouchers,
               o.tx_id, n.id AS named_id, -n.amount_cents AS named_debit, n.currency AS wallet_currency,
               (SELECT COUNT(*) FROM transactions x WHERE x.order_id = o.id AND x.amount_cents < 0
                   AND x.id IS NOT o.tx_id) AS extra_n,
               (SELECT -COALESCE(SUM(x.amount_cents), 0) FROM transactions x WHERE x.order_id = o.id
                   AND x.amount_cents < 0 AND x.id IS NOT o.tx_id) AS extra_debit,
               (SELECT COALESCE(SUM(x.amount_cents), 0) FROM transactions x WHERE x.order_id = o.id
                   AND x.amount_cents > 0) AS credit
        FROM m_order o LEFT JOIN transactions n ON n.id = o.tx_id AND n.amount_cents < 0""",
    # The day's transactions, linked or not.
    """CREATE TEMP TABLE m_daytx AS
        SELECT t.id, t.type, t.amount_cents, t.currency, t.created_at, t.balance_after_cents,
               (EXISTS (SELECT 1 FROM recharges r WHERE r.provider_id = t.recharge_id)
                OR EXISTS (SELECT 1 FROM recharges r WHERE r.reference_number = t.reference_number)
                OR EXISTS (SELECT 1 FROM orders o WHERE o.id = t.order_id)
                OR EXISTS (SELECT 1 FROM m_ordtx m WHERE m.tx_id = t.id)) AS linked
        FROM transactions t WHERE t.created_at >= :start AND t.created_at < :end""",
    """CREATE TEMP TABLE m_candidate (kind TEXT, subject TEXT, reference TEXT, expected_cents INTEGER,
                                      actual_cents INTEGER, currency TEXT, detail TEXT)""",
)

_RULES = (
    # Reconcile against payable, not face (Recharge endpoints > reconciliation rules).
    f"""INSERT INTO m_candidate
        SELECT 'missing_debit', 'recharge', r.ref, r.payable_cents, 0, r.currency,
               r.status || ' recharge with no wallet debit'
        FROM m_recharge r LEFT JOIN m_ragg a USING (local_id)
        WHERE (r.status IN {SPEND} OR r.status IN {CREDITED_BACK}) AND COALESCE(a.debit_n, 0) = 0""",
    f"""INSERT INTO m_candidate
        SELECT 'duplicate_debit', 'recharge', r.ref, r.payable_cents, a.debit, r.currency,
               a.debit_n || ' debits for one recharge'
        FROM m_recharge r JOIN m_ragg a USING (local_id) WHERE a.debit_n > 1""",
    """INSERT INTO m_candidate
        SELECT 'amount_mismatch', 'recharge', r.ref, r.payable_cents, a.debit, r.currency,
               'debit differs from payable'
        FROM m_recharge r JOIN m_ragg a USING (local_id)
        WHERE a.debit_n = 1 AND a.debit IS NOT r.payable_cents""",
    # FAILED and REVERSED: the debit and its credit back, net zero.
    f"""INSERT INTO m_candidate
        SELECT 'missing_refund', 'recharge', r.ref, a.debit, a.credit, r.currency,
               r.status || ' recharge not credited back in full'
        FROM m_recharge r JOIN m_ragg a USING (local_id)
        WHERE r.status IN {CREDITED_BACK} AND a.debit_n > 0 AND a.credit < a.debit""",
    f"""INSERT INTO m_candidate
        SELECT 'unexpected_refund', 'recharge', r.ref,
               CASE WHEN r.status IN {SPEND} THEN 0 ELSE a.debit END, a.credit, r.currency,
               r.status || ' recharge credited back' ||
               CASE WHEN r.status IN {SPEND} THEN '' ELSE ' more than debited' END
        FROM m_recharge r JOIN m_ragg a USING (local_id)
        WHERE (r.status IN {SPEND} AND a.credit_n > 0) OR (r.status IN {CREDITED_BACK} AND a.credit > a.debit)""",
    """INSERT INTO m_candidate
        SELECT 'stuck_processing', 'recharge', r.ref, r.payable_cents, NULL, r.currency,
               'still PROCESSING after 30 minutes: escalate to support with reference_number'
        FROM m_recharge r WHERE r.status = 'PROCESSING' AND r.created_at < :stuck_before""",
    # Partnerkit recorded it (intent or provider id), but the day's complete sync did not list it.
    """INSERT INTO m_candidate
        SELECT 'unknown_to_provider', 'recharge', r.ref, r.payable_cents, NULL, r.currency,
               CASE WHEN r.provider_id IS NULL THEN r.status || ' recharge the provider never acknowledged'
                    ELSE 'recharge ' || r.provider_id || ' missing from the provider''s list' END
        FROM m_recharge r
        JOIN sync_coverage c ON c.entity = 'recharges' AND c.day = :day AND c.synced_at >= :end
        LEFT JOIN recharge_seen s ON s.provider_id = r.provider_id
        WHERE r.origin = 'partner' AND (s.seen_at IS NULL OR s.seen_at < c.synced_at)""",
    """INSERT INTO m_candidate
        SELECT 'unknown_to_partner', 'recharge', r.ref, NULL, r.payable_cents, r.currency,
               'the provider has a recharge partnerkit never submitted'
        FROM m_recharge r WHERE r.origin = 'provider'""",
    # An order matches the ORDER transaction named by its transaction_id, for its amount.
    """INSERT INTO m_candidate
        SELECT 'missing_debit', 'order', CAST(o.id AS TEXT), o.amount_cents, 0, o.currency,
               o.status || ' order: ' || COALESCE('ORDER debit ' || o.tx_id, 'no transaction_id') || ' not found'
        FROM m_oagg o WHERE o.named_id IS NULL""",
    # A wallet in another currency is a conversion (Order endpoints > wallet auto-selection): no mismatch.
    """INSERT INTO m_candidate
        SELECT 'amount_mismatch', 'order', CAST(o.id AS TEXT), o.amount_cents, o.named_debit, o.currency,
               'ORDER debit differs from the order amount'
        FROM m_oagg o WHERE o.named_id IS NOT NULL AND o.named_debit IS NOT o.amount_cents
          AND (o.wallet_currency IS NULL OR o.currency IS NULL OR o.wallet_currency = o.currency)""",
    """INSERT INTO m_candidate
        SELECT 'duplicate_debit', 'order', CAST(o.id AS TEXT), COALESCE(o.named_debit, o.amount_cents),
               COALESCE(o.named_debit, 0) + o.extra_debit, COALESCE(o.wallet_currency, o.currency),
               (o.extra_n + (o.named_id IS NOT NULL)) || ' debits for one order'
        FROM m_oagg o WHERE o.extra_n > 0""",
    f"""INSERT INTO m_candidate
        SELECT 'missing_refund', 'order', CAST(o.id AS TEXT), o.named_debit, o.credit,
               COALESCE(o.wallet_currency, o.currency), o.status || ' order not refunded in full'
        FROM m_oagg o WHERE o.status IN {ORDER_REFUNDED} AND o.named_id IS NOT NULL AND o.credit < o.named_debit""",
    f"""INSERT INTO m_candidate
        SELECT 'unexpected_refund', 'order', CAST(o.id AS TEXT),
               CASE WHEN o.status IN {ORDER_REFUNDED} THEN o.named_debit ELSE 0 END, o.credit,
               COALESCE(o.wallet_currency, o.currency), o.status || ' order credited'
        FROM m_oagg o
        WHERE o.credit > 0 AND (o.status NOT IN {ORDER_REFUNDED} OR o.credit > COALESCE(o.named_debit, 0))""",
    # DELIVERED: every voucher stored. PARTIALLY_DELIVERED: the delivered ones (at least one).
    """INSERT INTO m_candidate
        SELECT 'voucher_shortfall', 'order', CAST(o.id AS TEXT),
               CASE WHEN o.status = 'DELIVERED' THEN o.quantity ELSE MAX(COALESCE(o.delivered_quantity, 1), 1) END,
               o.vouchers, o.currency, o.status || ' order with fewer stored vouchers than delivered'
        FROM m_oagg o
        WHERE (o.status = 'DELIVERED' AND o.vouchers < o.quantity)
           OR (o.status = 'PARTIALLY_DELIVERED' AND o.vouchers < MAX(COALESCE(o.delivered_quantity, 1), 1))""",
    """INSERT INTO m_candidate
        SELECT 'orphan_transaction', 'transaction', t.id, NULL, t.amount_cents, t.currency,
               COALESCE(t.type, 'untyped') || ' transaction linked to no recharge or order'
        FROM m_daytx t WHERE NOT t.linked AND COALESCE(t.type, '') NOT IN (SELECT value FROM json_each(:wallet_types))""",
    # Consecutive balance_after must chain by the amounts, per currency (one wallet per currency).
    """INSERT INTO m_candidate
        SELECT 'balance_discontinuity', 'wallet', id, prev + amount_cents, balance_after_cents, currency,
               'balance_after does not follow from the previous transaction'
        FROM (SELECT t.id, t.amount_cents, t.balance_after_cents, t.currency,
                     COALESCE(LAG(t.balance_after_cents) OVER w,
                              (SELECT p.balance_after_cents FROM transactions p
                               WHERE p.created_at < :start AND p.currency IS t.currency
                                 AND p.balance_after_cents IS NOT NULL
                               ORDER BY p.created_at DESC, length(p.id) DESC, p.id DESC LIMIT 1)) AS prev
              FROM m_daytx t WHERE t.balance_after_cents IS NOT NULL
              WINDOW w AS (PARTITION BY t.currency ORDER BY t.created_at, length(t.id), t.id))
        WHERE prev IS NOT NULL AND prev + amount_cents != balance_after_cents""",
)


def build(conn: sqlite3.Connection, params: dict[str, Any]) -> None:
    """Fill the temp tables and `m_candidate` for one day (inside the caller's transaction)."""
    register_functions(conn)
    drop(conn)
    for statement in _SETUP + _RULES:
        conn.execute(statement, {k: v for k, v in params.items() if f":{k}" in statement})
    conn.execute("CREATE INDEX temp.m_candidate_subject ON m_candidate(subject, reference)")


def drop(conn: sqlite3.Connection) -> None:
    """Remove the matcher's temp tables."""
    for name in TEMP_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS temp.{name}")


def apply_candidates(conn: sqlite3.Connection, *, day: str, now: str) -> dict[str, int]:
    """Merge the day's candidates into `drifts`; auto-resolve the day's open drifts not found again."""
    p = {"day": day, "now": now, "actor": SYSTEM_ACTOR}
    conn.execute("CREATE TEMP TABLE m_found (id TEXT PRIMARY KEY, kind, subject, reference, expected_cents,"
                 " actual_cents, currency, detail)")
    conn.execute("INSERT OR IGNORE INTO m_found SELECT drift_id(kind, subject, reference), * FROM m_candidate")
    conn.execute("CREATE TEMP TABLE m_state AS SELECT f.id, d.id IS NULL AS is_new,"
                 " COALESCE(d.resolution = 'resolved' AND d.resolution_by = :actor, 0) AS reopen"
                 " FROM m_found f LEFT JOIN drifts d USING (id)", p)
    conn.execute(
        """INSERT INTO drifts (id, kind, subject, reference, report_date, expected_cents, actual_cents, measure,
                               currency, detail, detected_at, last_detected_at)
           SELECT id, kind, subject, reference, :day, expected_cents, actual_cents,
                  CASE WHEN kind = 'voucher_shortfall' THEN 'count' ELSE 'money' END, currency, detail, :now, :now
           FROM m_found WHERE true
           ON CONFLICT(id) DO UPDATE SET
               report_date = excluded.report_date, expected_cents = excluded.expected_cents,
               actual_cents = excluded.actual_cents, currency = excluded.currency, detail = excluded.detail,
               last_detected_at = excluded.last_detected_at,
               resolution = CASE WHEN drifts.resolution = 'resolved' AND drifts.resolution_by = :actor
                                 THEN 'pending' ELSE drifts.resolution END,
               resolution_note = CASE WHEN drifts.resolution = 'resolved' AND drifts.resolution_by = :actor
                                 THEN NULL ELSE drifts.resolution_note END,
               resolution_by = CASE WHEN drifts.resolution = 'resolved' AND drifts.resolution_by = :actor
                                 THEN NULL ELSE drifts.resolution_by END,
               resolution_at = CASE WHEN drifts.resolution = 'resolved' AND drifts.resolution_by = :actor
                                 THEN NULL ELSE drifts.resolution_at END""", p)
    new = conn.execute(
        """INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)
           SELECT f.id, 'detected', 'pending', f.detail, :actor, :now FROM m_found f JOIN m_state s USING (id)
           WHERE s.is_new""", p).rowcount
    reopened = conn.execute(
        """INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)
           SELECT id, 'reopened', 'pending', 'detected again on ' || :day || ' run', :actor, :now
           FROM m_state WHERE reopen""", p).rowcount
    note = f"no longer detected on {day} run"
    gone = "FROM drifts d WHERE d.report_date = :day AND d.resolution != 'resolved' AND d.id NOT IN (SELECT id FROM m_found)"
    conn.execute(f"INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)"
                 f" SELECT d.id, 'auto_resolved', 'resolved', :note, :actor, :now {gone}", {**p, "note": note})
    resolved = conn.execute(
        "UPDATE drifts SET resolution = 'resolved', resolution_note = :note, resolution_by = :actor,"
        " resolution_at = :now WHERE report_date = :day AND resolution != 'resolved'"
        " AND id NOT IN (SELECT id FROM m_found)", {**p, "note": note}).rowcount
    conn.execute("DROP TABLE temp.m_found")
    conn.execute("DROP TABLE temp.m_state")
    return {"new": new, "reopened": reopened, "auto_resolved": resolved}


def _rows(cursor: sqlite3.Cursor) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r)) for r in cursor.fetchall()]


def day_summary(conn: sqlite3.Connection, wallet_types: str) -> dict[str, Any]:
    """Totals of the day from the temp tables (call after `build`, before `drop`)."""
    one = lambda sql, params=(): conn.execute(sql, params).fetchone()[0]  # noqa: E731
    drifted = one("SELECT COUNT(*) FROM (SELECT DISTINCT subject, reference FROM m_candidate"
                  " WHERE subject IN ('recharge', 'order'))")
    money = _rows(conn.execute(
        """SELECT COALESCE(currency, '') AS currency,
                  -SUM(MIN(amount_cents, 0)) AS spend_cents,
                  SUM(MAX(amount_cents, 0)) AS refunds_cents
           FROM m_daytx WHERE COALESCE(type, '') NOT IN (SELECT value FROM json_each(?))
           GROUP BY 1 ORDER BY 1""", (wallet_types,)))
    hourly = _rows(conn.execute(
        """SELECT COALESCE(currency, '') AS currency, CAST(substr(created_at, 12, 2) AS INTEGER) AS hour,
                  -SUM(amount_cents) AS spend_cents
           FROM m_daytx WHERE amount_cents < 0 AND COALESCE(type, '') NOT IN (SELECT value FROM json_each(?))
           GROUP BY 1, 2 ORDER BY 1, 2""", (wallet_types,)))
    return {
        "recharges_total": one("SELECT COUNT(*) FROM m_recharge"),
        "orders_total": one("SELECT COUNT(*) FROM m_order"),
        "transactions_total": one("SELECT COUNT(*) FROM m_daytx"),
        "drifted": drifted,
        "unmatched": one("SELECT COUNT(*) FROM m_candidate WHERE kind = 'orphan_transaction'"),
        "recharge_status": dict(conn.execute("SELECT status, COUNT(*) FROM m_recharge GROUP BY 1 ORDER BY 1").fetchall()),
        "order_status": dict(conn.execute("SELECT status, COUNT(*) FROM m_order GROUP BY 1 ORDER BY 1").fetchall()),
        "money": money,
        "hourly": hourly,
        "conversions": _rows(conn.execute(
            """SELECT id AS order_id, currency AS order_currency, amount_cents AS order_amount_cents,
                      wallet_currency, named_debit AS debited_cents, named_id AS transaction_id
               FROM m_oagg WHERE named_id IS NOT NULL AND wallet_currency IS NOT NULL AND currency IS NOT NULL
                 AND wallet_currency != currency ORDER BY id""")),
        "detected_ids": [r[0] for r in conn.execute(
            "SELECT DISTINCT drift_id(kind, subject, reference) FROM m_candidate ORDER BY 1").fetchall()],
    }


BULK_RECHARGE_COLUMNS = ("local_id", "idempotency_key", "provider_id", "reference_number", "origin", "mobile_number",
                         "status", "face_cents", "discount_cents", "payable_cents", "currency", "submitted_at",
                         "provider_created_at", "updated_at")


def bulk_load_recharges(conn: sqlite3.Connection, rows: Any) -> None:
    """Insert synthetic recharges as the worker's submits left them (benchmarks only; production rows come from
    reconcile.recharges one submit at a time)."""
    conn.executemany(f"INSERT INTO recharges ({', '.join(BULK_RECHARGE_COLUMNS)})"
                     f" VALUES ({', '.join('?' * len(BULK_RECHARGE_COLUMNS))})", rows)


def bulk_load_transactions(conn: sqlite3.Connection, rows: Any) -> None:
    """Insert transactions known to be new (benchmarks and first loads: no upsert bookkeeping)."""
    conn.executemany("INSERT INTO transactions (id, type, amount_cents, order_id, reference_number, recharge_id,"
                     " currency, created_at, balance_after_cents, raw, synced_at)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def bulk_load_orders(conn: sqlite3.Connection, orders: Any, vouchers: Any) -> None:
    """Insert synthetic orders (id, status, currency, quantity, amount_cents, transaction_id, placed_at, now) and vouchers."""
    conn.executemany("INSERT INTO orders (id, status, currency, quantity, amount_cents, transaction_id, placed_at,"
                     " source, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'bench', ?8, ?8)", orders)
    conn.executemany("INSERT INTO vouchers (order_id, fingerprint, stored_at) VALUES (?, ?, ?)", vouchers)
