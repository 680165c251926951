"""Reads for the poller, locate and the CLI, and the poller's marks on a row.

Rows by local id, provider id, reference or Idempotency-Key; listings; what the poller reads
(`poll_candidates`, `day_counts`) and what it notes (`mark_polled`, `mark_escalated`); where an
intent merged into the row that already held its recharge went (`merged_into`).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Iterable

from partnerkit.money import cents
from partnerkit.store import meta
from partnerkit.store.db import Database, transaction
from partnerkit.store.recharges._provider import OPEN_INTENT_SQL
from partnerkit.timeutil import iso, utcnow

# The meta key under which an intent merged into the row that already held its recharge is kept whole,
# with the row it went into, when and why (partnerkit.store.recharges._intents, `_merge`).
_MERGED = "recharges.merged.{local_id}"


def _rows(cursor: sqlite3.Cursor) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def get(db: Database, local_id: int) -> dict | None:
    """One row by local id."""
    rows = _rows(db.execute("SELECT * FROM recharges WHERE local_id = ?", (local_id,)))
    return rows[0] if rows else None


def find(db: Database, key: str) -> dict | None:
    """One row by provider id, reference_number or local id (in that order)."""
    text = str(key).strip()
    numeric = text.isascii() and text.isdigit() and int(text) <= 2**63 - 1  # "²" is a digit to isdigit
    if numeric:
        rows = _rows(db.execute("SELECT * FROM recharges WHERE provider_id = ?", (int(text),)))
        if rows:
            return rows[0]
    rows = _rows(db.execute("SELECT * FROM recharges WHERE reference_number = ?", (text,)))
    if rows:
        return rows[0]
    if not numeric:
        return None
    row = get(db, int(text))
    if row is None and (merged := merged_into(db, int(text))) is not None:
        row = get(db, merged["into"])  # the local id of an intent merged into the row that held its recharge
    return row


def merged_key(local_id: int) -> str:
    """The meta key of the record of intent `local_id` merged into another row."""
    return _MERGED.format(local_id=local_id)


def merged_into(db: Database, local_id: int) -> dict | None:
    """The record of intent `local_id` merged into the row that already held its recharge, or None:
    `into` (that row's local id), `provider_id`, `how` (what named it), `merged_at`, `holder_origin`, and
    `intent`, the removed row as it was. A row holding `local_id` now is a later one (SQLite gives a freed
    highest id again): ask only for an id no row has. Of two intents merged under one id, the later."""
    value = meta.get(db, merged_key(local_id))
    return None if value is None else json.loads(value)[-1]


def by_idempotency_key(db: Database, idempotency_key: str) -> dict | None:
    """The local recharge submitted under an Idempotency-Key, if any."""
    rows = _rows(db.execute("SELECT * FROM recharges WHERE idempotency_key = ?", (idempotency_key,)))
    return rows[0] if rows else None


def by_provider_id(db: Database, provider_id: int) -> dict | None:
    """The row linked to a provider recharge id, if any."""
    rows = _rows(db.execute("SELECT * FROM recharges WHERE provider_id = ?", (provider_id,)))
    return rows[0] if rows else None


def list_rows(db: Database, *, status: str | None = None, limit: int | None = None) -> list[dict]:
    """Rows newest first, optionally of one status.

    Newest by our own clock where there is one: a recharge partnerkit submitted by its `submitted_at`
    (an INTENT has nothing else), one someone else submitted by the provider's `created_at`; so a
    submit killed mid-send is not listed below older recharges because the provider's clock runs ahead."""
    sql = "SELECT * FROM recharges"
    params: list[Any] = []
    if status:
        sql += " WHERE status = ?"
        params.append(status.upper())
    sql += " ORDER BY COALESCE(submitted_at, provider_created_at) DESC, local_id DESC"
    if limit:
        sql += " LIMIT ?"
        params.append(limit)
    return _rows(db.execute(sql, params))


def count_status(db: Database, status: str) -> int:
    """How many recharges have `status` (one range of the status index)."""
    return db.execute("SELECT COUNT(*) FROM recharges WHERE status = ?", (status,)).fetchone()[0]


def open_intents(db: Database, *, mobile_number: str, amount: Decimal | None = None,
                 client_reference: str | None = None) -> list[dict]:
    """INTENT/UNKNOWN rows for a number (and amount / client_reference), newest first."""
    sql = f"SELECT * FROM recharges WHERE mobile_number = ? AND {OPEN_INTENT_SQL}"
    params: list[Any] = [mobile_number]
    if amount is not None:
        sql += " AND amount_cents = ?"
        params.append(cents(amount))
    if client_reference:
        sql += " AND client_reference = ?"
        params.append(client_reference)
    return _rows(db.execute(sql + " ORDER BY local_id DESC", params))


def poll_candidates(db: Database, *, now: datetime | None = None, horizon: datetime | None = None) -> list[dict]:
    """PROCESSING rows the poller reads: the provider id is known.

    `since` is where a row's age counts from (reconcile.polling): our own submit time when partnerkit
    sent it, else the provider's created_at. Both it and `last_polled_at` are past moments that decide
    when the row is due; one after `horizon` (the poller's `now` plus its longest interval and a margin:
    `PollSchedule.latest_s`) was written while this host's clock ran ahead, since put back, and would hold
    the row as long as the clock was off. Such a submit time gives way to the provider's created_at (on its
    own clock), else to `now`; such a last read to none (due at once)."""
    latest = None if horizon is None else iso(horizon)
    return _rows(db.execute(
        "SELECT local_id, provider_id, reference_number, "
        "CASE WHEN :latest IS NULL OR COALESCE(submitted_at, provider_created_at) <= :latest "
        "  THEN COALESCE(submitted_at, provider_created_at) "
        "  WHEN provider_created_at <= :latest THEN provider_created_at ELSE :now END AS since, "
        "CASE WHEN :latest IS NULL OR last_polled_at <= :latest THEN last_polled_at END AS last_polled_at, "
        "escalated_at, payable_cents, currency FROM recharges "
        "WHERE status = 'PROCESSING' AND provider_id IS NOT NULL",
        {"latest": latest, "now": iso(now or utcnow())}))


def day_counts(db: Database, from_day: date, to_day: date) -> dict[date, int]:
    """How many recharges partnerkit knows per provider creation day (UTC), to estimate list pages."""
    cursor = db.execute(
        "SELECT substr(provider_created_at, 1, 10) AS day, count(*) FROM recharges "
        "WHERE provider_created_at >= ? AND provider_created_at < ? GROUP BY day",
        (from_day.isoformat(), (to_day + timedelta(days=1)).isoformat()))
    return {date.fromisoformat(day): count for day, count in cursor.fetchall()}


def mark_polled(db: Database, polled: Iterable[tuple[int, datetime]], at: datetime) -> None:
    """Record that rows were read at `at`, with their next due time."""
    with transaction(db) as conn:
        conn.executemany("UPDATE recharges SET last_polled_at = ?, next_poll_at = "
                         "CASE WHEN status = 'PROCESSING' THEN ? END WHERE local_id = ?",
                         [(iso(at), iso(next_at), local_id) for local_id, next_at in polled])


def mark_escalated(db: Database, local_id: int, at: datetime) -> bool:
    """Flag a stuck PROCESSING row once; True if this call set the flag."""
    with transaction(db) as conn:
        cursor = conn.execute("UPDATE recharges SET escalated_at = ?, row_updated_at = ? "
                              "WHERE local_id = ? AND escalated_at IS NULL AND status = 'PROCESSING'",
                              (iso(at), iso(at), local_id))
        return cursor.rowcount == 1
