"""What the kit stops keeping, and when: the worker's `prune-events` job.

The webhook inbox is the one table that grows with every delivery and is not needed forever: each
row holds a dedup key and the sealed raw body, kept for diagnosis. Its rows are deleted once last
seen more than PARTNERKIT_INBOX_RETENTION_DAYS ago (90 by default, never under 30: a dedup key must
outlive the provider's manual retries, which redeliver an event with its old id long after the
5-minute window). What an event did stays: the order's state, its vouchers and jobs, the
recharges, transactions, drifts with their audit trail and the reports are never pruned.

The counts of refused deliveries (one row per minute and reason, `webhook_refusals`) are kept
REFUSALS_KEPT: `partnerkit status` reads the last hour, and a week is time enough to look back at an
incident with sqlite3.

The API budget's own log (`budget_events`) is trimmed by the budget as it goes (partnerkit.store.budget).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from partnerkit.config import Config
from partnerkit.store import Database, inbox, webhook_refusals
from partnerkit.timeutil import utcnow

REFUSALS_KEPT = timedelta(days=7)


def prune_events(config: Config, db: Database, client: Any = None, *, now: datetime | None = None) -> dict[str, int]:
    """Delete inbox rows last seen more than the retention ago, and the counts of refused deliveries
    older than REFUSALS_KEPT (the worker job; spends no API budget)."""
    now = now or utcnow()
    deleted = inbox.prune(db, now=now, keep=timedelta(days=config.inbox_retention_days))
    return {"events_deleted": deleted, "refusal_counts_deleted": prune_refusals(db, now=now)}


def prune_refusals(db: Database, *, now: datetime) -> int:
    """Delete the per-minute counts of refused deliveries older than REFUSALS_KEPT; return how many rows."""
    return webhook_refusals.prune(db, before=now - REFUSALS_KEPT)
