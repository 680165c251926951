"""Drifts: what reconciliation found, with finance's resolutions and an append-only audit trail.

A drift id is derived from (kind, subject, reference), so the same problem found again on a
later run is the same row and keeps the resolution finance gave it, as long as its figures are
the same: a drift found again with other figures (a third debit) is a new fact, and goes back to
`pending` whoever resolved or escalated it. Figures that only restate it (a figure shown where none
was, or nothing left at stake: `is_news`) are refreshed and keep its resolution. Every change of
resolution, and every change of a drift's figures, appends a row to `drift_audit`; nothing is
overwritten without a trace.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, fields
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterator

from partnerkit.errors import PartnerKitError
from partnerkit.money import cents, fmt, from_cents, to_decimal
from partnerkit.store.db import Database, run_in_transaction, transaction
from partnerkit.timeutil import iso

# A new drift kind (docs/internals.md, "Extending"): its name here (and in COUNT_KINDS when its figures
# are counts), a migration rebuilding `drifts` with it in the CHECK on `kind` (REBUILD = True), the rule
# that finds it (partnerkit/store/matching.py) and its row in docs/reconcile.md's table.
KINDS = (
    "missing_debit", "amount_mismatch", "duplicate_debit", "missing_refund", "unexpected_refund",
    "orphan_transaction", "stuck_processing", "unknown_to_provider", "unknown_to_partner",
    "voucher_shortfall", "balance_discontinuity",
)
SUBJECTS = ("recharge", "order", "transaction", "wallet")
RESOLUTIONS = ("pending", "resolved", "escalated")
COUNT_KINDS = ("voucher_shortfall",)  # expected/actual are voucher counts, not money
# Kinds about a recharge's state, not its money: expected is what the recharge costs, actual what the wallet shows
# of it (its debit, less any credit back), beside the drift rather than against it. A debit of payable does not
# settle a recharge the provider does not list, nor one stuck PROCESSING: the whole amount is in question.
WHOLE_AMOUNT_KINDS = ("stuck_processing", "unknown_to_provider")
# Of those, the kinds whose actual changing is no new fact: a stuck recharge's debit landing, or its second debit
# or credit (each of those is its own drift: duplicate_debit, unexpected_refund). A debit appearing for a recharge
# the provider does not list is the very question finance asked support, so unknown_to_provider is not here.
CONTEXT_ACTUAL_KINDS = ("stuck_processing",)


def at_stake(kind: str, expected: int | None, actual: int | None) -> int:
    """What a drift puts at stake, in its stored unit (cents, or vouchers): |expected - actual|, a missing figure
    counting as 0; for WHOLE_AMOUNT_KINDS the larger of the two (the money in question, whatever the wallet shows).
    The report sums it over the open drifts (reconcile.report.AtStake, which inlines it)."""
    if kind in WHOLE_AMOUNT_KINDS:
        return max(expected or 0, actual or 0)
    return abs((expected or 0) - (actual or 0))


def is_news(kind: str, old_expected: int | None, expected: int | None, old_actual: int | None,
            actual: int | None, old_currency: str | None, currency: str | None) -> bool:
    """Whether a drift found again with other figures than stored (or, came back, another detail) is a new fact
    finance has not decided on (pending again), rather than a restatement that keeps its resolution (audit
    `restated`).

    A restatement: each figure that changed was unknown before (NULL: a release that shows a figure it did not,
    as stuck_processing's and unknown_to_provider's actual; the poller's stuck_processing, which the match then
    measures), or is a CONTEXT_ACTUAL_KINDS actual; or the new figures leave nothing at stake (a FAILED
    recharge's missing_debit, now stated at its net zero, or a SUCCESS one the provider reversed). Another
    currency is always news, and so is a detail alone (only judged for a drift that came back: figure_change)."""
    if old_currency != currency:
        return True
    if at_stake(kind, expected, actual) == 0:
        return False
    changed = [(name, old) for name, old, new in (("expected", old_expected, expected), ("actual", old_actual, actual))
               if old != new]
    if not changed:
        return True  # its detail alone, after an automatic resolution
    return any(old is not None and not (name == "actual" and kind in CONTEXT_ACTUAL_KINDS) for name, old in changed)


def measure_sql(column: str = "kind") -> str:
    """The SQL expression giving a drift's measure ('count' for COUNT_KINDS, else 'money') from its kind."""
    return f"CASE WHEN {column} IN ({', '.join(repr(kind) for kind in COUNT_KINDS)}) THEN 'count' ELSE 'money' END"
SYSTEM_ACTOR = "partnerkit"

COLUMNS = ("id", "kind", "subject", "reference", "report_date", "expected_cents", "actual_cents", "measure",
           "currency", "detail", "detected_at", "last_detected_at", "resolution", "resolution_note",
           "resolution_by", "resolution_at")


class UnknownDrift(PartnerKitError):
    """No drift has this id."""


@dataclass(frozen=True)
class Drift:
    """One drift as stored; expected/actual are Decimal money or int counts (see `measure`)."""

    id: str
    kind: str
    subject: str
    reference: str
    report_date: str
    expected: Decimal | int | None
    actual: Decimal | int | None
    measure: str
    currency: str | None
    detail: str | None
    detected_at: str
    last_detected_at: str
    resolution: str
    resolution_note: str | None
    resolution_by: str | None
    resolution_at: str | None


def wallet_reference(currency: str, entry: str) -> str:
    """The reference of a wallet's `balance_discontinuity` drift (`wallet INR after 700005`): the provider's
    balance differs from the ledger's when it was read, no entry explains it, and the ledger's balance then is
    that after transaction `entry` (reconcile.matcher.wallet_drifts). The money moved after that entry without
    one: the same drift on every re-run, and on every night the difference stands while the wallet has no new
    entry (it then belongs to the day whose run found it last), however many snapshots show it."""
    return f"wallet {currency} after {entry}"


def drift_id(kind: str, subject: str, reference: str) -> str:
    """The stable id of a drift: "d_" + the first 16 hex digits of sha256(kind|subject|reference)."""
    return "d_" + hashlib.sha256(f"{kind}|{subject}|{reference}".encode()).hexdigest()[:16]


def _figure(value: int | None, measure: str) -> str:
    if value is None:
        return "none"
    return str(value) if measure == "count" else str(fmt(from_cents(value)))


def figure_change(was: str, measure: str, old_expected: int | None, expected: int | None, old_actual: int | None,
                  actual: int | None, old_currency: str | None, currency: str | None, old_detail: str | None,
                  detail: str | None, came_back: bool | int = False) -> str | None:
    """The audit note of a drift found again with other figures ("actual 388.04 -> 582.06: 3 debits for one
    recharge", after "reopened (was resolved): " when it was not pending), or None when its figures are the same.

    The figures are expected, actual and currency. A detail alone that reads differently is a new fact
    only for a drift that `came_back` after partnerkit resolved it (a third debit after the credit of
    the second: the net, and so the figures, can be the same). On a drift that stayed, it is refreshed
    in place and reopens nothing: a release that words a detail better must not put every drift finance
    resolved back in front of them. A detail is compared only when both are known (the poller records
    stuck_processing without one)."""
    parts = [f"{name} {_figure(old, measure)} -> {_figure(new, measure)}"
             for name, old, new in (("expected", old_expected, expected), ("actual", old_actual, actual))
             if old != new]
    if old_currency != currency:
        parts.append(f"currency {old_currency or 'none'} -> {currency or 'none'}")
    detail_changed = bool(came_back) and old_detail is not None and detail is not None and old_detail != detail
    if not parts and not detail_changed:
        return None
    current = detail if detail is not None else old_detail
    change = ", ".join(parts) + (f": {current}" if current else "") if parts else f"{old_detail} -> {detail}"
    return change if was == "pending" else f"reopened (was {was}): {change}"


def register_functions(conn: sqlite3.Connection) -> None:
    """Make `drift_id(kind, subject, reference)`, `figure_change(...)` and `is_news(...)` callable from SQL
    (set-based matching uses them)."""
    conn.create_function("drift_id", 3, drift_id, deterministic=True)
    conn.create_function("figure_change", 11, figure_change, deterministic=True)
    conn.create_function("is_news", 7, is_news, deterministic=True)


def figure(row_value: int | None, measure: str) -> Decimal | int | None:
    """A stored figure (expected_cents, actual_cents: integer hundredths, or a count) as a Drift holds it:
    Decimal money with two decimals, or an int count (`measure`)."""
    if row_value is None:
        return None
    # Decimal(cents).scaleb(-2) is from_cents exactly (two decimals), at a third of the cost.
    return row_value if measure == "count" else Decimal(row_value).scaleb(-2)


_FIELDS = tuple(f.name for f in fields(Drift))


def _from_row(row: tuple) -> Drift:
    (ident, kind, subject, reference, report_date, expected, actual, measure, currency, detail, detected_at,
     last_detected_at, resolution, note, by, at) = row
    drift = object.__new__(Drift)
    # A day can hold 100k drifts: fill the frozen dataclass's fields at once rather than through its
    # __init__ (one object.__setattr__ per field), as pickle does; the values are those __init__ would set.
    drift.__dict__.update(zip(_FIELDS, (ident, kind, subject, reference, report_date, figure(expected, measure),
                                        figure(actual, measure), measure, currency, detail, detected_at,
                                        last_detected_at, resolution, note, by, at)))
    return drift


def _stored(value: Any, measure: str) -> int | None:
    if value is None:
        return None
    if measure == "count":
        return int(value)
    return cents(to_decimal(value, field="drift amount"))


def _subject_day(conn: sqlite3.Connection, subject: str, reference: str, fallback: str) -> str:
    """The UTC day a drift belongs to: its recharge's creation day when known, else `fallback`."""
    if subject != "recharge":
        return fallback
    try:
        row = conn.execute(
            "SELECT substr(COALESCE(provider_created_at, submitted_at), 1, 10) FROM recharges"
            " WHERE reference_number = ? OR idempotency_key = ? LIMIT 1", (reference, reference)).fetchone()
    except sqlite3.OperationalError:  # the recharges table is another owner's; tolerate its absence
        return fallback
    return row[0] if row and row[0] else fallback


_UPSERT = """
INSERT INTO drifts (id, kind, subject, reference, report_date, expected_cents, actual_cents, measure,
                    currency, detail, detected_at, last_detected_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(id) DO UPDATE SET
    expected_cents = COALESCE(excluded.expected_cents, drifts.expected_cents),
    actual_cents = COALESCE(excluded.actual_cents, drifts.actual_cents),
    currency = excluded.currency, detail = COALESCE(excluded.detail, drifts.detail),
    last_detected_at = excluded.last_detected_at
"""

# A drift partnerkit resolved automatically that is detected again with the same figures (or restated ones:
# is_news) gets back the state it had before, read from the audit trail (the drifts row only holds the
# auto-resolve). Partnerkit's own rows (auto_resolved, the reopened ones that restored a state, and restated,
# which keep one) are skipped; the last other row is the state the drift was in: `detected` or `changed`
# (pending, no note), or finance's escalation with its note, by and at.
AUTO_RESOLVED = ("(SELECT a.action FROM drift_audit a WHERE a.drift_id = {id}"
                 " ORDER BY a.seq DESC LIMIT 1) = 'auto_resolved'")
_FINANCE_STATE = "p.action NOT IN ('detected', 'changed') AND p.resolution IN ('pending', 'escalated')"
RESTORED_STATE = f"""
SELECT r.id,
       CASE WHEN p.resolution IN ('pending', 'escalated') THEN p.resolution ELSE 'pending' END AS resolution,
       CASE WHEN {_FINANCE_STATE} THEN p.note END AS note,
       CASE WHEN {_FINANCE_STATE} THEN p.by END AS by,
       CASE WHEN {_FINANCE_STATE} THEN p.at END AS at
FROM {{source}} r
LEFT JOIN drift_audit p ON p.seq = (
    SELECT MAX(a.seq) FROM drift_audit a
    WHERE a.drift_id = r.id AND NOT (a.by = :actor AND a.action IN ('auto_resolved', 'reopened', 'restated')))"""
# Of a drift found again: whether it is new, the figure change (figure_change's note, NULL when none), whether
# that change is news (is_news; else a restatement, which keeps the resolution and reads without "reopened") and
# whether partnerkit resolved it automatically (its state is restored when its figures did not change, or were
# only restated).
_CHANGED = ("NOT is_new AND (old_expected IS NOT expected OR old_actual IS NOT actual OR old_currency IS NOT currency"
            " OR (auto AND old_detail IS NOT detail))")
_STATE = f"""
INSERT INTO m_state
SELECT id, is_new, reopens, auto,
       CASE WHEN changed THEN figure_change(CASE WHEN news THEN was ELSE 'pending' END, measure, old_expected, expected,
                                            old_actual, actual, old_currency, currency, old_detail, detail, auto)
       END AS change,
       news
FROM (SELECT *, CASE WHEN changed THEN is_news(kind, old_expected, expected, old_actual, actual, old_currency, currency)
                     ELSE 0 END AS news
      FROM (SELECT *, {_CHANGED} AS changed FROM (
      SELECT f.id, f.kind, d.id IS NULL AS is_new, d.resolution != 'pending' AS reopens, d.resolution AS was, d.measure,
             d.expected_cents AS old_expected, f.expected_cents AS expected, d.actual_cents AS old_actual,
             f.actual_cents AS actual, d.currency AS old_currency, f.currency, d.detail AS old_detail, f.detail,
             COALESCE(d.resolution = 'resolved' AND d.resolution_by = :actor
                      AND {AUTO_RESOLVED.format(id='d.id')}, 0) AS auto
      FROM m_found f LEFT JOIN drifts d USING (id) WHERE f.id NOT IN (SELECT id FROM m_moved))))"""
# The merge's temp tables, each keyed by the drift id: the merge's UPDATEs read a drift's row of one of them in a
# subquery per drift they change (`WHERE r.id = drifts.id`), which without a key read the whole table each time
# (the square of the drifts changed: 4.8 s for the 10,010 of bench.reconcile's 100k day, under the write lock).
_MERGE_TABLES = ("m_moved (id TEXT PRIMARY KEY)",
                 "m_state (id TEXT PRIMARY KEY, is_new, reopens, auto, change, news)",
                 "m_restore (id TEXT PRIMARY KEY, resolution, note, by, at)", "m_gone (id TEXT PRIMARY KEY, note)")
_MERGE_TEMP = tuple(table.split()[0] for table in _MERGE_TABLES)
# What a merge compares to tell a drift recorded or decided since its candidates' snapshot (merge_found, `seen`):
# the poller's open_drift moves last_detected_at and the figures, finance's resolution the resolution columns.
SEEN_COLUMNS = ("id", "report_date", "expected_cents", "actual_cents", "currency", "detail", "last_detected_at",
                "resolution", "resolution_note", "resolution_by", "resolution_at")


def merge_scope(columns: str) -> str:
    """SQL selecting `columns` of the stored drifts a merge of day :day may touch: those in `m_found`, and the
    day's open ones (two index lookups: the primary key, `drifts_day`)."""
    return (f"SELECT {columns} FROM drifts WHERE id IN (SELECT id FROM m_found)"
            f" UNION SELECT {columns} FROM drifts WHERE report_date = :day AND resolution IN ('pending', 'escalated')")


def merge_found(conn: sqlite3.Connection, *, day: str, now: str, cleared_by: str | None = None,
                seen: str | None = None) -> dict[str, int]:
    """Merge a day's drifts (temp table `m_found`: id, kind, subject, reference, expected_cents, actual_cents,
    currency, detail) into `drifts`, set-based; resolve the day's open drifts not found again.

    A drift of the day no longer found is resolved automatically (audit `auto_resolved`; the note names the
    credit or debit that cleared it, or how a recharge settled, when `cleared_by` shows one (its whole phrase): a scalar subquery over the gone drift `d`,
    which the matcher owns with its links, partnerkit.store.matching.CLEARED_BY). A new drift is pending
    (audit `detected`). One found again with the same figures keeps its resolution
    and adds nothing, unless partnerkit resolved it automatically: then it gets back its state from before
    (audit `reopened`). One found again with other figures (expected, actual or currency; or another
    detail after an automatic resolution: see figure_change) is pending again, whoever resolved or escalated it
    (audit `changed`, with the old and new figures), unless they only restate it (is_news): then it keeps its
    resolution, or gets back its state from before an automatic resolution (audit `restated`, with the figures).

    `seen`: a temp table of SEEN_COLUMNS keyed by id, the drifts of `merge_scope` as the read that found `m_found`
    saw them, when that read ended before this transaction began (reconcile.matcher.match_day). A drift whose row differs
    now, or that it did not see, was recorded or decided since (the poller's stuck_processing, finance's
    resolution, another run of the day): the older candidates neither resolve nor update it; the next run
    judges it (counted as `newer`).
    """
    p = {"day": day, "now": now, "actor": SYSTEM_ACTOR}
    register_functions(conn)
    for name in _MERGE_TEMP:
        conn.execute(f"DROP TABLE IF EXISTS temp.{name}")
    for table in _MERGE_TABLES:
        conn.execute(f"CREATE TEMP TABLE {table} WITHOUT ROWID")
    if seen is not None:
        # Each stored drift in scope is looked up in the snapshot by its id, which must be the snapshot's key
        # (matching.find makes it so): without one, SQLite made no index of its own for this join and read the
        # whole snapshot for each drift, so a day matched again cost the square of its drifts (a re-match of
        # bench.reconcile's 100k day, 10,010 drifts: 25 s in this statement, under the write lock).
        differs = " OR ".join(f"n.{c} IS NOT s.{c}" for c in SEEN_COLUMNS[1:])
        conn.execute(f"INSERT INTO m_moved SELECT n.id FROM ({merge_scope(', '.join(SEEN_COLUMNS))}) n"
                     f" LEFT JOIN {seen} s ON s.id = n.id WHERE s.id IS NULL OR {differs}", p)
    conn.execute(_STATE, p)
    conn.execute("INSERT INTO m_restore"
                 + RESTORED_STATE.format(source="(SELECT id FROM m_state WHERE auto AND (change IS NULL OR NOT news))"),
                 p)
    # The day's open drifts not found again, taken before the merge (which touches only found ones):
    # on a first run the day has none yet, and either way the day's drifts are read once, not twice.
    cleared = f"COALESCE(': ' || ({cleared_by}), '')" if cleared_by else "''"
    conn.execute("INSERT INTO m_gone SELECT d.id, 'no longer detected on ' || :day || ' run'"
                 f" || {cleared} AS note"
                 " FROM drifts d WHERE d.report_date = :day AND d.resolution != 'resolved'"
                 " AND NOT EXISTS (SELECT 1 FROM m_found f WHERE f.id = d.id)"
                 " AND d.id NOT IN (SELECT id FROM m_moved)", p)
    conn.execute(
        f"""INSERT INTO drifts (id, kind, subject, reference, report_date, expected_cents, actual_cents, measure,
                               currency, detail, detected_at, last_detected_at)
           SELECT id, kind, subject, reference, :day, expected_cents, actual_cents,
                  {measure_sql()}, currency, detail, :now, :now
           FROM m_found WHERE id NOT IN (SELECT id FROM m_moved)
           ON CONFLICT(id) DO UPDATE SET
               report_date = excluded.report_date, expected_cents = excluded.expected_cents,
               actual_cents = excluded.actual_cents, currency = excluded.currency, detail = excluded.detail,
               last_detected_at = excluded.last_detected_at""", p)
    conn.execute(
        """UPDATE drifts SET (resolution, resolution_note, resolution_by, resolution_at) =
               (SELECT r.resolution, r.note, r.by, r.at FROM m_restore r WHERE r.id = drifts.id)
           WHERE id IN (SELECT id FROM m_restore)""")
    # Other figures: a new fact finance has not seen, so pending again, the drifts row saying why. Restated ones
    # (is_news) keep the resolution: their audit row says what changed.
    conn.execute(
        """UPDATE drifts SET (resolution, resolution_note, resolution_by, resolution_at) =
               (SELECT 'pending', s.change, :actor, :now FROM m_state s WHERE s.id = drifts.id)
           WHERE id IN (SELECT id FROM m_state WHERE change IS NOT NULL AND reopens AND news)""", p)
    new = conn.execute(
        """INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)
           SELECT f.id, 'detected', 'pending', f.detail, :actor, :now FROM m_found f JOIN m_state s USING (id)
           WHERE s.is_new""", p).rowcount
    reopened = conn.execute(
        """INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)
           SELECT id, 'reopened', resolution, 'detected again on ' || :day || ' run'
                  || CASE WHEN resolution = 'escalated' THEN '; escalation restored' ELSE '' END, :actor, :now
           FROM m_restore""", p).rowcount
    changed = conn.execute(
        """INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)
           SELECT id, 'changed', 'pending', change, :actor, :now FROM m_state WHERE change IS NOT NULL AND news""",
        p).rowcount
    restated = conn.execute(
        """INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)
           SELECT s.id, 'restated', d.resolution, s.change, :actor, :now
           FROM m_state s JOIN drifts d ON d.id = s.id WHERE s.change IS NOT NULL AND NOT s.news""", p).rowcount
    conn.execute("INSERT INTO drift_audit (drift_id, action, resolution, note, by, at)"
                 " SELECT id, 'auto_resolved', 'resolved', note, :actor, :now FROM m_gone", p)
    resolved = conn.execute(
        "UPDATE drifts SET (resolution, resolution_note, resolution_by, resolution_at) ="
        " (SELECT 'resolved', g.note, :actor, :now FROM m_gone g WHERE g.id = drifts.id)"
        " WHERE id IN (SELECT id FROM m_gone)", p).rowcount
    newer = conn.execute("SELECT COUNT(*) FROM m_moved").fetchone()[0]
    for name in _MERGE_TEMP:
        conn.execute(f"DROP TABLE temp.{name}")
    return {"new": new, "reopened": reopened, "changed": changed, "restated": restated, "auto_resolved": resolved,
            "newer": newer}


def open_drift(db: Database, *, kind: str, subject: str, reference: str, expected: Any, actual: Any,
               currency: str | None, detected_at: datetime | str, day: str | None = None,
               detail: str | None = None) -> str:
    """Record (or re-detect) a drift; return its stable id. Safe inside or outside a transaction.

    Found again, it follows merge_found's rules (one drift at a time: the poller's stuck_processing). A figure
    given as None is one the caller does not measure (the poller's stuck_processing has no actual: the match
    measures it), so the stored one stays.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown drift kind {kind!r}")
    if subject not in SUBJECTS:
        raise ValueError(f"unknown drift subject {subject!r}")
    at = detected_at if isinstance(detected_at, str) else iso(detected_at)
    measure = "count" if kind in COUNT_KINDS else "money"
    ident = drift_id(kind, subject, str(reference))
    new_expected, new_actual = _stored(expected, measure), _stored(actual, measure)

    def write(conn: sqlite3.Connection) -> None:
        report_date = day or _subject_day(conn, subject, str(reference), at[:10])
        before = conn.execute(
            "SELECT resolution, measure, expected_cents, actual_cents, currency, detail,"
            f" resolution = 'resolved' AND {AUTO_RESOLVED.format(id='d.id')} FROM drifts d WHERE d.id = ?",
            (ident,)).fetchone()
        conn.execute(_UPSERT, (ident, kind, subject, str(reference), report_date, new_expected, new_actual, measure,
                               currency, detail, at, at))
        if before is None:
            _audit(conn, ident, "detected", "pending", detail, SYSTEM_ACTOR, at)
            return
        was, old_measure, old_expected, old_actual, old_currency, old_detail, auto = before
        expected_now = old_expected if new_expected is None else new_expected
        actual_now = old_actual if new_actual is None else new_actual
        news = is_news(kind, old_expected, expected_now, old_actual, actual_now, old_currency, currency)
        change = figure_change(was if news else "pending", old_measure, old_expected, expected_now, old_actual,
                               actual_now, old_currency, currency, old_detail, detail, auto)
        if change is not None and news:
            if was != "pending":
                conn.execute("UPDATE drifts SET resolution = 'pending', resolution_note = ?, resolution_by = ?,"
                             " resolution_at = ? WHERE id = ?", (change, SYSTEM_ACTOR, at, ident))
            _audit(conn, ident, "changed", "pending", change, SYSTEM_ACTOR, at)
            return
        if auto:
            _, resolution, note, by, when = conn.execute(
                RESTORED_STATE.format(source="(SELECT :id AS id)"), {"id": ident, "actor": SYSTEM_ACTOR}).fetchone()
            conn.execute("UPDATE drifts SET resolution = ?, resolution_note = ?, resolution_by = ?, resolution_at = ?"
                         " WHERE id = ?", (resolution, note, by, when, ident))
            _audit(conn, ident, "reopened", resolution, "detected again"
                   + ("; escalation restored" if resolution == "escalated" else ""), SYSTEM_ACTOR, at)
            was = resolution
        if change is not None:
            _audit(conn, ident, "restated", was, change, SYSTEM_ACTOR, at)

    run_in_transaction(db, write)
    return ident


def _audit(conn: sqlite3.Connection, ident: str, action: str, resolution: str, note: str | None,
           by: str, at: str) -> None:
    conn.execute("INSERT INTO drift_audit (drift_id, action, resolution, note, by, at) VALUES (?, ?, ?, ?, ?, ?)",
                 (ident, action, resolution, note, by, at))


def get_drift(db: Database, ident: str) -> Drift:
    """One drift by id; UnknownDrift if there is none."""
    row = db.execute(f"SELECT {', '.join(COLUMNS)} FROM drifts WHERE id = ?", (ident,)).fetchone()
    if row is None:
        raise UnknownDrift(f"no drift with id {ident!r} (see `partnerkit drifts list`)")
    return _from_row(row)


def list_drifts(db: Database, *, kind: str | None = None, resolution: str | None = None,
                report_date: str | None = None, ids: list[str] | None = None) -> list[Drift]:
    """Drifts, newest day first, filtered by kind, resolution, report day and/or ids."""
    return list(iter_drifts(db, kind=kind, resolution=resolution, report_date=report_date, ids=ids))


def drift_filter(*, kind: str | None = None, resolution: str | None = None, report_date: str | None = None,
                 ids: list[str] | None = None) -> tuple[str, list[str]]:
    """The WHERE clause over `drifts` (empty when nothing is asked) and its parameters that select the drifts
    of a kind, resolution, report day and/or ids: iter_drifts's, and partnerkit.store.matching.drift_transactions's
    for the same drifts."""
    where, params = [], []
    for column, value in (("kind", kind), ("resolution", resolution), ("report_date", report_date)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if ids is not None:
        where.append(f"id IN ({', '.join('?' * len(ids))})" if ids else "0")
        params.extend(ids)
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


def iter_drifts(db: Database, *, kind: str | None = None, resolution: str | None = None,
                report_date: str | None = None, ids: list[str] | None = None) -> Iterator[Drift]:
    """Like list_drifts, one at a time (a day of 100k drifts is never held twice)."""
    return map(_from_row, iter_drift_rows(db, kind=kind, resolution=resolution, report_date=report_date, ids=ids))


def iter_drift_rows(db: Database, *, kind: str | None = None, resolution: str | None = None,
                    report_date: str | None = None, ids: list[str] | None = None) -> Iterator[tuple]:
    """The drifts iter_drifts yields, in its order, as stored: tuples of COLUMNS, expected and actual in cents
    (`figure` gives a Drift's value of one). For a reader that turns a whole day into text (the report: 100k
    drifts on a bad day), which would otherwise make a Drift and two Decimals of each row only to undo them."""
    clause, params = drift_filter(kind=kind, resolution=resolution, report_date=report_date, ids=ids)
    return db.execute(f"SELECT {', '.join(COLUMNS)} FROM drifts {clause}"
                      " ORDER BY report_date DESC, kind, reference", params)


def set_resolution(db: Database, ident: str, resolution: str, *, note: str, by: str,
                   at: datetime | str) -> Drift:
    """Resolve or escalate a drift by hand; the change is appended to the audit trail."""
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}")
    when = at if isinstance(at, str) else iso(at)
    with transaction(db) as conn:
        if conn.execute("SELECT 1 FROM drifts WHERE id = ?", (ident,)).fetchone() is None:
            raise UnknownDrift(f"no drift with id {ident!r} (see `partnerkit drifts list`)")
        conn.execute("UPDATE drifts SET resolution = ?, resolution_note = ?, resolution_by = ?, resolution_at = ?"
                     " WHERE id = ?", (resolution, note, by, when, ident))
        _audit(conn, ident, resolution if resolution != "pending" else "reopened", resolution, note, by, when)
    return get_drift(db, ident)


def audit_trail(db: Database, ident: str) -> list[dict]:
    """Every recorded change of one drift, oldest first."""
    rows = db.execute("SELECT seq, drift_id, action, resolution, note, by, at FROM drift_audit"
                      " WHERE drift_id = ? ORDER BY seq", (ident,)).fetchall()
    return [dict(zip(("seq", "drift_id", "action", "resolution", "note", "by", "at"), r)) for r in rows]


def open_days(db: Database, *, since: str, before: str) -> list[str]:
    """Report days in [since, before) that still have pending or escalated drifts (two ranges of
    `drifts_open`: the days' resolved drifts are not read)."""
    rows = db.execute("SELECT DISTINCT report_date FROM drifts WHERE resolution IN ('pending', 'escalated')"
                      " AND report_date >= ? AND report_date < ? ORDER BY 1", (since, before)).fetchall()
    return [r[0] for r in rows]


def count_open(db: Database) -> dict[str, int]:
    """How many drifts are pending and escalated, every day (a count of `drifts_open`'s entries, never a row)."""
    found = dict(db.execute("SELECT resolution, COUNT(*) FROM drifts WHERE resolution IN ('pending', 'escalated')"
                            " GROUP BY resolution").fetchall())
    return {resolution: found.get(resolution, 0) for resolution in ("pending", "escalated")}
