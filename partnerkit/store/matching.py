"""Set-based matching SQL: one UTC day of recharges and orders against the wallet's transactions.

Everything here is INSERT ... SELECT, joins and GROUP BY; no Python loop ever walks the rows.
`build(conn, params)` fills `temp.m_candidate` (kind, subject, reference, expected, actual,
currency, detail) with the day's recharge and order drifts; the day's transaction drifts come from
`partnerkit.store.matching_ledger` (possibly run on another connection meanwhile) through
`add_candidates`; `find` keys them by drift id and notes the stored drifts as the snapshot sees them;
`day_summary` gives the report's recharge and order totals (and the day's spend as the document means
it), `found_summary` what it says of the drifts. All of that only reads the store (temp tables are not
the main database), so it runs in a read transaction; `apply_candidates` then merges the candidates
into `drifts` (stable ids, audit trail, automatic resolution) in the one short write transaction.

Parameters (named): :start, :end (the day as an ISO range), :day, :now, :stuck_before.

The recharges are read in one pass, in `recharges_provider_created` order, each joined to its
transactions (by recharge_id or reference_number: one OR join that SQLite answers from two indexes),
aggregated per recharge without a sort (GROUP BY in index order); only the recharges that break a
rule are kept (`m_rdrift`, typically a few percent) and the rules run over those. At a million
recharges each pass over them costs about a second, so the shape of this statement is the
matcher's speed.

The rules and why they look the way they do are in reconcile.matcher and docs/reconcile.md."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Iterable

from partnerkit.store.drifts import SEEN_COLUMNS, drift_filter, merge_found, merge_scope, register_functions
from partnerkit.store.recharges import OWN_REFERENCE_DIGITS, OWN_REFERENCE_PREFIX

# Recharge states (States and transitions > Recharge); legacy values are stored as SUCCESS by the
# worker, listed here too so that a legacy row can never escape the spend rules.
SPEND_STATUSES = ("SUCCESS", "PROCESSING", "DELIVERED", "RECHARGED")
SPEND = "(" + ", ".join(f"'{status}'" for status in SPEND_STATUSES) + ")"
CREDITED_BACK = "('FAILED', 'REVERSED')"
ORDER_REFUNDED = "('FAILED', 'CANCELLED')"
# Transaction types of a currency conversion or its charge (upper-cased by the mapping): wallet movements,
# never orphans (reconcile.matcher.WALLET_TYPES), and on a converted order its conversion's charges.
CONVERSION_TYPES = ("CONVERSION", "FX", "FOREX", "FX_CONVERSION", "FX_FEE", "CONVERSION_FEE")
# Of those, the charges: money the wallet spent, so counted in the report's spend (a conversion itself
# moves money between the partner's own wallets and is not).
CHARGE_TYPES = ("FX_FEE", "CONVERSION_FEE")

# The client_reference partnerkit generates for each submit, as a GLOB: `pk-` and 20 lowercase hex digits
# (partnerkit.store.recharges.OWN_REFERENCE_PREFIX; docs/worker.md, "Submit"). The provider echoes it on every read.
OWN_CLIENT_REFERENCE = OWN_REFERENCE_PREFIX + "[0-9a-f]" * OWN_REFERENCE_DIGITS

TEMP_TABLES = ("m_found", "m_seen", "m_state", "m_restore", "m_gone", "m_moved", "m_rdrift", "m_order", "m_oagg",
               "m_candidate")


@dataclass(frozen=True)
class Rule:
    """One recharge rule over `m_rdrift`: the drift it records and the SQL condition that finds it."""

    kind: str
    expected: str
    actual: str
    detail: str
    when: str

    def insert(self) -> str:
        """The rule's INSERT into m_candidate."""
        return (f"INSERT INTO m_candidate SELECT '{self.kind}', 'recharge', ref, {self.expected}, {self.actual},"
                f" currency, {self.detail} FROM m_rdrift WHERE {self.when}")


# Columns of m_rdrift: local_id, provider_id, origin, status, payable_cents, currency, ref, since (where its age
# counts from: partnerkit's own submit time, else the provider's created_at; see the stuck_processing rule),
# debit_n, debit, credit_n, credit (over the recharge's linked transactions, 0 when none), foreign_currency (the
# currency of a debit in another currency than the recharge's, else NULL), unseen.
#
# Judged on the net: a second debit the provider credited back leaves the wallet as if it had been
# taken once, so a duplicate is only one while the net is still over what the recharge owes (payable
# when spend, nothing when credited back), and a credit up to the duplicate's excess is its correction,
# not an unexpected refund. A duplicate_debit therefore resolves itself when its credit arrives, as a
# missing_refund does. One debit and a credit stay as they were: the amount is judged on the debit.
OWED = f"CASE WHEN status IN {SPEND} THEN COALESCE(payable_cents, 0) ELSE 0 END"
EXCESS = f"(debit_n > 1) * MAX(debit - {OWED}, 0)"  # what a second debit took beyond what is owed


