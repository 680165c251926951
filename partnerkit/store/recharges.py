"""Recharges in SQLite: the intent before a submit, the provider's copy after, polling state.

Rows come from two places: `record_intent` (partnerkit is about to submit; origin 'partner') and
`upsert_from_provider` (a read of the provider's list or detail; origin 'provider' when partnerkit
never submitted it). Provider records may be the client's dataclasses or plain dicts (raw JSON);
both are read through `provider_fields`. Money is stored as integer paise, times as ISO 8601 UTC.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Iterable, Sequence

from partnerkit.errors import StorageError
from partnerkit.money import DecimalEncoder, cents, to_decimal
from partnerkit.store import quarantine
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso, parse_ts

FINAL = frozenset({"SUCCESS", "FAILED", "REVERSED"})
# States and transitions: legacy stored values that the status filter SUCCESS also matches.
LEGACY_SUCCESS = frozenset({"DELIVERED", "RECHARGED"})
OPEN_INTENT = ("INTENT", "UNKNOWN")
UNREADABLE = "recharge record unreadable:"  # the prefix of a quarantine reason kept in last_error
# The prefix of the one note kept in last_error for good: a later replay of the row's Idempotency-Key
# made the recharge (its first send never arrived). Provider reads clear last_error; not this.
PERFORMED_BY_REPLAY = "performed by a later replay:"


@dataclass
class UpsertResult:
    """What one batch of provider records changed."""

    inserted: int = 0
    updated: int = 0
    settled: list[int] = field(default_factory=list)  # local ids that became final in this batch
    linked: list[int] = field(default_factory=list)  # INTENT/UNKNOWN rows matched by client_reference
    seen_provider_ids: set[int] = field(default_factory=set)
    rejected: list[tuple[int | None, str]] = field(default_factory=list)  # (provider id, reason): quarantined


def _get(record: Any, name: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name, None)


def _money(value: Any, name: str) -> Decimal | None:
    return None if value is None else to_decimal(value, field=name)


def _time(value: Any, name: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return parse_ts(value, field=name)


def normalise_status(status: str | None) -> tuple[str, str | None]:
    """Map a provider status to a stored one; legacy DELIVERED/RECHARGED become SUCCESS (kept aside)."""
    value = (status or "").upper()
    if value in LEGACY_SUCCESS:
        return "SUCCESS", value
    if value in FINAL or value == "PROCESSING":
        return value, None
    raise StorageError(f"recharge status {status!r} is not one the document describes")


# The document's recharge fields stored as the provider sent them (money and times are parsed).
# Adding a provider field to the stored recharge (docs/internals.md, "Extending"): a migration adding its
# column, its name here, its column in `_provider_values` and how an update merges it in `_MERGE`;
# `check_provider_columns` refuses, at import, a field named in one of these and missing from another.
_AS_SENT = ("reference_number", "status", "sub_status", "mobile_number", "operator_id", "operator", "currency",
            "vendor_recharge_id", "operator_txn_id", "failure_reason", "client_reference")
# The fields of _AS_SENT stored through the indexed columns (`_write`, `_insert`), not `_provider_values`.
_AS_SENT_INDEXED = frozenset({"reference_number", "status", "mobile_number", "client_reference"})


def provider_fields(record: Any) -> dict[str, Any]:
    """The document's recharge fields of a client record (read from its `.raw` payload) or a raw dict."""
    # The source is chosen once, not per field: a sync reads a million records, and `_get`'s Mapping
    # check on each of 18 fields was a fifth of the worker's upsert (bench/reconcile).
    raw = _get(record, "raw")
    if isinstance(raw, Mapping):
        get = raw.get  # the payload as received: omitted optional fields are simply absent
    elif isinstance(record, Mapping):
        raw, get = dict(record), record.get
    else:
        def get(name: str) -> Any:
            return getattr(record, name, None)
    recharge_id = get("id")
    return {
        "id": None if recharge_id is None else int(recharge_id),
        **{name: get(name) for name in _AS_SENT},
        **{name: _money(get(name), name) for name in ("face", "discount", "payable")},
        **{name: _time(get(name), name) for name in ("created_at", "updated_at")},
        "raw": raw,
    }


