"""The webhook inbox: one row per dedup key, written together with its effects in one transaction.

The raw body is kept sealed with the voucher key (partnerkit.crypto), bound to its dedup key: a
signed body may carry voucher codes (one of the document's envelope forms has `vouchers`; an event
type partnerkit does not know is kept quarantined as it came), and codes are encrypted at rest.
`body_of` gives it back byte for byte. Rows written before bodies were sealed keep theirs in clear
until they are pruned (`partnerkit.retention`, PARTNERKIT_INBOX_RETENTION_DAYS) or `partnerkit keys rewrap`
seals them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Protocol

from sqlite_utils import Database

from partnerkit.errors import StorageError
from partnerkit.money import cents
from partnerkit.store import jobs, meta, orders
from partnerkit.store.db import holding, transaction
from partnerkit.store.jobs import stamp

SEALED_PREFIX = b"v1"  # partnerkit.crypto.VERSION, which the store cannot import (crypto imports the store)
RETENTION = timedelta(days=30)  # dedup keys live at least this long (a manual retry comes late)
PRUNE_BATCH = 2000  # inbox rows deleted per transaction (a few milliseconds of the write lock)
LAST_DUPLICATE = "inbox.last_duplicate_at"  # meta key: when a delivery of a stored event last came again
ACCEPTED, DUPLICATE, IGNORED = "accepted", "duplicate", "ignored"


class EventLike(Protocol):
    """What the inbox needs of a normalised event (receiver.envelope.Event)."""

    event_id: str
    event_type: str | None
    order_id: int | None
    status: str | None
    occurred_at: datetime | None
    amount: Any
    delivered_quantity: int | None
    quantity: int | None
    quarantine: str | None
    is_test: bool
    # Identity facts the event shows but that are not stored from it (orders.another_order).
    reference_code: str | None
    denomination_cents: int | None


@dataclass(frozen=True)
class Recorded:
    """What happened to one delivery: accepted, duplicate or ignored, and whether a fetch was queued."""

    outcome: str
    order_status: str | None = None
    fetch_queued: bool = False
    reason: str | None = None  # why an event kept is not applied, when not its own `quarantine` (an id given twice)


class Sealer(Protocol):
    """What the inbox needs of partnerkit.crypto.Cipher."""

    def encrypt(self, plaintext: str | None, *, context: bytes = b"") -> bytes | None: ...

    def decrypt(self, stored: bytes | None, *, context: bytes = b"") -> str | None: ...


def body_context(dedup_key: str) -> bytes:
    """What a body's ciphertext is bound to: the inbox and the row's dedup key."""
    return b"inbox:" + dedup_key.encode("utf-8", "surrogatepass")


def body_text(body: bytes) -> str:
    """The text a body is sealed as: latin-1 maps every byte to one character, so a body that is not
    UTF-8 (kept quarantined) round-trips byte for byte."""
    return body.decode("latin-1")


def record(db: Database, event: EventLike, body: bytes, *, cipher: Sealer, now: datetime,
           request_id: str | None = None, webhook_id: str | None = None) -> Recorded:
    """Insert the event under its dedup key (its body sealed with `cipher`) and apply it to its order,
    all in one transaction."""
    state = "quarantined" if event.quarantine else ("test" if event.is_test else "processed")
    sealed = cipher.encrypt(body_text(body), context=body_context(event.event_id))
    at = stamp(now)
    occurred = stamp(event.occurred_at) if event.occurred_at else None
    with transaction(db) as conn:
        cursor = conn.execute(
            """INSERT INTO inbox (dedup_key, event_type, order_id, status, occurred_at, state, reason,
                                  webhook_id, request_id, received_at, last_seen_at, body)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dedup_key) DO NOTHING""",
            (event.event_id, event.event_type, event.order_id, event.status, occurred, state, event.quarantine,
             webhook_id, request_id, at, at, sealed))
        if cursor.rowcount == 0:
            conn.execute("UPDATE inbox SET duplicate_count = duplicate_count + 1, last_seen_at = ? WHERE dedup_key = ?",
                         (at, event.event_id))
            # A duplicate answered 2xx is a delivery that got through (status's refused-deliveries line
            # clears on it). One meta row, written by duplicates only: `last_seen_at` has no index to find it.
            meta.put(conn, LAST_DUPLICATE, at, now=now)
            return Recorded(DUPLICATE)
        if event.quarantine:
            return Recorded(IGNORED)
        if event.is_test or event.order_id is None:
            return Recorded(ACCEPTED)
        try:
            status, _ = orders.apply(
                conn, event.order_id, event.status, now=now, source=orders.WEBHOOK, occurred_at=event.occurred_at,
                delivered_quantity=event.delivered_quantity, quantity=event.quantity,
                amount_cents=cents(event.amount) if event.amount is not None else None,
                identity={"reference_code": event.reference_code, "denomination_cents": event.denomination_cents})
        except orders.AnotherOrder as clash:
            # An event of another order than the one stored under its id (compared in memory with the row apply()
            # reads anyway): kept and acknowledged like any event, marked quarantined with the reason, and neither
            # moves the stored order nor queues a fetch. One more statement, only for such an event.
            conn.execute("UPDATE inbox SET state = 'quarantined', reason = ? WHERE dedup_key = ?",
                         (clash.reason[:500], event.event_id))
            return Recorded(IGNORED, reason=clash.reason)
        queued = False
        if event.status in orders.DELIVERING:
            # Queued even when a stale event does not move the order: the fetch job reads the
            # detail and stores only vouchers it has not stored yet.
            expected = event.delivered_quantity if event.status == "PARTIALLY_DELIVERED" else event.quantity
            jobs.queue(conn, event.order_id, now=now, expected_status=event.status, expected_count=expected)
            queued = True
        return Recorded(ACCEPTED, status, queued)


def body_of(db: Database, cipher: Sealer, dedup_key: str) -> bytes | None:
    """The raw body kept under `dedup_key`, as it was received (None: no such row). A row written
    before bodies were sealed (`is_clear`) is given back as it is."""
    row = db.execute("SELECT body FROM inbox WHERE dedup_key = ?", (dedup_key,)).fetchone()
    if row is None:
        return None
    if is_clear(row[0]):
        return bytes(row[0])
    return cipher.decrypt(row[0], context=body_context(dedup_key)).encode("latin-1")


def is_clear(stored: bytes) -> bool:
    """Whether a stored body predates sealing: a sealed one starts with the cipher's version tag, and
    a JSON body cannot (`partnerkit keys rewrap` seals such rows)."""
    return not bytes(stored).startswith(SEALED_PREFIX)


def sealed_batch(db: Database, *, after_id: int, limit: int) -> list[tuple[int, str, bytes]]:
    """Up to `limit` (id, dedup_key, stored body) with id above `after_id` (for `partnerkit keys`)."""
    return [(row[0], row[1], bytes(row[2])) for row in db.execute(
        "SELECT id, dedup_key, body FROM inbox WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))]


def reseal(conn: sqlite3.Connection, row_id: int, old: bytes, new: bytes) -> bool:
    """Replace one stored body, only if it is still `old` (inside the caller's transaction)."""
    return conn.execute("UPDATE inbox SET body = ? WHERE id = ? AND body = ?", (new, row_id, old)).rowcount == 1


def listing(db: Database, *, limit: int = 100, state: str | None = None, order_id: int | None = None) -> list[dict]:
    """Received events, newest first, with the order's latest voucher fetch job."""
    clauses, args = [], []
    if state:
        clauses.append("i.state = ?")
        args.append(state)
    if order_id is not None:
        clauses.append("i.order_id = ?")
        args.append(order_id)
    where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
    cursor = db.execute(
        f"""SELECT i.dedup_key, i.event_type, i.order_id, i.status, i.state, i.reason, i.duplicate_count,
                   i.occurred_at, i.received_at, i.last_seen_at, i.request_id, i.webhook_id
            FROM inbox i {where} ORDER BY i.id DESC LIMIT ?""", (*args, limit))
    names = [c[0] for c in cursor.description]
    rows = [dict(zip(names, row)) for row in cursor.fetchall()]
    latest = jobs.latest_for_orders(db, sorted({r["order_id"] for r in rows if r["order_id"] is not None}))
    for row in rows:
        job = latest.get(row["order_id"]) or {}
        row["job_state"] = job.get("state")
        row["job_attempts"] = job.get("attempts")
        row["job_reason"] = job.get("last_error")
    return rows


def given_twice_of(db: Database, order_id: int) -> list[dict]:
    """The events of `order_id` kept but not applied because they are of another order under its id (`record`:
    their reason starts with `orders.ID_GIVEN_TWICE`), one entry a reason: reason, events (how many),
    first_seen_at (the first one's receipt) and last_seen_at (the last delivery of any), oldest first.
    Through `inbox_order_id`: the order's own events only (`partnerkit orders show`)."""
    cursor = db.execute(
        "SELECT reason, COUNT(*) AS events, MIN(received_at) AS first_seen_at, MAX(last_seen_at) AS last_seen_at"
        " FROM inbox WHERE order_id = ? AND state = 'quarantined' AND substr(reason, 1, ?) = ?"
        " GROUP BY reason ORDER BY first_seen_at, reason",
        (order_id, len(orders.ID_GIVEN_TWICE), orders.ID_GIVEN_TWICE))
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def counts(db: Database) -> dict[str, int]:
    """Inbox rows by state (the states that have any), and the total of duplicate deliveries.

    Read from `tallies`, which triggers keep with every insert, duplicate and prune (migration 13):
    `partnerkit status` and every /metrics scrape used to count the inbox, bodies and all."""
    rows = db.execute("SELECT substr(name, 7), n FROM tallies WHERE name >= 'inbox.' AND name < 'inbox/'").fetchall()
    result = {name: n for name, n in rows if n and name != "duplicates"}
    result["duplicates"] = dict(rows).get("duplicates", 0)
    return result


def prune(db: Database, *, now: datetime, keep: timedelta = RETENTION, batch: int = PRUNE_BATCH,
          progress: Callable[[str, int], None] | None = None) -> int:
    """Delete inbox rows last seen before `now - keep` (never less than 30 days); return how many.

    One short transaction per `batch` rows in id order, so a receiver's insert waits for one batch at
    most, never for a first prune of months of events; a stopped prune loses nothing and the next
    one goes on. No index on `last_seen_at` (a duplicate delivery updates it, and every index is
    paid by the receiver): rows are inserted in id order at their `received_at`, and `last_seen_at`
    is never earlier, so the walk along the rowid ends at the first batch received wholly after the
    cutoff. A row inserted a few milliseconds out of order there is pruned by a later run.
    `progress(entity, walked)` is called after each batch (a first prune of a big inbox takes minutes)."""
    keep = max(keep, RETENTION)
    cutoff = stamp(now - keep)
    deleted, after, walked = 0, 0, 0
    while True:
        with transaction(db) as conn:
            rows = conn.execute("SELECT id, received_at FROM inbox WHERE id > ? ORDER BY id LIMIT ?",
                                (after, batch)).fetchall()
            if not rows:
                return deleted
            last = rows[-1][0]
            deleted += conn.execute("DELETE FROM inbox WHERE id > ? AND id <= ? AND last_seen_at < ?",
                                    (after, last, cutoff)).rowcount
        if min(received for _, received in rows) >= cutoff:
            return deleted
        after, walked = last, walked + len(rows)
        if progress is not None:
            progress(f"inbox rows ({deleted:,} deleted)", walked)


def probe_write(db: Database) -> None:
    """Commit one counter increment (the readiness probe).

    Committed, not rolled back: a rolled-back write never reaches the WAL, so a full disk would
    pass the probe while every webhook got 503."""
    with holding(db) as conn:  # a handle shared by threads: no other thread's transaction in between
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT INTO counters (name, value) VALUES ('readyz.probe', 1) "
                             "ON CONFLICT (name) DO UPDATE SET value = value + 1")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"database is not writable: {exc}") from exc