def money(cents: str) -> str:
    """SQL writing a non-negative amount of cents (an SQL expression) as money with two decimals ("97.50")."""
    return f"printf('%d.%02d', ({cents}) / 100, ({cents}) % 100)"


# What the wallet shows of a recharge whose drift is not about its money (stuck_processing, unknown_to_provider),
# for the detail: its debit and any credit back, or that it shows none; the figure itself is the drift's actual.
WALLET_SEEN = ("CASE WHEN debit_n = 0 THEN '{none}' ELSE '{some}' || " + money("debit") + " || ' for it'"
               " || CASE WHEN credit_n > 0 THEN ', credited back ' || " + money("credit") + " ELSE '' END END")
RECHARGE_RULES = (
    # Reconcile against payable, not face (Recharge endpoints > reconciliation rules). A FAILED or REVERSED
    # recharge shows its debit and its credit back; with neither, the wallet nets to zero as it should: still
    # flagged (the provider's history lacks the pair), but at its net (expected 0, nothing at stake), not at
    # the payable a SUCCESS one may still be debited.
    Rule("missing_debit", f"CASE WHEN status IN {CREDITED_BACK} THEN 0 ELSE payable_cents END", "0",
         f"CASE WHEN status IN {CREDITED_BACK} THEN status || CASE WHEN credit_n = 0"
         " THEN ' recharge with neither its debit nor its credit back (payable ' || " + money("payable_cents")
         + " || '): the wallet nets to zero, nothing at stake'"
         " ELSE ' recharge credited back with no debit (payable ' || " + money("payable_cents")
         + " || '): the credit is its unexpected_refund' END"
         " ELSE status || ' recharge with no wallet debit' END",
         f"(status IN {SPEND} OR status IN {CREDITED_BACK}) AND debit_n = 0"),
    Rule("duplicate_debit", "payable_cents", f"CASE WHEN status IN {SPEND} THEN debit - credit ELSE debit END",
         "debit_n || ' debits for one recharge' || CASE WHEN credit_n > 0 THEN ', not all credited back' ELSE '' END",
         f"debit_n > 1 AND debit - credit > {OWED}"),
    # A debit in another currency is never a match, whatever its figure: the recharge endpoints know
    # no conversion (only orders select a wallet), so the debit is not this recharge's amount.
    Rule("amount_mismatch", "payable_cents", "debit",
         "CASE WHEN foreign_currency IS NOT NULL"
         " THEN 'debited ' || (debit / 100) || '.' || printf('%02d', debit % 100) || ' in ' || foreign_currency"
         " || ', the recharge is in ' || currency ELSE 'debit differs from payable' END",
         "foreign_currency IS NOT NULL OR (debit_n = 1 AND debit IS NOT payable_cents)"),
    # FAILED and REVERSED: the debit and its credit back, net zero.
    Rule("missing_refund", "debit", "credit", "status || ' recharge not credited back in full'",
         f"status IN {CREDITED_BACK} AND debit_n > 0 AND credit < debit"),
    Rule("unexpected_refund", f"CASE WHEN status IN {SPEND} THEN {EXCESS} ELSE debit END", "credit",
         f"status || ' recharge credited back' || CASE WHEN status IN {SPEND} THEN"
         f" CASE WHEN debit_n > 1 THEN ' more than its second debit took' ELSE '' END ELSE ' more than debited' END",
         f"(status IN {SPEND} AND credit_n > 0 AND credit > {EXCESS})"
         f" OR (status IN {CREDITED_BACK} AND credit > debit)"),
    # Aged on our clock, as the poller ages it (reconcile.polling): from partnerkit's own submit time, the
    # provider's created_at only for a recharge someone else submitted. By the provider's clock, one running
    # ten minutes behind ours had a recharge "stuck" twenty minutes after it was sent.
    # Its actual is what the wallet shows of it (debits less credits back, on any day): support is asked about
    # the debit the provider holds, by its transaction id (WALLET_ACTUAL_KINDS). None until the store holds a
    # debit or credit of it, as the poller records it (reconcile.poller, which does not read the wallet): whether
    # its debit has landed is no news about a recharge still PROCESSING (drifts.CONTEXT_ACTUAL_KINDS).
    Rule("stuck_processing", "payable_cents", "CASE WHEN debit_n + credit_n > 0 THEN debit - credit END",
         "'still PROCESSING after 30 minutes: escalate to support with reference_number' || "
         + WALLET_SEEN.format(none="; no wallet debit for it yet", some="; the wallet was debited "),
         "status = 'PROCESSING' AND since < :stuck_before"),
    # Partnerkit recorded it (intent or provider id), but the day's complete sync did not list it. A debit
    # the provider took for it is the question for support ("you debited 97.50 in transaction 700015 for a
    # recharge you do not list"): actual and the detail say whether the wallet shows one. 0 when it shows
    # none, never NULL: a debit that appears later is news (drifts.is_news), a figure shown where an older
    # release stored none is not.
    Rule("unknown_to_provider", "payable_cents", "debit - credit",
         "CASE WHEN provider_id IS NULL THEN status || ' recharge the provider never acknowledged'"
         " ELSE 'recharge ' || provider_id || ' missing from the provider''s list' END || "
         + WALLET_SEEN.format(none=", and no wallet debit for it", some=", yet the wallet was debited "), "unseen"),
    # Not in the store, but carrying partnerkit's own client_reference: the kit submitted it from a database that
    # no longer holds it (a restored or copied one), not someone else using the key. The kind stays (contract).
    Rule("unknown_to_partner", "NULL", "payable_cents",
         "COALESCE((SELECT 'carries partnerkit''s own client_reference: submitted by partnerkit from a database that"
         " no longer has it: a restored or copied database (client_reference ' || r.client_reference || ')'"
         f" FROM recharges r WHERE r.local_id = m_rdrift.local_id AND r.client_reference GLOB '{OWN_CLIENT_REFERENCE}'),"
         " 'the provider has a recharge partnerkit never submitted')",
         "origin = 'provider'"),
)