def _rows(cursor: sqlite3.Cursor) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _cents(value: Decimal | None) -> int | None:
    return None if value is None else cents(value)


# ---- submit side -------------------------------------------------------------------------------

def record_intent(db: Database, *, idempotency_key: str, mobile_number: str, operator_id: int, amount: Decimal,
                  client_reference: str, submitted_at: datetime, circle_id: int | None = None,
                  is_postpaid: bool | None = None, is_special: bool | None = None, nickname: str | None = None,
                  force: bool = False) -> int:
    """Commit an INTENT row before the submit is sent; return its local id."""
    with transaction(db) as conn:
        cursor = conn.execute(
            """INSERT INTO recharges (idempotency_key, origin, mobile_number, operator_id, amount_cents,
                   client_reference, circle_id, is_postpaid, is_special, nickname, force, status,
                   submitted_at, row_updated_at)
               VALUES (?, 'partner', ?, ?, ?, ?, ?, ?, ?, ?, ?, 'INTENT', ?, ?)""",
            (idempotency_key, mobile_number, operator_id, cents(to_decimal(amount)), client_reference, circle_id,
             None if is_postpaid is None else int(is_postpaid), None if is_special is None else int(is_special),
             nickname, int(force), iso(submitted_at), iso(submitted_at)),
        )
        return int(cursor.lastrowid)


def record_response(db: Database, local_id: int, recharge: Any, *, status: str, seen_at: datetime,
                    http_status: int | None = None) -> dict:
    """Link a local row to the provider's recharge and store its fields; return the row."""
    fields = provider_fields(recharge)
    stored, legacy = normalise_status(status)
    with transaction(db) as conn:
        other = conn.execute("SELECT local_id FROM recharges WHERE provider_id = ? AND local_id != ?",
                             (fields["id"], local_id)).fetchone()
        if other is not None:
            raise StorageError(f"provider recharge {fields['id']} is already linked to local recharge {other[0]}")
        rows = _rows(conn.execute(f"SELECT {_ROW} FROM recharges WHERE local_id = ?", (local_id,)))
        if rows:
            _write(conn, rows[0], fields, stored, legacy, seen_at, http_status=http_status)
    return get(db, local_id) or {}


def mark_unknown(db: Database, local_id: int, error: str, at: datetime) -> None:
    """The submit's outcome is ambiguous (timeout, 500): the row waits for locate."""
    with transaction(db) as conn:
        conn.execute("UPDATE recharges SET status = 'UNKNOWN', last_error = ?, row_updated_at = ? "
                     "WHERE local_id = ? AND status IN ('INTENT', 'UNKNOWN')", (error, iso(at), local_id))


def discard_refused(db: Database, local_id: int) -> None:
    """Remove an intent the provider definitely refused (4xx, 503): no recharge exists for it."""
    with transaction(db) as conn:
        conn.execute("DELETE FROM recharges WHERE local_id = ? AND status IN ('INTENT', 'UNKNOWN')", (local_id,))


def note_error(db: Database, local_id: int, error: str, at: datetime) -> None:
    """Keep the last error seen while working on a row (locate attempts)."""
    with transaction(db) as conn:
        conn.execute("UPDATE recharges SET last_error = ?, row_updated_at = ? WHERE local_id = ?",
                     (error, iso(at), local_id))


def note_performed_by_replay(db: Database, local_id: int, how: str, at: datetime) -> None:
    """Keep on the row, for good, that a later replay of its key made the recharge (`recharges show`)."""
    with transaction(db) as conn:
        conn.execute("UPDATE recharges SET last_error = ?, row_updated_at = ? WHERE local_id = ?",
                     (f"{PERFORMED_BY_REPLAY} {how}", iso(at), local_id))


# ---- provider reads ----------------------------------------------------------------------------

# The indexed columns a provider read can change. SQLite rewrites an index entry for every indexed
# column an UPDATE assigns, changed or not: assigning all of them cost 61 us per update against
# 18 us for the ones that changed (a day's sync updates tens of thousands), so `_write` assigns an
# indexed column only when its value changes. `_ROW` is what it needs to know of the stored row.
_INDEXED = ("provider_id", "reference_number", "client_reference", "status", "next_poll_at", "provider_created_at")
_ROW = "local_id, updated_at, " + ", ".join(_INDEXED)


