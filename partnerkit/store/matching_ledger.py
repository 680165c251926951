"""Set-based matching SQL, the wallet's side: one UTC day of transactions, on any connection.

Everything here reads the store and the connection's own temp tables (prefixed `l_`), nothing of
`partnerkit.store.matching`'s: so it can run on a second connection, in another thread, while the
matcher's connection works through the recharges (sqlite3 releases the GIL while a statement runs,
so the two use both cores). `ledger_findings` returns what it found:

- orphans: the day's transactions linked to no recharge or order (each probe stops at the first link; the
  order naming a transaction is found through `orders_transaction`, an index on the expression the probe
  states, so no probe reads the order table);
- balance discontinuities: the day's rows copied in chain order (`l_chain`), so that each row's
  predecessor is seq - 1 (a rowid lookup; a window function runs several times slower).
  balance_after is optional: a row that has one is checked against its predecessor's, when that has
  one too (a row without is still a movement); the day's first row is checked against an earlier
  day's last only when the store holds every entry in between (each day from that one's read in full,
  by a read begun after the day ended);
- totals per (currency, hour) in one GROUP BY over that copy: the debits and credits that are not
  wallet movements (the report's gross figures) and those of every entry (the wallet's roll-forward).

The copy is the one sort of the day's transactions and, besides the orphans' probe, their one read:
the totals group its compact rows (the hour and the wallet-movement test computed as it is filled),
where they used to read and sort the day's transactions again.

Parameters (named): :start, :end (the day as an ISO range), :day; the wallet movement types are bound
one parameter each (:w0, :w1, ...).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Iterable

from partnerkit.store.matching import CHARGE_TYPES

TEMP_TABLES = ("l_chain",)


@dataclass(frozen=True)
class LedgerFindings:
    """The day's transaction drifts (m_candidate rows) and totals."""

    candidates: list[tuple]
    totals: list[dict[str, Any]]


def wallet_params(wallet_types: Iterable[str]) -> tuple[str, dict[str, str]]:
    """The IN list of wallet movement types as placeholders and their bound values."""
    values = {f"w{n}": t for n, t in enumerate(wallet_types)}
    return (", ".join(f":{k}" for k in values) or "NULL"), values


def _statements(wallet: str) -> tuple[str, ...]:
    return (
        # Consecutive balance_after must chain by the amounts, per currency (one wallet per currency). Every
        # row of the day is copied, whether its currency shows a balance that day or not: a row without one
        # is never checked (_BREAKS reads the rows that have one), and a predecessor in another currency is
        # none, so the rows of a currency without a balance change no finding; the totals count them.
        # `hour` and `w` (a wallet movement, not a conversion's charge) are what _TOTALS groups and sums.
        "CREATE TEMP TABLE l_chain (seq INTEGER PRIMARY KEY, id TEXT, amount INTEGER, balance INTEGER, currency TEXT,"
        " hour INTEGER, w INTEGER)",
        f"""INSERT INTO l_chain (id, amount, balance, currency, hour, w)
            SELECT id, amount_cents, balance_after_cents, currency, CAST(substr(created_at, 12, 2) AS INTEGER),
                   COALESCE(type, '') IN ({wallet}) AND COALESCE(type, '') NOT IN {CHARGE_TYPES}
            FROM transactions WHERE created_at >= :start AND created_at < :end
            ORDER BY currency, rtrim(created_at, 'Z'), length(id), id""",
    )


# What an orphan claims to pay for, for finance to look it up: its type, debit or credit, its time and the
# reference_number, recharge_id and order_id it carries ("RECHARGE debit at 2026-11-22T10:00:00Z naming
# reference_number GHOST1: no such recharge or order"), built in the statement like every other detail.
ORPHAN_DETAIL = ("COALESCE(t.type, 'untyped') || CASE WHEN t.amount_cents < 0 THEN ' debit' ELSE ' credit' END"
                 " || ' at ' || t.created_at || COALESCE(' naming ' || NULLIF(substr("
                 "COALESCE(', reference_number ' || t.reference_number, '')"
                 " || COALESCE(', recharge_id ' || t.recharge_id, '') || COALESCE(', order_id ' || t.order_id, ''), 3),"
                 " '') || ': no such recharge or order',"
                 " ' naming no reference_number, recharge_id or order_id')")


def _orphans(wallet: str) -> str:
    return f"""
        SELECT 'orphan_transaction', 'transaction', t.id, NULL, t.amount_cents, t.currency, {ORPHAN_DETAIL}
        FROM transactions t
        WHERE t.created_at >= :start AND t.created_at < :end
          AND NOT EXISTS (SELECT 1 FROM recharges r WHERE r.provider_id = t.recharge_id)
          AND NOT EXISTS (SELECT 1 FROM recharges r WHERE r.reference_number = t.reference_number)
          AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = t.order_id)
          AND NOT EXISTS (SELECT 1 FROM orders n WHERE CAST(n.transaction_id AS TEXT) = t.id
                          AND n.transaction_id IS NOT NULL)
          AND COALESCE(t.type, '') NOT IN ({wallet})"""