def _recharges(where: str) -> str:
    """The day's recharges matching `where`, with their linked transactions aggregated, one row each.

    Linked on any day (a late refund arrives days later): by recharge_id, or by reference_number.
    A transaction that matches both is counted once (the OR join visits each row once). The GROUP
    BY follows the index the WHERE scans (provider_created_at, then rowid), so it needs no sort.
    `unseen`: covered by a complete sync (:covered, its start) that did not list it since.
    """
    return f"""
        SELECT r.local_id, r.provider_id, r.origin, r.status,
               COALESCE(r.payable_cents, r.amount_cents) AS payable_cents, COALESCE(r.currency, 'INR') AS currency,
               COALESCE(r.reference_number, r.idempotency_key, 'local:' || r.local_id) AS ref,
               COALESCE(r.submitted_at, r.provider_created_at) AS since,
               COALESCE(SUM(t.amount_cents < 0), 0) AS debit_n, COALESCE(-SUM(MIN(t.amount_cents, 0)), 0) AS debit,
               COALESCE(SUM(t.amount_cents > 0), 0) AS credit_n, COALESCE(SUM(MAX(t.amount_cents, 0)), 0) AS credit,
               MAX(CASE WHEN t.amount_cents < 0 AND t.currency != COALESCE(r.currency, 'INR') THEN t.currency END)
                   AS foreign_currency,
               CASE WHEN r.origin = 'partner' AND :covered IS NOT NULL
                    THEN NOT COALESCE((SELECT s.seen_at >= :covered FROM recharge_seen s
                                       WHERE s.provider_id = r.provider_id), 0)
                    ELSE 0 END AS unseen
        FROM recharges r
        LEFT JOIN transactions t ON t.recharge_id = r.provider_id OR t.reference_number = r.reference_number
        WHERE {where}
        GROUP BY r.provider_created_at, r.local_id"""


_ANY_RULE = " OR ".join(f"({rule.when})" for rule in RECHARGE_RULES)
# The day's recharges (by the provider's creation time, else when partnerkit submitted it) that
# break at least one rule.
_RECHARGE_DRIFTS = f"""CREATE TEMP TABLE m_rdrift AS
    SELECT * FROM ({_recharges('r.provider_created_at >= :start AND r.provider_created_at < :end')})
    WHERE {_ANY_RULE}
    UNION ALL
    SELECT * FROM ({_recharges('r.provider_created_at IS NULL AND r.submitted_at >= :start AND r.submitted_at < :end')})
    WHERE {_ANY_RULE}"""

# A transaction x of order o whose named debit n is in another currency (a conversion) and whose type
# is a conversion's: that conversion's charge.
_CHARGE = (f"(x.type IN {CONVERSION_TYPES} AND n.currency IS NOT NULL AND o.currency IS NOT NULL"
           " AND n.currency != o.currency)")
