"""The submit side: a recharge's intent before its submit is sent, and what its answer settles.

`record_intent` commits an INTENT row (origin 'partner') before the request exists; the answer
links it to the provider's recharge (`record_response`), leaves it UNKNOWN for locate
(`mark_unknown`), or removes it when the provider definitely refused (`discard_refused`).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from partnerkit.errors import StorageError
from partnerkit.money import cents, to_decimal
from partnerkit.store.db import Database, transaction
from partnerkit.store.recharges._provider import (
    OPEN_INTENT_SQL, PERFORMED_BY_REPLAY, _ROW, _write, normalise_status, provider_fields,
)
from partnerkit.store.recharges._queries import _rows, get
from partnerkit.timeutil import iso


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
                     f"WHERE local_id = ? AND {OPEN_INTENT_SQL}", (error, iso(at), local_id))


def discard_refused(db: Database, local_id: int) -> None:
    """Remove an intent the provider definitely refused (4xx, 503): no recharge exists for it."""
    with transaction(db) as conn:
        conn.execute(f"DELETE FROM recharges WHERE local_id = ? AND {OPEN_INTENT_SQL}", (local_id,))


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
