"""Open intents an operator closed by hand (`partnerkit recharges close`): checked with the provider, never made.

A closed intent keeps its row and its status (UNKNOWN, or INTENT whose submit died): nothing that reads recharge
statuses changes (the poller, the sync linking an open intent by client_reference, the matcher's rules, the report's
counts, `recharges list --status`). What closes it is a record in `meta` under `closed_key`
(partnerkit.store.closures: who, when, the note, what the provider showed), the way a merged intent is kept
(`merged_key`): `partnerkit status` and the submit hold leave out an intent that has one (`closure`), `recharges
locate` never sends its key again, and `recharges show` prints it. The record names the intent's Idempotency-Key and
client_reference, so a later row that gets the same local id (SQLite gives a freed highest id again, after a merge)
is never taken for the closed one.

If the provider lists the recharge later, the sync links it as any open intent (the money truth wins): the row
leaves INTENT/UNKNOWN, and the record stays, read as overtaken (`recharges show`).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from partnerkit.errors import StorageError
from partnerkit.money import fmt, from_cents
from partnerkit.store import closures
from partnerkit.store.db import Database, transaction
from partnerkit.store.recharges._provider import OPEN_INTENT
from partnerkit.store.recharges._queries import _rows

_CLOSED = "recharge_closed:{local_id}"


def closed_key(local_id: int) -> str:
    """The meta key of the closure of intent `local_id`."""
    return _CLOSED.format(local_id=local_id)


def closure(db: Database | sqlite3.Connection, row: dict) -> dict | None:
    """The closure of the recharge `row` (`by`, `at`, `note`, `searched`, `status_closed`, ...), or None: it was
    never closed, or the record belongs to another intent that had its local id."""
    return closures.read(db, closed_key(row["local_id"]),
                         {"idempotency_key": row["idempotency_key"], "client_reference": row["client_reference"]})


def close_intent(db: Database, local_id: int, *, by: str, note: str, at: datetime, searched: str) -> dict:
    """Record that intent `local_id` is closed: kept, with who, when, why and what the provider showed. Inside
    one transaction the row is read again: if it is no longer an open intent (the sync or a submit linked it
    meanwhile), StorageError and nothing written. Returns the record."""
    with transaction(db) as conn:
        rows = _rows(conn.execute("SELECT * FROM recharges WHERE local_id = ?", (local_id,)))
        if not rows or rows[0]["status"] not in OPEN_INTENT or rows[0]["provider_id"] is not None:
            shown = f"{rows[0]['status']}, recharge id {rows[0]['provider_id']}" if rows else "gone"
            raise StorageError(f"local recharge #{local_id} changed meanwhile ({shown}): not closed")
        row = rows[0]
        return closures.write(conn, closed_key(local_id), {
            "local_id": local_id, "idempotency_key": row["idempotency_key"],
            "client_reference": row["client_reference"], "mobile_number": row["mobile_number"],
            "amount": fmt(from_cents(row["amount_cents"])), "status_closed": row["status"]},
            by=by, note=note, at=at, searched=searched)