# An order's debits in all (the named ORDER debit and any other carrying its id, charges apart), what it
# owes the wallet net (its named debit, else its amount; nothing once FAILED or CANCELLED), and what a
# second debit took beyond that.
ORDER_DEBITS = "(o.extra_n + (o.named_id IS NOT NULL))"
ORDER_DEBITED = "(COALESCE(o.named_debit, 0) + o.extra_debit)"
ORDER_OWED = f"CASE WHEN o.status IN {ORDER_REFUNDED} THEN 0 ELSE COALESCE(o.named_debit, o.amount_cents) END"
ORDER_EXCESS = f"({ORDER_DEBITS} > 1) * MAX({ORDER_DEBITED} - {ORDER_OWED}, 0)"
# The most an order may be credited: a FAILED or CANCELLED one its debits, and its conversion charge
# if any (whether a charge comes back is not said, so a refund of both is no more unexpected than a
# refund of the debits alone); any other order what a second debit took.
ORDER_CREDITABLE = f"CASE WHEN o.status IN {ORDER_REFUNDED} THEN {ORDER_DEBITED} + o.charges ELSE {ORDER_EXCESS} END"

_ORDERS = (
    # The day's orders, with their stored vouchers.
    """CREATE TEMP TABLE m_order AS
        SELECT o.id, o.status, o.amount_cents, o.currency, o.quantity, o.delivered_quantity,
               CAST(o.transaction_id AS TEXT) AS tx_id,
               (SELECT COUNT(*) FROM vouchers v WHERE v.order_id = o.id) AS vouchers
        FROM orders o WHERE o.placed_at >= :start AND o.placed_at < :end""",
    # Per order: the named ORDER debit, any other debits and the credits linked by order_id. On a
    # converted order (the named debit in another currency than the order), a debit of a conversion
    # type is the conversion's charge ("conversion charges may be added per client configuration;
    # conversions are logged in the transaction history"): counted apart, never a second debit.
    f"""CREATE TEMP TABLE m_oagg AS
        SELECT o.id, o.status, o.amount_cents, o.currency, o.quantity, o.delivered_quantity, o.vouchers,
               o.tx_id, n.id AS named_id, -n.amount_cents AS named_debit, n.currency AS wallet_currency,
               (SELECT COUNT(*) FROM transactions x WHERE x.order_id = o.id AND x.amount_cents < 0
                   AND x.id IS NOT o.tx_id AND NOT {_CHARGE}) AS extra_n,
               (SELECT -COALESCE(SUM(x.amount_cents), 0) FROM transactions x WHERE x.order_id = o.id
                   AND x.amount_cents < 0 AND x.id IS NOT o.tx_id AND NOT {_CHARGE}) AS extra_debit,
               (SELECT -COALESCE(SUM(x.amount_cents), 0) FROM transactions x WHERE x.order_id = o.id
                   AND x.amount_cents < 0 AND x.id IS NOT o.tx_id AND {_CHARGE}) AS charges,
               (SELECT COALESCE(SUM(x.amount_cents), 0) FROM transactions x WHERE x.order_id = o.id
                   AND x.amount_cents > 0) AS credit
        FROM m_order o LEFT JOIN transactions n ON n.id = o.tx_id AND n.amount_cents < 0""",
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
    # More than one debit in all: one debit carrying the order_id when the named one is not found is
    # that order's missing_debit, not a duplicate. Judged on the net, as a recharge's (ORDER_OWED,
    # ORDER_EXCESS): a second debit refunded leaves the order matched.
    f"""INSERT INTO m_candidate
        SELECT 'duplicate_debit', 'order', CAST(o.id AS TEXT), COALESCE(o.named_debit, o.amount_cents),
               {ORDER_DEBITED} - CASE WHEN o.status IN {ORDER_REFUNDED} THEN 0 ELSE o.credit END,
               COALESCE(o.wallet_currency, o.currency),
               {ORDER_DEBITS} || ' debits for one order'
               || CASE WHEN o.credit > 0 THEN ', not all refunded' ELSE '' END
        FROM m_oagg o WHERE {ORDER_DEBITS} > 1 AND {ORDER_DEBITED} - o.credit > {ORDER_OWED}""",
    # FAILED and CANCELLED: refunded "for the debited amount", every debit carrying the order id
    # included (as a FAILED recharge's credit is held against all its debits).
    f"""INSERT INTO m_candidate
        SELECT 'missing_refund', 'order', CAST(o.id AS TEXT), o.named_debit + o.extra_debit, o.credit,
               COALESCE(o.wallet_currency, o.currency), o.status || ' order not refunded in full'
        FROM m_oagg o WHERE o.status IN {ORDER_REFUNDED} AND o.named_id IS NOT NULL
          AND o.credit < o.named_debit + o.extra_debit""",
    f"""INSERT INTO m_candidate
        SELECT 'unexpected_refund', 'order', CAST(o.id AS TEXT), {ORDER_CREDITABLE},
               o.credit, COALESCE(o.wallet_currency, o.currency), o.status || ' order credited'
               || CASE WHEN o.status NOT IN {ORDER_REFUNDED} AND {ORDER_DEBITS} > 1
                       THEN ' more than its second debit took' ELSE '' END
        FROM m_oagg o WHERE o.credit > 0 AND o.credit > {ORDER_CREDITABLE}""",
    # DELIVERED: every voucher stored. PARTIALLY_DELIVERED: the delivered ones (at least one).
    """INSERT INTO m_candidate
        SELECT 'voucher_shortfall', 'order', CAST(o.id AS TEXT),
               CASE WHEN o.status = 'DELIVERED' THEN o.quantity ELSE MAX(COALESCE(o.delivered_quantity, 1), 1) END,
               o.vouchers, o.currency, o.status || ' order with fewer stored vouchers than delivered'
        FROM m_oagg o
        WHERE (o.status = 'DELIVERED' AND o.vouchers < o.quantity)
           OR (o.status = 'PARTIALLY_DELIVERED' AND o.vouchers < MAX(COALESCE(o.delivered_quantity, 1), 1))""",
)


