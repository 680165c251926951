"""`partnerkit events list|prune`: the webhook inbox, with each order's voucher fetch job."""

from __future__ import annotations

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import Progress, emit_newest, format_option
from partnerkit.cli.params import ID
from partnerkit.store import inbox
from partnerkit.timeutil import utcnow

COLUMNS = ["dedup_key", "event_type", "order_id", "status", "state", "duplicates", "received_at",
           "job_state", "job_reason"]


@click.group("events")
def events_group() -> None:
    """Received webhook events."""


@events_group.command("list")
@click.option("--state", type=click.Choice(["processed", "quarantined", "test"]), help="Only events in this state.")
@click.option("--order-id", type=ID, help="Only events of this order.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="At most this many events, newest first (a note on stderr says so when there are more, in every format).")
@format_option
@pass_app
def list_command(app: AppContext, state: str | None, order_id: int | None, limit: int, fmt: str) -> None:
    """Received events, newest first: processed, quarantined (with reason) or test; duplicates seen;
    the order's voucher fetch job and why it is waiting or parked."""
    rows = inbox.listing(app.existing_db, limit=limit + 1, state=state, order_id=order_id)
    for row in rows:
        row["duplicates"] = row.pop("duplicate_count")
        if row["state"] == "quarantined":
            row["job_reason"] = row["reason"]
    filters = [f"state {state}"] * bool(state) + [f"order {order_id}"] * (order_id is not None)
    emit_newest(rows, limit, "events", COLUMNS, fmt,
                empty_message=f"no events with {' and '.join(filters)}" if filters else "no events received yet")


@events_group.command("prune")
@click.option("--older-than-days", type=click.IntRange(30, 3650),
              help="Delete inbox rows last seen more than this many days ago (default: "
                   "PARTNERKIT_INBOX_RETENTION_DAYS, 90; never under 30: dedup keys must outlive the provider's "
                   "manual retries).")
@pass_app
def prune_command(app: AppContext, older_than_days: int | None) -> None:
    """Delete old inbox rows now (dedup keys are kept at least 30 days).

    The worker's `prune-events` job does this every 6 hours with PARTNERKIT_INBOX_RETENTION_DAYS;
    this command is for cron users without a worker, or to prune at once with a shorter one. Rows go
    2,000 per transaction, so a running receiver is never held up; what the events did (orders,
    vouchers, jobs) is kept. New rows reuse the freed pages: the file itself does not shrink. The
    per-minute counts of refused deliveries older than 7 days go too."""
    from datetime import timedelta

    from partnerkit.retention import REFUSALS_KEPT, prune_refusals

    days = older_than_days or app.config.inbox_retention_days
    now = utcnow()
    deleted = inbox.prune(app.existing_db, now=now, keep=timedelta(days=days), progress=Progress("events prune"))
    click.echo(f"deleted {deleted} inbox rows last seen more than {days} days ago", err=True)
    refusals = prune_refusals(app.existing_db, now=now)
    if refusals:
        click.echo(f"deleted {refusals} per-minute counts of refused deliveries older than {REFUSALS_KEPT.days} days",
                   err=True)


def register(group: click.Group) -> None:
    group.add_command(events_group)
