"""How a provider's recharge record becomes a stored row: its statuses, fields and columns.

`provider_fields` reads the document's recharge fields from a client record or a raw dict;
`normalise_status` maps a provider status to a stored one; `_write` (a row partnerkit has) and
`_insert` (one it has not) store a read. The three lists that name a provider column (`_AS_SENT`,
`_provider_values`, `_MERGE`) are checked against each other at import (`check_provider_columns`).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Sequence

from partnerkit.errors import StorageError
from partnerkit.money import DecimalEncoder, cents, to_decimal
from partnerkit.timeutil import iso, parse_ts

FINAL = frozenset({"SUCCESS", "FAILED", "REVERSED"})
# Recharge, "States and transitions": legacy stored values that mean SUCCESS (and that the status filter
# SUCCESS also matches). The one definition: the client's records read it from here (the client builds on
# the store; the store never imports the client). The sandbox keeps its own copy: it imports no partnerkit.
LEGACY_SUCCESS = frozenset({"DELIVERED", "RECHARGED"})
# A recharge with no answer known (recorded before its submit, or its answer lost): it may or may not exist
# at the provider, and only a read settles it, never a second submit.
OPEN_INTENT = ("INTENT", "UNKNOWN")
# The same as a condition on `status`, for the statements that look for such rows (the values are ours).
OPEN_INTENT_SQL = f"status IN ({', '.join(repr(s) for s in OPEN_INTENT)})"
UNREADABLE = "recharge record unreadable:"  # the prefix of a quarantine reason kept in last_error
# The prefix of the other: a record whose id names a stored recharge it is not (`_upsert.another_recharge`: a
# provider that gave an id twice, or a `--fixed-ids` sandbox started again beside a kept database).
ID_GIVEN_TWICE = "recharge id given twice:"
# The prefix of the one note kept in last_error for good: a later replay of the row's Idempotency-Key
# made the recharge (its first send never arrived). Provider reads clear last_error; not this.
PERFORMED_BY_REPLAY = "performed by a later replay:"
# The client_reference partnerkit generates for each submit (reconcile.recharges.new_client_reference): this
# prefix and OWN_REFERENCE_DIGITS lowercase hex digits (docs/worker.md, "Submit"). The provider echoes it on
# every read, so a recharge that carries one was submitted by partnerkit (partnerkit.store.matching matches it
# as a GLOB built from these: OWN_CLIENT_REFERENCE).
OWN_REFERENCE_PREFIX = "pk-"
OWN_REFERENCE_DIGITS = 20


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


def _cents(value: Decimal | None) -> int | None:
    return None if value is None else cents(value)


# The indexed columns a provider read can change. SQLite rewrites an index entry for every indexed
# column an UPDATE assigns, changed or not: assigning all of them cost 61 us per update against
# 18 us for the ones that changed (a day's sync updates tens of thousands), so `_write` assigns an
# indexed column only when its value changes. `_ROW` is what it needs to know of the stored row.
# next_poll_at has had no index since m0013 (the poller reads by status); it stays in this list because
# it is assigned the same way, only when a read settles the recharge. `_ROW` carries as well the row's
# mobile number and face, which with its reference, client_reference and creation time tell whether a
# record naming its provider id is its recharge (`_upsert.another_recharge`), read in the same statement.
_INDEXED = ("provider_id", "reference_number", "client_reference", "status", "next_poll_at", "provider_created_at")
_ROW = "local_id, updated_at, mobile_number, face_cents, " + ", ".join(_INDEXED)


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
                           merge: Mapping[str, str] | None = None, indexed: Sequence[str] = _INDEXED) -> list[str]:
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
    problems += [f"recharges: _INDEXED names {name!r} but _new_indexed gives it no value, so a recharge partnerkit did "
                 "not submit would be stored without it; add it there (and to _write's `indexed`)"
                 for name in indexed if name not in _new_indexed(_Reads(as_sent), "SUCCESS")]
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


def _new_indexed(f: Any, status: str) -> dict:
    """The `_INDEXED` columns of a recharge first stored from a provider read (`_insert`; `_write` keeps or replaces
    a stored row's); `check_provider_columns` refuses an `_INDEXED` name given no value here."""
    return {"provider_id": f["id"], "reference_number": f["reference_number"], "client_reference": f["client_reference"],
            "status": status, "next_poll_at": None, "provider_created_at": iso(f["created_at"])}


def _insert(conn: sqlite3.Connection, f: dict, status: str, legacy: str | None, seen_at: datetime) -> int:
    """A provider read partnerkit has no row for (origin 'provider'): one INSERT with every column."""
    values = _provider_values(f, status, legacy, iso(seen_at), None)
    values["currency"] = values["currency"] or "INR"
    columns = {"origin": "provider", "mobile_number": f["mobile_number"] or "", "amount_cents": _cents(f["face"]),
               **_new_indexed(f, status), **values}
    cursor = conn.execute(f"INSERT INTO recharges ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                          tuple(columns.values()))
    return int(cursor.lastrowid)


if _problems := check_provider_columns():
    raise RuntimeError("\n".join(_problems))