def _run(conn: sqlite3.Connection, statement: str, params: dict[str, Any]) -> sqlite3.Cursor:
    return conn.execute(statement, {k: v for k, v in params.items() if f":{k}" in statement})


def day_transactions(conn: sqlite3.Connection, params: dict[str, Any]) -> int:
    """How many transactions the day has (an index count)."""
    return _run(conn, "SELECT COUNT(*) FROM transactions WHERE created_at >= :start AND created_at < :end",
                params).fetchone()[0]


def covered_since(conn: sqlite3.Connection, day: str, end: str) -> str | None:
    """When the complete recharge sync that covers `day` started, if one started after the day ended."""
    row = conn.execute("SELECT synced_at FROM sync_coverage WHERE entity = 'recharges' AND day = ? AND synced_at >= ?",
                       (day, end)).fetchone()
    return row[0] if row else None


def build(conn: sqlite3.Connection, params: dict[str, Any]) -> None:
    """Fill `m_candidate` with the day's recharge and order drifts, inside the caller's transaction.

    The day's transactions (orphans, balance chain) are `partnerkit.store.matching_ledger`'s, which may
    run on another connection at the same time; their candidates join with `add_candidates`.
    """
    register_functions(conn)
    drop(conn)
    params = {**params, "covered": covered_since(conn, params["day"], params["end"])}
    conn.execute("CREATE TEMP TABLE m_candidate (kind TEXT, subject TEXT, reference TEXT, expected_cents INTEGER,"
                 " actual_cents INTEGER, currency TEXT, detail TEXT)")
    _run(conn, _RECHARGE_DRIFTS, params)
    for rule in RECHARGE_RULES:
        _run(conn, rule.insert(), params)
    for statement in _ORDERS:
        _run(conn, statement, params)


