"""Provider reads stored idempotently: the sync's and the poller's batches of the provider's recharges.

`upsert_from_provider` links each record to its row (by provider id, else the open intent it
answers), inserts the ones partnerkit never submitted, and quarantines the ones it cannot read
(`reject`) and those whose id names a stored recharge they are not (`another_recharge`), all in one
transaction per batch. The sync also asks which of a page's recharges it
already holds in that state (`known_recharge_states`: those are not mapped again), and notes every
recharge its list showed (`mark_recharges_seen`: what `unknown_to_provider` trusts).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Sequence

from partnerkit.errors import StorageError
from partnerkit.money import cents
from partnerkit.store import quarantine
from partnerkit.store.db import Database, run_in_transaction, transaction
from partnerkit.store.recharges._provider import (
    FINAL, ID_GIVEN_TWICE, OPEN_INTENT_SQL, PERFORMED_BY_REPLAY, UNREADABLE, _ROW, _get, _insert, _write,
    normalise_status, provider_fields,
)
from partnerkit.store.recharges._queries import _rows
from partnerkit.timeutil import iso, same_second


@dataclass
class UpsertResult:
    """What one batch of provider records changed."""

    inserted: int = 0
    updated: int = 0
    settled: list[int] = field(default_factory=list)  # local ids that became final in this batch
    linked: list[int] = field(default_factory=list)  # INTENT/UNKNOWN rows matched by client_reference
    seen_provider_ids: set[int] = field(default_factory=set)
    rejected: list[tuple[int | None, str]] = field(default_factory=list)  # (provider id, reason): quarantined


def upsert_from_provider(db: Database, recharges: Iterable[Any], seen_at: datetime, *,
                         insert_unknown: bool = True) -> UpsertResult:
    """Store provider reads idempotently; a final status never moves back to PROCESSING.

    A record that cannot be stored (a status the document does not describe, money or times that
    do not parse) is quarantined with the reason (partnerkit.store.quarantine) and noted on its
    local row, in the same transaction; the other records of the batch are stored as usual. So is a
    record whose id names a stored recharge it is not (`another_recharge`): the row keeps what it
    holds, and the id is not noted as seen (the row's own recharge was not listed).
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
        clashes: list[tuple[int, str, Any]] = []
        for f in records:
            status, legacy = f.pop("_status")
            holder = known.get(f["id"])
            if holder is not None and (reason := another_recharge(holder, f)) is not None:
                clashes.append((f["id"], reason, f["raw"]))  # the row stays as it is
                continue
            result.seen_provider_ids.add(f["id"])
            row = holder or _match_open_intent(conn, f)
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
        if clashes:
            _reject(conn, clashes, seen_at, result, listed=False)
        if records:
            given_twice = {provider_id for provider_id, _, _ in clashes}
            _release(conn, [f["id"] for f in records if f["id"] not in given_twice])  # read correctly now
    return result


def another_recharge(row: dict, f: dict) -> str | None:
    """Why the provider's record `f` is not the recharge of `row`, the stored row holding its id (`_ROW`), as
    the record's quarantine reason; None when it is that recharge.

    The document has no word on an id given twice; an id is taken as a recharge's identity together with the
    facts of a recharge that never change (Recharge fields; "reference_number is the stable key for
    support"), each compared where both know it: the creation time (to the second: two endpoints may write
    it to different precisions), the mobile number, the face, the reference_number and the client_reference.
    The operator is not one: a display name, omitted when unset. A few comparisons of values in hand, for
    the records that reach the upsert (a sync's changed ones)."""
    found = []
    created, stored = f["created_at"], row["provider_created_at"]
    if created is not None and stored is not None and not same_second(stored, created):
        found.append("created_at")
    if f["mobile_number"] and row["mobile_number"] and f["mobile_number"] != row["mobile_number"]:
        found.append("mobile_number")
    if f["face"] is not None and row["face_cents"] is not None and cents(f["face"]) != row["face_cents"]:
        found.append("face")
    for name in ("reference_number", "client_reference"):
        if f[name] is not None and row[name] is not None and f[name] != row[name]:
            found.append(name)
    if not found:
        return None
    known = ", ".join(part for part in (row["reference_number"], stored and f"created {stored}") if part)
    return (f"{ID_GIVEN_TWICE} provider id {f['id']} names local recharge #{row['local_id']}"
            f"{f' ({known})' if known else ''}, this record differs: {', '.join(found)}")


# The reason `another_recharge` gives, as `given_twice` reads it back: the provider id, and the local row holding it.
_GIVEN_TWICE_REASON = re.compile(rf"{re.escape(ID_GIVEN_TWICE)} provider id (\d+) names local recharge #(\d+)\b")


def given_twice(db: Database) -> list[tuple[int, int]]:
    """(provider id, local id of the row holding it) of every record held in the quarantine now because it is
    another recharge than the row holding its id (`another_recharge`): `partnerkit status` names
    them. One range of the quarantine's primary key, its recharge entries (usually none), in its key order."""
    found = (_GIVEN_TWICE_REASON.match(entry["reason"] or "") for entry in quarantine.held(db, "recharge"))
    return [(int(m.group(1)), int(m.group(2))) for m in found if m is not None]


def _raw_id(raw: Any) -> int | None:
    value = raw.get("id") if isinstance(raw, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _reject(conn: sqlite3.Connection, bad: list[tuple[int | None, str, Any]], seen_at: datetime,
            result: UpsertResult, *, listed: bool = True) -> None:
    """Quarantine records that cannot be stored and note the reason on their local rows (inside a transaction).
    `listed`: the provider has the row's recharge under the id (an unreadable copy of it), so it counts as seen."""
    quarantine.hold_in(conn, "recharge", [(reason, raw if isinstance(raw, Mapping) else repr(raw))
                                          for _, reason, raw in bad], now=seen_at)
    for provider_id, reason, _ in bad:
        result.rejected.append((provider_id, reason))
        if provider_id is not None:
            if listed:
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
    """Keep why the provider's copy of a known recharge could not be stored (unreadable, or another recharge
    under its id: shown by `recharges show`), unless the row holds the note that a later replay made it (kept
    for good; the quarantine has the reason)."""
    conn.execute("UPDATE recharges SET last_error = ?, row_updated_at = ? WHERE provider_id = ? AND "
                 f"(last_error IS NULL OR last_error NOT LIKE '{PERFORMED_BY_REPLAY}%')",
                 (reason[:500], iso(at), provider_id))


def release_quarantined(db: Database, provider_ids: Iterable[int]) -> int:
    """The recharges of these provider ids were read correctly (a sync found them stored unchanged): forget
    their quarantined records and the reasons noted on their rows; how many were held."""
    ids = list(provider_ids)
    if not ids:
        return 0
    with transaction(db) as conn:
        return _release(conn, ids)


def _release(conn: sqlite3.Connection, ids: Sequence[int]) -> int:
    """`release_quarantined` inside the caller's transaction: one read of the quarantine when nothing is held."""
    released = quarantine.release_in(conn, "recharge", ids)
    if released:
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            conn.execute(f"UPDATE recharges SET last_error = NULL WHERE (last_error LIKE '{UNREADABLE}%' OR "
                         f"last_error LIKE '{ID_GIVEN_TWICE}%') AND provider_id IN ({','.join('?' * len(chunk))})",
                         chunk)
    return released


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
        f"AND mobile_number = ? AND provider_id IS NULL AND {OPEN_INTENT_SQL}",
        (f["client_reference"], f["mobile_number"])))
    return rows[0] if len(rows) == 1 else None