def _provider_values(f: dict, status: str, legacy: str | None, seen_at: str, http_status: int | None) -> dict:
    """The non-indexed columns a provider read sets, by name (how an update merges each: `_MERGE`)."""
    return {"sub_status": legacy or f["sub_status"], "operator_id": f["operator_id"], "operator": f["operator"],
            "face_cents": _cents(f["face"]), "discount_cents": _cents(f["discount"]),
            "payable_cents": _cents(f["payable"]), "currency": f["currency"], "failure_reason": f["failure_reason"],
            "operator_txn_id": f["operator_txn_id"], "vendor_recharge_id": f["vendor_recharge_id"],
            "http_status": http_status, "updated_at": iso(f["updated_at"]),
            "settled_at": seen_at if status in FINAL else None, "row_updated_at": seen_at,
            "raw": json.dumps(f["raw"], cls=DecimalEncoder, sort_keys=True) if f["raw"] is not None else None}


# How an update merges each of those into the stored row: absent optional fields keep the stored
# value, the operator id and currency once known stay, a final status keeps its first settled_at.
_MERGE = {
    "sub_status": ":sub_status", "operator_id": "COALESCE(operator_id, :operator_id)",
    "operator": "COALESCE(:operator, operator)", "face_cents": "COALESCE(:face_cents, face_cents)",
    "discount_cents": "COALESCE(:discount_cents, discount_cents)",
    "payable_cents": "COALESCE(:payable_cents, payable_cents)", "currency": "COALESCE(:currency, currency, 'INR')",
    "failure_reason": ":failure_reason", "operator_txn_id": ":operator_txn_id",
    "vendor_recharge_id": ":vendor_recharge_id", "http_status": "COALESCE(:http_status, http_status)",
    "updated_at": "COALESCE(:updated_at, updated_at)",
    "settled_at": "CASE WHEN :settled_at IS NULL THEN NULL ELSE COALESCE(settled_at, :settled_at) END",
    "last_error": f"CASE WHEN last_error LIKE '{PERFORMED_BY_REPLAY}%' THEN last_error END",
    "row_updated_at": ":row_updated_at", "raw": ":raw",
}


class _Reads(dict):
    """A provider_fields dict of Nones that notes which fields are read from it."""

    def __init__(self, as_sent: Sequence[str]) -> None:
        super().__init__(dict.fromkeys(("id", *as_sent, "face", "discount", "payable", "created_at", "updated_at",
                                        "raw")))
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return super().__getitem__(name)


def check_provider_columns(as_sent: Sequence[str] = _AS_SENT, values: Any = None,
                           merge: Mapping[str, str] | None = None) -> list[str]:
    """What keeps a provider read's columns from being stored alike on every row, one line each (none: agreed).

    `_insert` stores every column `_provider_values` names, but `_write` (every recharge partnerkit submitted,
    and any row stored before) only those `_MERGE` names: a column missing there would be stored only for
    recharges someone else submitted. A field of `_AS_SENT` that no column stores would be read and dropped."""
    values = _provider_values if values is None else values
    merge = _MERGE if merge is None else merge
    probe = _Reads(as_sent)
    columns = values(probe, "SUCCESS", None, "1970-01-01T00:00:00Z", None)
    problems = [f"recharges: _provider_values sets {name!r} but _MERGE has no entry for it, so it would be stored "
                f"only on recharges partnerkit did not submit; add to _MERGE \"{name}\": \"COALESCE(:{name}, {name})\" "
                f"(an absent field keeps the stored value) or \":{name}\" (the read replaces it)"
                for name in columns if name not in merge]
    for name, how in merge.items():
        problems += [f"recharges: _MERGE entry {name!r} uses :{param} but _provider_values sets no {param!r}"
                     for param in re.findall(r"(?<![:\w]):(\w+)", how) if param not in columns]
    problems += [f"recharges: _AS_SENT reads {name!r} but _provider_values stores it in no column; add its column "
                 f"there and to _MERGE" for name in as_sent if name not in probe.read and name not in _AS_SENT_INDEXED]
    return problems