def add_candidates(conn: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    """Add drifts found elsewhere (m_candidate's columns) to the day's candidates."""
    conn.executemany("INSERT INTO m_candidate VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def drop(conn: sqlite3.Connection) -> None:
    """Remove the matcher's temp tables."""
    for name in TEMP_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS temp.{name}")


# The ids of the transactions linked to one subject, by the links the passes above use: when {subject} is
# 'recharge', those of the recharge whose reference_number is {reference} (by recharge_id, or carrying that
# reference_number); when it is 'order', those of the order whose id is {reference} (carrying its order_id,
# or named by its transaction_id). On any day, as the matcher links them (a refund comes days later).
# {subject} and {reference} are SQL expressions: a drift's columns (CLEARED_BY), or a command's parameters
# (partnerkit.store.ledger.list_transactions, behind `partnerkit transactions list --reference/--order`).
_LINKED = """SELECT x.id FROM recharges r JOIN transactions x ON x.recharge_id = r.provider_id
                   WHERE {subject} = 'recharge' AND r.reference_number = {reference}
                   UNION SELECT x.id FROM transactions x WHERE {subject} = 'recharge' AND x.reference_number = {reference}
                   UNION SELECT x.id FROM transactions x
                   WHERE {subject} = 'order' AND x.order_id = CAST({reference} AS INTEGER)
                   UNION SELECT CAST(o.transaction_id AS TEXT) FROM orders o
                   WHERE {subject} = 'order' AND o.id = CAST({reference} AS INTEGER)"""


def linked_transactions(subject: str, reference: str) -> str:
    """SQL selecting the ids of the transactions linked to a subject (see _LINKED); both are SQL expressions."""
    return _LINKED.format(subject=subject, reference=reference)


# The kinds whose `actual` is what the wallet shows of a recharge or an order: the sum of its linked transactions
# (below), which the report names (drift_transactions); for stuck_processing and unknown_to_provider the debit the
# provider holds for a recharge whose drift is not its money (partnerkit.store.drifts.WHOLE_AMOUNT_KINDS). The
# others' actual is no wallet figure: a voucher count, the provider's payable (unknown_to_partner); or their
# reference is the transaction itself (orphan_transaction, balance_discontinuity).
WALLET_ACTUAL_KINDS = ("missing_debit", "amount_mismatch", "duplicate_debit", "missing_refund", "unexpected_refund",
                       "stuck_processing", "unknown_to_provider")

# The wallet transactions behind each drift of WALLET_ACTUAL_KINDS: the debits and credits linked to its recharge
# or order (_LINKED), on any day, which make up its `actual`; finance quotes them to the provider. Only
# transactions the store holds: an order's transaction_id that names none is its missing_debit, not an id to
# quote. One statement over the drifts asked for ({where}, narrowed to those kinds by _WALLET_DRIFTS), each drift's
# links index lookups (no pass over `transactions`), oldest transaction first. The drifts are visited in the order
# of their references, so that those lookups walk each index in its order rather than all over it (`LIMIT -1`
# keeps SQLite from flattening the subquery into the join, which would drop its ORDER BY): for the 50,000 such
# drifts of bench.reconcile's 1M day, whose indexes are far larger than SQLite's page cache, 0.75-0.96 s before,
# 0.59-0.66 s after (best of 5). Not on the matcher's path: the report and `partnerkit drifts` read it.
_WALLET_DRIFTS = ("subject IN ('recharge', 'order') AND kind IN ("
                  + ", ".join(f"'{k}'" for k in WALLET_ACTUAL_KINDS) + ")")
_DRIFT_TRANSACTIONS = f"""
    SELECT d.id, t.id FROM (SELECT id, subject, reference FROM drifts {{where}} ORDER BY subject, reference LIMIT -1) d
    JOIN transactions t ON t.id IN ({linked_transactions("d.subject", "d.reference")})
    ORDER BY d.id, t.created_at, t.id"""


def drift_transactions(db: Any, *, kind: str | None = None, resolution: str | None = None,
                       report_date: str | None = None, ids: list[str] | None = None) -> dict[str, list[str]]:
    """The ids of the wallet transactions behind each drift the filters select (as
    partnerkit.store.drifts.iter_drifts selects them; _DRIFT_TRANSACTIONS), oldest first, by drift id; a drift
    with none, or of a kind whose actual is no wallet figure, is absent."""
    where, params = drift_filter(kind=kind, resolution=resolution, report_date=report_date, ids=ids)
    where = f"{where} AND {_WALLET_DRIFTS}" if where else f"WHERE {_WALLET_DRIFTS}"
    linked: dict[str, list[str]] = {}
    for drift, transaction in db.execute(_DRIFT_TRANSACTIONS.format(where=where), params):
        linked.setdefault(drift, []).append(transaction)
    return linked


# What cleared a drift that is no longer detected, where the store shows it (partnerkit.store.drifts.merge_found
# names it in the automatic resolution's note), by the links the passes above use (_LINKED): for a
# missing_refund or a duplicate_debit the credits, for a missing_debit the debits, linked to its recharge or
# order ("credit 700030 of 194.02 received"). Which of them are new since the run that last found it: every one
# when that run saw none (a missing_debit's `actual` is 0; a missing_refund's is the credits it saw), else those
# dated after that run. Dates alone missed a credit the provider made after the run but dated before it: its
# clock is not ours, and a credit back made at 00:50 is read by the sync after a 01:00 run. A stuck_processing
# recharge that settled says how ("recharge settled SUCCESS"), found by its reference as the rule keys it. NULL
# otherwise: the note then says only that it is gone. Index lookups per drift gone.
CLEARED_BY = f"""
    SELECT CASE WHEN d.kind = 'stuck_processing' THEN (
        SELECT 'recharge settled ' || r.status FROM recharges r
        WHERE (r.reference_number = d.reference OR r.idempotency_key = d.reference) AND r.status != 'PROCESSING'
        LIMIT 1)
    ELSE (
    SELECT group_concat(CASE WHEN t.amount_cents > 0 THEN 'credit ' ELSE 'debit ' END || t.id || ' of '
                        || printf('%d.%02d', abs(t.amount_cents) / 100, abs(t.amount_cents) % 100), ', ') || ' received'
    FROM transactions t
    WHERE t.id IN ({linked_transactions("d.subject", "d.reference")})
      AND (t.created_at > d.last_detected_at
           OR (d.kind IN ('missing_refund', 'missing_debit') AND d.actual_cents = 0))
      AND CASE WHEN d.kind = 'missing_debit' THEN t.amount_cents < 0 ELSE t.amount_cents > 0 END
      AND d.kind IN ('missing_refund', 'duplicate_debit', 'missing_debit')) END"""


def find(conn: sqlite3.Connection, *, day: str) -> None:
    """The day's drifts by id (`m_found`, for `found_summary` and the merge) and, of the stored ones the merge
    may touch (those found, the day's open ones), what this snapshot sees of each (`m_seen`: SEEN_COLUMNS).

    Part of the read: a drift whose row differs from `m_seen` at the merge was recorded or decided after the
    snapshot, and the merge leaves it as it is (partnerkit.store.drifts.merge_found, `seen`)."""
    conn.execute("CREATE TEMP TABLE m_found (id TEXT PRIMARY KEY, kind, subject, reference, expected_cents,"
                 " actual_cents, currency, detail)")
    # In id order (the first of a repeated id kept, as without it): the merge then writes the new drifts and their
    # audit rows in the order of the two indexes keyed by the drift id (the drifts' primary key, drift_audit_drift)
    # and of `m_state`, one walk through each instead of a page anywhere per drift. At 1M (100,100 drifts) the merge
    # took 1.6-2.5 CPU-seconds in candidate order and 1.2-1.4 in this one; the sort is within the noise of `find`.
    conn.execute("INSERT OR IGNORE INTO m_found SELECT drift_id(kind, subject, reference), * FROM m_candidate"
                 " ORDER BY 1, m_candidate.rowid")
    # Keyed by id where it is made: the merge looks each stored drift up in it (merge_found, `seen`).
    conn.execute(f"CREATE TEMP TABLE m_seen (id TEXT PRIMARY KEY, {', '.join(SEEN_COLUMNS[1:])}) WITHOUT ROWID")
    conn.execute(f"INSERT INTO m_seen {merge_scope(', '.join(SEEN_COLUMNS))}", {"day": day})


def apply_candidates(conn: sqlite3.Connection, *, day: str, now: str) -> dict[str, int]:
    """Merge the day's candidates (`m_found`, from `find`) into `drifts` (partnerkit.store.drifts.merge_found:
    stable ids, audit trail, automatic resolution of the day's open drifts not found again), leaving the
    drifts changed since the snapshot `find` read as they are."""
    return merge_found(conn, day=day, now=now, cleared_by=CLEARED_BY, seen="m_seen")


def _rows(cursor: sqlite3.Cursor) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r)) for r in cursor.fetchall()]