def mark_recharges_seen(db: Database, provider_ids: Iterable[int], seen_at: str) -> None:
    """Note that a sync found these recharges in the provider's list at `seen_at`."""
    # One statement over a JSON array per page: no Python call per id (a day can list a million).
    ids = json.dumps(list(provider_ids))

    def work(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO recharge_seen (provider_id, seen_at) SELECT value, ? FROM json_each(?) WHERE true"
                     " ON CONFLICT(provider_id) DO UPDATE SET seen_at = excluded.seen_at", (seen_at, ids))
        return 0
    run_in_transaction(db, work)


def known_recharge_states(db: Database, provider_ids: list[int]) -> dict[int, tuple[str, str | None, str | None]]:
    """(status, updated_at, provider_created_at) of the stored recharges linked to these provider ids: one query
    per page. The creation time tells a record of another recharge under the same id (`another_recharge`) from
    the row's own, which a sync must not take for unchanged.

    A page of the provider's list usually holds consecutive ids: then one index range is read (extra
    ids in it are harmless to the caller's lookups), else the ids are joined one by one.
    """
    if not provider_ids:
        return {}
    low, high = min(provider_ids), max(provider_ids)
    if high - low < 2 * len(provider_ids):
        rows = db.execute("SELECT provider_id, status, updated_at, provider_created_at FROM recharges"
                          " WHERE provider_id BETWEEN ? AND ?", (low, high))
    else:
        rows = db.execute("SELECT r.provider_id, r.status, r.updated_at, r.provider_created_at FROM json_each(?) j"
                          " JOIN recharges r ON r.provider_id = j.value", (json.dumps(list(provider_ids)),))
    return {pid: (status, updated, created) for pid, status, updated, created in rows}
