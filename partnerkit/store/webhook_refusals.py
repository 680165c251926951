"""Refused webhook deliveries, counted per minute and reason (migration 11).

Written by the receiver's housekeeping thread (receiver.refusals: a worker's tally, a few seconds'
worth at a time, never one write per request), read by `partnerkit status`, pruned by the worker's
retention job (partnerkit.retention).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from sqlite_utils import Database

from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp

PRUNE_BATCH = 2000  # rows deleted per transaction (a few milliseconds of the write lock)


@dataclass(frozen=True)
class Tally:
    """The refusals of one reason within one minute: how many, and the first and last (stamp text)."""

    minute: str
    reason: str
    refused: int
    first_at: str
    last_at: str


@dataclass(frozen=True)
class Refused:
    """What was refused over a span: counts by reason (most first), the first and the last refusal."""

    by_reason: dict[str, int]
    first_at: str | None = None
    last_at: str | None = None

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())


def minute_of(stamped: str) -> str:
    """The minute a stored time (`jobs.stamp` text) falls in: `2026-11-22T10:05:13.000001Z` -> `2026-11-22T10:05Z`."""
    return stamped[:16] + "Z"


def add(db: Database, tallies: Iterable[Tally]) -> None:
    """Add refusals to their minutes' rows in one transaction (what other workers saved is summed)."""
    rows = [(t.minute, t.reason, t.refused, t.first_at, t.last_at) for t in tallies]
    with transaction(db) as conn:
        conn.executemany(
            """INSERT INTO webhook_refusals (minute, reason, refused, first_at, last_at) VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (minute, reason) DO UPDATE SET refused = refused + excluded.refused,
                   first_at = MIN(first_at, excluded.first_at), last_at = MAX(last_at, excluded.last_at)""", rows)


def since(db: Database, start: datetime) -> Refused:
    """The refusals counted from the minute holding `start` on."""
    rows = db.execute("SELECT reason, SUM(refused), MIN(first_at), MAX(last_at) FROM webhook_refusals "
                      "WHERE minute >= ? GROUP BY reason", (minute_of(stamp(start)),)).fetchall()
    if not rows:
        return Refused({})
    rows.sort(key=lambda row: (-row[1], row[0]))
    return Refused({reason: count for reason, count, _, _ in rows},
                   min(row[2] for row in rows), max(row[3] for row in rows))


def prune(db: Database, *, before: datetime, batch: int = PRUNE_BATCH) -> int:
    """Delete the rows of minutes before the one holding `before`, `batch` per transaction; return how many."""
    cutoff = minute_of(stamp(before))
    deleted = 0
    while True:
        with transaction(db) as conn:
            gone = conn.execute("DELETE FROM webhook_refusals WHERE (minute, reason) IN (SELECT minute, reason "
                                "FROM webhook_refusals WHERE minute < ? ORDER BY minute LIMIT ?)",
                                (cutoff, batch)).rowcount
        deleted += gone
        if gone < batch:
            return deleted