# Spend as the document means it ("FAILED and REVERSED recharges are credited back and are not spend";
# DESIGN.md: SUCCESS and PROCESSING are spend, a FAILED or CANCELLED order is refunded): what the day's
# SUCCESS and PROCESSING recharges and its orders that are neither FAILED nor CANCELLED took from the
# wallet, net of what was credited back to them, whenever dated, per the currency of the transaction.
# A recharge that broke no rule (not in m_rdrift) is net debited exactly its payable, in its own currency
# (one debit of payable, or a second debit and the credit that corrects it): so the day's pass over its
# recharges sums payables, and only the m_rdrift ones (a few percent) and the orders read transactions.
_SPEND_OF_DRIFTED = f"""
    SELECT COALESCE(t.currency, ''), -SUM(t.amount_cents) FROM m_rdrift d
    JOIN transactions t ON t.recharge_id = d.provider_id OR t.reference_number = d.ref
    WHERE d.status IN {SPEND} GROUP BY 1"""
_SPEND_OF_ORDERS = f"""
    SELECT COALESCE(t.currency, ''), -SUM(t.amount_cents) FROM m_oagg o
    JOIN transactions t ON t.id = o.tx_id OR t.order_id = o.id
    WHERE o.status NOT IN {ORDER_REFUNDED} GROUP BY 1"""


_DAY_RECHARGES = """
    SELECT status, {currency}, COUNT(*), SUM(COALESCE(payable_cents, amount_cents))
    FROM recharges
    WHERE (provider_created_at >= :start AND provider_created_at < :end)
       OR (provider_created_at IS NULL AND submitted_at >= :start AND submitted_at < :end)
    GROUP BY {keys} ORDER BY {keys}"""