# Time order of stored times: they are ISO text ending in Z, with a fraction only when there is one
# ("...T02:00:00Z", "...T02:00:00.500000Z"), so as text a whole second sorts after its own fractions;
# without the Z it sorts before them (a prefix), and the fractions (always 6 digits) among themselves.
# The first row of a currency chains from that currency's last transaction before the day (when it
# shows a balance): the last second that has one is found through the created_at index (text order
# is time order across seconds), then that second's rows are put in time order. That link is judged
# only when the store holds every entry after that one: its own day and every day up to the matched one
# read in full (`sync_coverage` of transactions) by a read that began after the day ended. Across a day
# never synced, or one read only while it lasted (a 15-minute sync at 23:45, the worker down before
# midnight), the store's last entry is not the provider's, and the break would be the store's hole
# carrying the unread entries' sum, not the provider's. The link is then not judged (unverified); once the
# hole is read in full, the day matched again judges it (the nightly run matches again the nights reported
# after one it catches up, reconcile.jobs.nightly).
_BREAKS = """
    SELECT 'balance_discontinuity', 'wallet', id, prev + amount, balance, currency,
           'balance_after does not follow from the previous transaction'
    FROM (SELECT b.id, b.amount, b.balance, b.currency,
                 CASE WHEN a.seq IS NOT NULL AND a.currency IS b.currency THEN a.balance
                      ELSE (SELECT CASE WHEN (SELECT COUNT(*) FROM sync_coverage c
                                              WHERE c.entity = 'transactions' AND c.day >= substr(p.created_at, 1, 10)
                                                AND c.day < :day
                                                AND c.synced_at >= date(c.day, '+1 day') || 'T00:00:00')
                                             = julianday(:day) - julianday(substr(p.created_at, 1, 10))
                                        THEN p.balance_after_cents END
                            FROM transactions p
                            WHERE p.created_at < :start AND p.currency IS b.currency
                              AND p.created_at >= (SELECT substr(q.created_at, 1, 19) FROM transactions q
                                                   WHERE q.created_at < :start AND q.currency IS b.currency
                                                   ORDER BY q.created_at DESC LIMIT 1)
                            ORDER BY rtrim(p.created_at, 'Z') DESC, length(p.id) DESC, p.id DESC LIMIT 1) END AS prev
          FROM l_chain b LEFT JOIN l_chain a ON a.seq = b.seq - 1 WHERE b.balance IS NOT NULL)
    WHERE prev IS NOT NULL AND prev + amount != balance"""


# All of the day's transactions (n, their debits and credits: the wallet's roll-forward) and those not wallet
# movements (counted, their debits and credits) per (currency, hour): the report's money figures are sums of these
# rows. A conversion's charge is a wallet movement (never an orphan) but money spent, so it is counted (`w`, set
# as l_chain is filled). Grouped from the copy (small rows, in the temp schema) rather than from `transactions`, a
# second read and sort of the day: on bench.reconcile's 100k day this statement took 0.28 CPU-seconds before, 0.10
# now, the copy 0.14 and 0.23, the wallet's side 0.63-0.69 and 0.47-0.57 (medians of 10, alternated).
_TOTALS = """
    SELECT COALESCE(currency, '') AS currency, hour, COUNT(*) AS n, SUM(NOT w) AS counted,
           SUM(CASE WHEN w THEN 0 ELSE MIN(amount, 0) END) AS debit_cents,
           SUM(CASE WHEN w THEN 0 ELSE MAX(amount, 0) END) AS credit_cents,
           SUM(MIN(amount, 0)) AS all_debit_cents, SUM(MAX(amount, 0)) AS all_credit_cents
    FROM l_chain GROUP BY 1, 2 ORDER BY 1, 2"""


def _run(conn: sqlite3.Connection, statement: str, params: dict[str, Any]) -> sqlite3.Cursor:
    return conn.execute(statement, {k: v for k, v in params.items() if f":{k}" in statement})


def drop(conn: sqlite3.Connection) -> None:
    """Remove this module's temp tables."""
    for name in TEMP_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS temp.{name}")


def ledger_findings(conn: sqlite3.Connection, params: dict[str, Any], wallet_types: Iterable[str]) -> LedgerFindings:
    """The day's orphans, balance breaks and totals (reads only; the caller holds the transaction)."""
    wallet, values = wallet_params(wallet_types)
    params = {**params, **values}
    drop(conn)
    try:
        for statement in _statements(wallet):
            _run(conn, statement, params)
        candidates = _run(conn, _orphans(wallet), params).fetchall() + _run(conn, _BREAKS, params).fetchall()
        names = ("currency", "hour", "n", "counted", "debit_cents", "credit_cents", "all_debit_cents",
                 "all_credit_cents")
        totals = [dict(zip(names, row)) for row in _run(conn, _TOTALS, params)]
    finally:
        drop(conn)
    return LedgerFindings(candidates, totals)
