"""`partnerkit webhooks deliveries|stats|retry`: the provider's delivery attempts, their statistics, and
re-queuing failed ones."""

from __future__ import annotations

import sys
from typing import Any

import click

from partnerkit.cli import explain
from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import Progress, counted, emit, emit_one, format_option
from partnerkit.cli.params import ID, at_most_int64
from partnerkit.cli.webhooks import ORDER_EVENTS, _client, _masked, _plain, webhooks_group
from partnerkit.errors import ApiError, ApiStatusError

DELIVERY_COLUMNS = ["id", "webhook_url_id", "order_id", "event_type", "event_id", "status", "attempt_count",
                    "max_attempts", "response_status", "response_time_ms", "delivered_at", "created_at"]


@webhooks_group.command("deliveries")
@click.option("--status", type=click.Choice(["pending", "delivered", "failed"]),
              help="Only deliveries in this state (failed: the provider gave up retrying).")
@click.option("--event-type", type=click.Choice(ORDER_EVENTS), help="Only deliveries of this event type.")
@click.option("--order-id", type=ID, help="Only deliveries about this order.")
@click.option("--webhook-id", "webhook_url_id", type=ID,
              help="Only deliveries to this webhook (an ID of `webhooks list`).")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True, callback=at_most_int64,
              help="Which page of deliveries, newest first.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True, help="Deliveries per page.")
@format_option
@pass_app
def deliveries_command(app: AppContext, fmt: str, **filters: Any) -> None:
    """Delivery attempts as the provider records them."""
    page = _client(app).list_deliveries(**filters)
    rows = [{c: _plain(getattr(d, c, None)) for c in DELIVERY_COLUMNS} for d in page.items]
    past_the_end = not rows and page.total_pages and page.page > page.total_pages
    empty = (f"no deliveries on page {page.page}: there are {page.total_pages} page(s) of {page.total_count}"
             if past_the_end else "no deliveries")
    emit(rows, DELIVERY_COLUMNS, fmt, empty_message=empty)
    if fmt == "table" and rows and page.total_pages:
        click.echo(f"page {page.page} of {page.total_pages} ({counted(page.total_count or 0, 'delivery', 'deliveries')})", err=True)


@webhooks_group.command("stats")
@format_option
@pass_app
def stats_command(app: AppContext, fmt: str) -> None:
    """Delivery statistics: totals and the last 24 hours."""
    stats = _client(app).delivery_stats()
    emit_one({k: v for k, v in vars(stats).items() if k != "raw"}, fmt)


RETRY_COLUMNS = ["delivery_id", "outcome", "message"]


@webhooks_group.command("retry")
@click.argument("delivery_ids", nargs=-1, type=ID)
@click.option("--failed", "all_failed", is_flag=True,
              help="Re-queue every delivery the provider lists as failed (read 100 a page first, then re-queued).")
@format_option
@pass_app
def retry_command(app: AppContext, delivery_ids: tuple[int, ...], all_failed: bool, fmt: str) -> None:
    """Re-queue failed deliveries (only while they have attempts left): the ids given, and/or --failed.

    One id prints the provider's answer as one object, and a refusal is the error (exit 1). Several
    ids, or --failed, print one row per delivery (re-queued, or refused with the provider's message)
    and go on past a refusal; they leave the hour's last requests to the worker (as the syncs do) and
    stop when only those are left, saying how many remain (run the same command again later). They stop
    too at an error that is no refusal of one delivery: no answer, a 5xx, a 401 or 429, an answer that
    is not the provider's (a wrong PARTNERKIT_API_BASE_URL's 404, a proxy's 403). Progress goes to
    stderr. Exit 0 when every one was re-queued; 1 otherwise.
    """
    if not delivery_ids and not all_failed:
        raise click.UsageError("give one or more DELIVERY_IDs, or --failed")
    if len(delivery_ids) == 1 and not all_failed:
        _retry_one(app, delivery_ids[0], fmt)
        return
    from partnerkit.store.budget import walk_reserve

    client = _client(app).leaving(walk_reserve(app.config.hourly_budget, app.config.poller_budget_share))
    progress = Progress("webhooks retry")
    wanted = list(dict.fromkeys(delivery_ids + (tuple(_failed_ids(client, progress)) if all_failed else ())))
    rows: list[dict] = []
    stopped = None
    for number, delivery_id in enumerate(wanted, 1):
        try:
            answer = _masked(client.retry_delivery(delivery_id))
            message = answer.get("message") if isinstance(answer, dict) else None
            rows.append({"delivery_id": delivery_id, "outcome": "re-queued", "message": message or "re-queued"})
        except ApiStatusError as exc:
            # The provider failing (a 5xx; an answer not its own: a wrong base URL's 404, a proxy's 403), the key
            # refused or the rate limit: nothing said of this delivery, and the next would meet the same
            if not exc.from_provider or not 400 <= exc.status < 500 or exc.status in (401, 429):
                stopped = exc
                break
            rows.append({"delivery_id": delivery_id, "outcome": "refused", "message": str(exc)})
        except ApiError as exc:  # no room left in the budget (BudgetExhausted), or no answer: the rest wait
            stopped = exc
            break
        progress("deliveries re-queued or refused", number)
    emit(rows, RETRY_COLUMNS, fmt, empty_message="none re-queued" if wanted else "no failed deliveries to re-queue")
    if not wanted:
        return
    queued = sum(1 for row in rows if row["outcome"] == "re-queued")
    click.echo(f"re-queued {counted(queued, 'delivery', 'deliveries')} of {len(wanted):,}"
               + (f"; {len(rows) - queued:,} refused by the provider" if len(rows) > queued else ""), err=True)
    if stopped is not None:
        said = explain(click.get_current_context(), stopped)  # as the error alone is printed: what to check
        raise click.ClickException(f"stopped after {len(rows):,} of {len(wanted):,}: {said}; the rest were not "
                                   "sent: run the same command again later")
    if queued < len(rows):
        sys.exit(1)


def _failed_ids(client: Any, progress: Progress) -> list[int]:
    """Every delivery id the provider lists as failed, read page by page before any is re-queued.

    Re-queuing while walking would move each one out of the `failed` filter, the rest up a place,
    and the next page (read by offset) would skip as many (docs/client.md, "Walking lists"); read
    first, nothing of ours moves them. A record that cannot be read is counted and skipped."""
    from partnerkit.client import iterate

    unreadable: list[Any] = []
    ids = []
    for delivery in iterate(lambda n: client.list_deliveries(page=n, limit=100, status="failed"),
                            on_malformed=unreadable.append):
        ids.append(delivery.id)
        progress("failed deliveries listed", len(ids))
    if unreadable:
        click.echo(f"warning: {counted(len(unreadable), 'failed delivery', 'failed deliveries')} could not be read "
                   "from the provider's list and are left out", err=True)
    return ids


def _retry_one(app: AppContext, delivery_id: int, fmt: str) -> None:
    """One delivery: the provider's answer as one object; a refusal is the command's error."""
    result = _masked(_client(app).retry_delivery(delivery_id))
    fields = dict(result) if isinstance(result, dict) else {}
    row = {"delivery_id": fields.pop("delivery_id", delivery_id),
           "message": fields.pop("message", None) or f"delivery {delivery_id} re-queued"}
    row.update({str(k): _plain(v) for k, v in fields.items()})
    emit_one(row, fmt, json_value=result)