def _day_recharges(conn: sqlite3.Connection, params: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """The day's recharges by status, and the spend of those that broke no rule per currency.

    One pass, grouped by status alone and counting the recharges in another currency than INR (the
    default): a second key would sort the day's rows, a third more time. Only a day whose spend
    statuses hold another currency is read again, grouped by currency as well.
    """
    rows = _run(conn, _DAY_RECHARGES.format(currency="SUM(currency != 'INR')", keys="1"), params).fetchall()
    if any(others and status in SPEND_STATUSES for status, others, _, _ in rows):
        rows = _run(conn, _DAY_RECHARGES.format(currency="COALESCE(currency, 'INR')", keys="1, 2"), params).fetchall()
    else:
        rows = [(status, "INR", n, payable) for status, _, n, payable in rows]
    by_status: dict[str, int] = {}
    spend: dict[str, int] = {}
    for status, currency, n, payable in rows:
        by_status[status] = by_status.get(status, 0) + n
        if status in SPEND_STATUSES:
            spend[currency] = spend.get(currency, 0) + (payable or 0)
    for currency, payable in conn.execute(f"SELECT currency, SUM(payable_cents) FROM m_rdrift WHERE status IN {SPEND}"
                                          " GROUP BY 1"):
        spend[currency] = spend.get(currency, 0) - (payable or 0)
    return by_status, spend


def day_summary(conn: sqlite3.Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Totals of the day's recharges and orders (call after `build`, before `drop`).

    They read the store and `build`'s tables, never the drifts found (`found_summary`), so the matcher runs them
    while the wallet's side is still at work on a day big enough for it to have its own connection."""
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    recharge_status, spend = _day_recharges(conn, params)
    for currency, cents in (*conn.execute(_SPEND_OF_DRIFTED), *conn.execute(_SPEND_OF_ORDERS)):
        spend[currency] = spend.get(currency, 0) + cents
    return {
        "recharge_status": recharge_status,
        "spend_cents": dict(sorted(spend.items())),
        "orders_total": one("SELECT COUNT(*) FROM m_order"),
        "order_status": dict(conn.execute("SELECT status, COUNT(*) FROM m_order GROUP BY 1 ORDER BY 1").fetchall()),
        "conversions": _rows(conn.execute(
            """SELECT id AS order_id, currency AS order_currency, amount_cents AS order_amount_cents,
                      wallet_currency, named_debit AS debited_cents, charges AS charges_cents,
                      named_id AS transaction_id
               FROM m_oagg WHERE named_id IS NOT NULL AND wallet_currency IS NOT NULL AND currency IS NOT NULL
                 AND wallet_currency != currency ORDER BY id""")),
    }


def found_summary(conn: sqlite3.Connection) -> dict[str, Any]:
    """What the report says of the day's drifts (call after `find`, before `drop`): the recharges and orders
    that drifted, the orphans, and every drift id."""
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "drifted": one("SELECT COUNT(*) FROM (SELECT DISTINCT subject, reference FROM m_found"
                       " WHERE subject IN ('recharge', 'order'))"),
        "unmatched": one("SELECT COUNT(*) FROM m_found WHERE kind = 'orphan_transaction'"),
        "detected_ids": [r[0] for r in conn.execute("SELECT id FROM m_found ORDER BY id").fetchall()],
    }


def days_with_late_entries(db: Any, first: str, last: str, *, since: str) -> list[str]:
    """Days in [since, first) whose recharges or orders have a wallet transaction dated in [first, last].

    A credit or a second debit that arrives days after its recharge or order is linked to it, so it is
    never an orphan, and only the rules of the subject's own day can judge it (an unexpected_refund for
    a SUCCESS recharge, a duplicate_debit): that day must be matched again. Days are the matcher's:
    the provider's creation time, else partnerkit's own submit time, and an order's placed_at.
    """
    rows = db.execute(
        """SELECT day FROM (
               SELECT substr(COALESCE(r.provider_created_at, r.submitted_at), 1, 10) AS day
               FROM transactions t JOIN recharges r ON r.provider_id = t.recharge_id
               WHERE t.created_at >= :start AND t.created_at < :end AND t.recharge_id IS NOT NULL
               UNION
               SELECT substr(COALESCE(r.provider_created_at, r.submitted_at), 1, 10)
               FROM transactions t JOIN recharges r ON r.reference_number = t.reference_number
               WHERE t.created_at >= :start AND t.created_at < :end AND t.reference_number IS NOT NULL
               UNION
               SELECT substr(o.placed_at, 1, 10)
               FROM transactions t JOIN orders o ON o.id = t.order_id
               WHERE t.created_at >= :start AND t.created_at < :end AND t.order_id IS NOT NULL)
           WHERE day >= :since AND day < :first ORDER BY day""",
        {"start": first, "end": _day_after(last), "since": since, "first": first}).fetchall()
    return [r[0] for r in rows]


def _day_after(day: str) -> str:
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()