def _write(conn: sqlite3.Connection, row: dict, f: dict, status: str, legacy: str | None, seen_at: datetime,
           *, http_status: int | None = None) -> None:
    """Store a provider read on the stored row `row` (its `_ROW` columns): a PROCESSING one keeps its
    poll schedule, an absent reference or creation time keeps the stored one, and the stored
    client_reference wins; the other columns merge as `_MERGE` says."""
    created = iso(f["created_at"])
    indexed = {"provider_id": f["id"],
               "reference_number": row["reference_number"] if f["reference_number"] is None else f["reference_number"],
               "client_reference": f["client_reference"] if row["client_reference"] is None else row["client_reference"],
               "status": status,
               "next_poll_at": row["next_poll_at"] if status == "PROCESSING" else None,
               "provider_created_at": row["provider_created_at"] if created is None else created}
    changed = {name: value for name, value in indexed.items() if value != row[name]}
    assignments = [f"{name} = :{name}" for name in changed] + [f"{name} = {how}" for name, how in _MERGE.items()]
    conn.execute(f"UPDATE recharges SET {', '.join(assignments)} WHERE local_id = :local_id",
                 {**_provider_values(f, status, legacy, iso(seen_at), http_status), **changed,
                  "local_id": row["local_id"]})


def _insert(conn: sqlite3.Connection, f: dict, status: str, legacy: str | None, seen_at: datetime) -> int:
    """A provider read partnerkit has no row for (origin 'provider'): one INSERT with every column."""
    values = _provider_values(f, status, legacy, iso(seen_at), None)
    values["currency"] = values["currency"] or "INR"
    columns = {"origin": "provider", "mobile_number": f["mobile_number"] or "", "amount_cents": _cents(f["face"]),
               "provider_id": f["id"], "reference_number": f["reference_number"], "status": status,
               "client_reference": f["client_reference"], "provider_created_at": iso(f["created_at"]), **values}
    cursor = conn.execute(f"INSERT INTO recharges ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                          tuple(columns.values()))
    return int(cursor.lastrowid)


if _problems := check_provider_columns():
    raise RuntimeError("\n".join(_problems))


def upsert_from_provider(db: Database, recharges: Iterable[Any], seen_at: datetime, *,
                         insert_unknown: bool = True) -> UpsertResult:
    """Store provider reads idempotently; a final status never moves back to PROCESSING.

    A record that cannot be stored (a status the document does not describe, money or times that
    do not parse) is quarantined with the reason (partnerkit.store.quarantine) and noted on its
    local row, in the same transaction; the other records of the batch are stored as usual.
    """
    result = UpsertResult()
    records, bad = [], []
    for record in recharges:
        try:
            f = provider_fields(record)
            if f["id"] is None:
                raise StorageError("recharge record without an id")
            f["_status"] = normalise_status(f["status"])
            records.append(f)
        except (StorageError, ValueError, TypeError) as exc:
            raw = _get(record, "raw")
            bad.append((_raw_id(raw if isinstance(raw, Mapping) else record), f"{UNREADABLE} {exc}",
                        raw if isinstance(raw, Mapping) else record))
    if not records and not bad:
        return result
    with transaction(db) as conn:
        if bad:
            _reject(conn, bad, seen_at, result)
        known = _by_provider_id(conn, [f["id"] for f in records])
        for f in records:
            result.seen_provider_ids.add(f["id"])
            status, legacy = f.pop("_status")
            row = known.get(f["id"]) or _match_open_intent(conn, f)
            if row is None:
                if insert_unknown:
                    _insert(conn, f, status, legacy, seen_at)
                    result.inserted += 1
                continue
            if row["provider_id"] is None:
                result.linked.append(row["local_id"])
            if row["status"] in FINAL and status == "PROCESSING":
                continue  # stale read: final states are final (States and transitions: Recharge)
            unchanged = (row["status"] == status and row["updated_at"] == iso(f["updated_at"])
                         and row["provider_id"] == f["id"])
            if unchanged:
                continue
            _write(conn, row, f, status, legacy, seen_at)
            result.updated += 1
            if status in FINAL and row["status"] not in FINAL:
                result.settled.append(row["local_id"])
        if records:
            ids = [f["id"] for f in records]
            if quarantine.release_in(conn, "recharge", ids):  # read correctly now
                for start in range(0, len(ids), 500):
                    chunk = ids[start:start + 500]
                    conn.execute(f"UPDATE recharges SET last_error = NULL WHERE last_error LIKE '{UNREADABLE}%'"
                                 f" AND provider_id IN ({','.join('?' * len(chunk))})", chunk)
    return result


def _raw_id(raw: Any) -> int | None:
    value = raw.get("id") if isinstance(raw, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _reject(conn: sqlite3.Connection, bad: list[tuple[int | None, str, Any]], seen_at: datetime,
            result: UpsertResult) -> None:
    """Quarantine unreadable records and note the reason on their local rows (inside a transaction)."""
    quarantine.hold_in(conn, "recharge", [(reason, raw if isinstance(raw, Mapping) else repr(raw))
                                          for _, reason, raw in bad], now=seen_at)
    for provider_id, reason, _ in bad:
        result.rejected.append((provider_id, reason))
        if provider_id is not None:
            result.seen_provider_ids.add(provider_id)  # the provider has it: absence would be wrong
            note_unreadable(conn, provider_id, reason, seen_at)


def reject(db: Database, bad: Iterable[tuple[int | None, str, Any]], seen_at: datetime) -> UpsertResult:
    """Quarantine (provider id or None, reason, raw record) triples the client could not read."""
    result = UpsertResult()
    bad = list(bad)
    if bad:
        with transaction(db) as conn:
            _reject(conn, bad, seen_at, result)
    return result


def note_unreadable(conn: sqlite3.Connection, provider_id: int, reason: str, at: datetime) -> None:
    """Keep why the provider's copy of a known recharge could not be read (shown by `recharges show`),
    unless the row holds the note that a later replay made it (kept for good; the quarantine has the reason)."""
    conn.execute("UPDATE recharges SET last_error = ?, row_updated_at = ? WHERE provider_id = ? AND "
                 f"(last_error IS NULL OR last_error NOT LIKE '{PERFORMED_BY_REPLAY}%')",
                 (reason[:500], iso(at), provider_id))


def _by_provider_id(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, dict]:
    found: dict[int, dict] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        cursor = conn.execute(
            f"SELECT {_ROW} FROM recharges WHERE provider_id IN "
            f"({','.join('?' * len(chunk))})", chunk)
        found.update({row["provider_id"]: row for row in _rows(cursor)})
    return found


def _match_open_intent(conn: sqlite3.Connection, f: dict) -> dict | None:
    """An INTENT/UNKNOWN row this provider record answers: same reference, or same client_reference and number."""
    if f["reference_number"]:
        rows = _rows(conn.execute(f"SELECT {_ROW} FROM recharges WHERE reference_number = ?",
                                  (f["reference_number"],)))
        if rows:
            return rows[0]
    if not f["client_reference"]:
        return None
    rows = _rows(conn.execute(
        f"SELECT {_ROW} FROM recharges WHERE client_reference = ? "
        "AND mobile_number = ? AND provider_id IS NULL AND status IN ('INTENT', 'UNKNOWN')",
        (f["client_reference"], f["mobile_number"])))
    return rows[0] if len(rows) == 1 else None


# ---- reads for the poller, locate and the CLI ---------------------------------------------------

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
    return get(db, int(text)) if numeric else None


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
    sql = "SELECT * FROM recharges WHERE mobile_number = ? AND status IN ('INTENT', 'UNKNOWN')"
    params: list[Any] = [mobile_number]
    if amount is not None:
        sql += " AND amount_cents = ?"
        params.append(cents(amount))
    if client_reference:
        sql += " AND client_reference = ?"
        params.append(client_reference)
    return _rows(db.execute(sql + " ORDER BY local_id DESC", params))


def poll_candidates(db: Database) -> list[dict]:
    """PROCESSING rows the poller reads: the provider id is known.

    `since` is where a row's age counts from (reconcile.polling): our own submit time when partnerkit
    sent it, else the provider's created_at."""
    return _rows(db.execute(
        "SELECT local_id, provider_id, reference_number, COALESCE(submitted_at, provider_created_at) AS since, "
        "last_polled_at, escalated_at, payable_cents, currency FROM recharges "
        "WHERE status = 'PROCESSING' AND provider_id IS NOT NULL"))


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
