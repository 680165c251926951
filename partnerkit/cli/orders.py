"""`partnerkit orders list|show|create|sync|close`: local order state; create, sync and close go through the client."""

from __future__ import annotations

import sys
from datetime import datetime
from decimal import Decimal

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import Progress, emit, emit_newest, emit_one, format_option
from partnerkit.cli.params import (ID, at_most_int64, closing_options, idempotency_key, invoking_user, moment,
                                   positive_amount, some_text)
from partnerkit.money import from_cents
from partnerkit.ordering import HOLD_HOURS
from partnerkit.store import Database, closures, inbox, jobs, order_intents, orders, quarantine
from partnerkit.store import vouchers as voucher_store
from partnerkit.timeutil import iso, utcnow
from partnerkit.vouchers import catch_up_orders
from partnerkit.walks import stopped_by_signals

EXIT_UNKNOWN = 3  # as `recharges submit`: the outcome is not known, replay the key (never a new one)
LIST_COLUMNS = ["id", "reference_code", "status", "quantity", "delivered_quantity", "vouchers_stored", "amount",
                "currency", "placed_at", "updated_at"]


def _money(row: dict) -> dict:
    for name in ("amount", "denomination", "discount"):
        if f"{name}_cents" in row:
            row[name] = from_cents(row.pop(f"{name}_cents"))
    return row


def _client(app: AppContext):
    from partnerkit.client import PartnerClient

    return PartnerClient(app.config, app.db, purpose="cli")


@click.group("orders")
def orders_group() -> None:
    """Voucher orders: the local copy, creation through the client, and the order sync."""


@orders_group.command("list")
@click.option("--status", type=click.Choice(list(orders.RANK), case_sensitive=False),
              help="Only orders in this status, in any case (the document's order states).")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="At most this many orders, newest first (a note on stderr says so when there are more, in every format).")
@format_option
@pass_app
def list_command(app: AppContext, status: str | None, limit: int, fmt: str) -> None:
    """Local orders, newest first, with how many vouchers are stored.

    The currency and product name come from the provider's order list: the answer to `orders create` and
    the order detail carry neither, so a new order shows them blank until the next order sync reads the
    list (the worker's, every 5 minutes, or `partnerkit orders sync` now)."""
    rows = [_money(r) for r in orders.list_orders(app.existing_db, status=status, limit=limit + 1)]
    emit_newest(rows, limit, "orders", LIST_COLUMNS, fmt,
                empty_message=f"no orders in status {status.upper()}" if status else "no orders known yet")


def _held(db: Database, order_id: int) -> list[dict]:
    """Why records of this order are held rather than applied, as `orders show` lists them (`held`): the order
    sync's quarantine entry under its id (`order:<id>`: a list record of another order under this id, or one it
    could not read), then the receiver's events of another order under this id, one entry a reason. Each with
    source, reason, events (the webhook events it keeps: 0 for the order sync's entry, which keeps no event),
    records (the records it keeps, whatever the source: 1 for the order sync's, the latest copy of the list
    record, as the quarantine keeps one a key; the events for a webhook entry), first_seen_at and last_seen_at.
    `events` was null for the order sync's entry before `records` came: a number in every entry now."""
    held = []
    entry = quarantine.held_entry(db, "order", str(order_id))
    if entry is not None:
        held.append({"source": "order_sync", "reason": entry["reason"], "events": 0, "records": 1,
                     "first_seen_at": entry["first_seen_at"], "last_seen_at": entry["last_seen_at"]})
    held += [{"source": "webhook", "reason": group["reason"], "events": group["events"], "records": group["events"],
              "first_seen_at": group["first_seen_at"], "last_seen_at": group["last_seen_at"]}
             for group in inbox.given_twice_of(db, order_id)]
    return held


def _held_line(entry: dict) -> str:
    """One `held` entry on one line of the table."""
    count = f", {entry['events']} event(s)" if entry["source"] == "webhook" else ""  # the sync's: its one record
    return (f"{entry['source']}: {entry['reason']} (first seen {entry['first_seen_at']}, last seen "
            f"{entry['last_seen_at']}{count})")


@orders_group.command("show")
@click.argument("order_id", type=ID)
@format_option
@pass_app
def show_command(app: AppContext, order_id: int, fmt: str) -> None:
    """One local order: state, vouchers stored, fetch job, why records of it are held, and its events.

    `held` lists what is kept but not applied to this order: the order sync's quarantined list record under its
    id (another order under this id: "order id given twice: ...", or a record it could not read) and the
    receiver's events of another order under this id, each with its reason and when first and last seen.
    In JSON each entry counts what it keeps: `events`, the webhook events (0 for the order sync's entry) and
    `records`, the records whatever the source (the order sync's entry keeps 1: the latest copy). Empty when
    nothing is held. A voucher fetch parked on another order's detail
    shows in `job_last_error`."""
    row = orders.get(app.existing_db, order_id)
    if row is None:
        raise click.ClickException(f"order {order_id} is not known locally (try `partnerkit orders sync`)")
    row = _money(row)
    row["vouchers_stored"] = voucher_store.count(app.db, order_id)
    job = jobs.latest_for_orders(app.db, [order_id]).get(order_id) or {}
    row.update({f"job_{k}": v for k, v in job.items()})
    held = _held(app.db, order_id)
    events = inbox.listing(app.db, order_id=order_id, limit=50)
    for event in events:
        # `duplicates`, as in `events list`; `duplicate_count` stays as a deprecated JSON alias.
        event["duplicates"] = event["duplicate_count"]
    rows = [{"field": k, "value": v} for k, v in row.items()]
    rows += [{"field": "held", "value": _held_line(entry)} for entry in held] or [{"field": "held", "value": None}]
    emit_one(row, fmt, json_value={**row, "held": held, "events": events}, rows=rows, columns=["field", "value"])
    if fmt == "table" and events:
        click.echo("")
        emit(events, ["dedup_key", "event_type", "status", "state", "duplicates", "received_at"], fmt)


@orders_group.command("create")
@click.option("--product-id", type=ID, required=True,
              help="The provider's product id: `partnerkit catalog products` lists them, with their denominations.")
@click.option("--denomination", required=True, callback=positive_amount,
              help="Per-voucher amount, e.g. 500 or 500.00.")
@click.option("--quantity", type=click.IntRange(1), required=True, callback=at_most_int64,
              help="Number of vouchers (at most the product's max_quantity).")
@click.option("--ref", callback=some_text,
              help="Your reference code for the order (the provider refuses a second order with it; a UUID is "
                   "generated when omitted).")
@click.option("--email", help="Customer e-mail.")
@click.option("--idempotency-key", callback=idempotency_key, help="The key of an earlier attempt (printed when its answer was lost): "
                                        "replays it with the same ref, never ordering twice.")
@click.option("--force", is_flag=True,
              help="Place this order although an earlier one of the same product, denomination and quantity, sent "
                   f"in the last {HOLD_HOURS} hours, is still unresolved (UNKNOWN, or INTENT: being sent, or its "
                   "process died) and may already be placed: a deliberate second order. Without it that is refused, "
                   "nothing sent. The key of an intent that may have placed its order (not REFUSED) resumes it, --force or not.")
@format_option
@pass_app
def create_command(app: AppContext, product_id: int, denomination: Decimal, quantity: int, ref: str | None,
                   email: str | None, idempotency_key: str | None, force: bool, fmt: str) -> None:
    """Place a voucher order (wallet debited); vouchers delivered at once are stored encrypted.

    The order is recorded (its Idempotency-Key and ref) before it is sent. When the provider's answer
    is lost (a timeout, a 500, a garbled answer), the same key is replayed once. Exit code 0 when the
    order is placed, 1 on a refusal or an error (nothing ordered), 3 when its outcome is UNKNOWN still
    (its answer lost, or placed but not storable while the database is locked): the command to run
    then is printed (the same key with --idempotency-key, never a new one), and `partnerkit orders
    sync` links the order carrying its ref. Exit code 3 too, nothing stored, when the answer names an
    order id this database holds for another order (a provider giving one id twice, or a --fixed-ids
    sandbox started again beside a kept database): the message names the intent that holds it. Exit code 2,
    nothing recorded or sent, for a bad option or setting, and for a database (PARTNERKIT_DB) that does not
    exist (the message says how to create it on purpose).

    Run again without the key, the same order is refused (exit 1, nothing sent) while an earlier one of
    the same product, denomination and quantity from the last 24 hours is unresolved (UNKNOWN, or still
    INTENT): the message names its key and ref and the command that replays it. --force places a
    second order deliberately.
    """
    from partnerkit.ordering import place_order

    outcome = place_order(app.config, app.existing_db_to_send, _client(app), product_id=product_id,
                          denomination=denomination, quantity=quantity, ref=ref, email=email, idempotency_key=idempotency_key, force=force)
    row = {"id": outcome.order_id, "ref": outcome.ref, "status": outcome.status or outcome.state,
           "amount": outcome.amount, "quantity": outcome.request.quantity, "vouchers_stored": outcome.vouchers_stored,
           "idempotency_key": outcome.idempotency_key}
    emit_one(row, fmt)
    if outcome.message:
        click.echo(outcome.message, err=True)
    if outcome.state != "PLACED":
        sys.exit(EXIT_UNKNOWN)
    if outcome.status not in orders.DELIVERING:
        click.echo(f"order {outcome.order_id} is {outcome.status}: its vouchers are fetched when the provider "
                   "announces delivery (or the order sync notices it)", err=True)
    elif outcome.vouchers_stored:
        click.echo(f"{outcome.vouchers_stored} voucher(s) stored encrypted; see `partnerkit vouchers {outcome.order_id}`",
                   err=True)


@orders_group.command("sync")
@click.option("--since", callback=moment,
              help="Read back to orders placed at this ISO 8601 time, however far: the order list has no date "
                   "filter, so this reads one page of 100 orders per request, leaving a tenth of the hourly API budget "
                   "to voucher fetches and another tenth (at most its share) to the recharge poller. "
                   "Default: the stored watermark, at most 2 days and 20 pages back.")
@format_option
@pass_app
def sync_command(app: AppContext, since: datetime | None, fmt: str) -> None:
    """Repair local orders from the provider's order list and queue missing voucher fetches.

    Re-arms, for one more read each, the parked voucher fetch of every delivering order it lists, and up
    to 20 other fetches the provider's failure parked (`fetches_rearmed`): after an outage, run it once
    the provider answers again and the worker fetches those vouchers within seconds, not at its hourly
    revival. Exits 1, after printing what it did, when it stopped before the requested time (budget
    spent). How far a long walk has read is printed on stderr every few seconds. With --since, a walk
    stopped part-way (the budget, the provider, Ctrl-C) keeps its place: run again with the same --since
    within 6 hours, it reads on from that page. Ctrl-C ends it after the page it is reading (exit 1, one
    line naming the page); a second Ctrl-C stops it at once.
    """
    if since is not None and since > utcnow():
        raise click.BadParameter(f"{iso(since)} is in the future: orders placed since then cannot exist yet",
                                 param_hint="'--since'")
    with stopped_by_signals(lambda line: click.echo(line, err=True)):  # Ctrl-C: WalkStopped, one line
        summary = catch_up_orders(app.config, app.db, _client(app), since=since, progress=Progress("orders sync"),
                                  rearm_listed=True)
    emit_one(vars(summary), fmt)
    if summary.stopped in INCOMPLETE:
        reached = f"orders placed at {summary.reached}" if summary.reached else "no order"
        # With --since, the walk kept its place (partnerkit.walks.KeptWalk): the same command reads on from it.
        read_on = (" (with the same --since within 6 hours, it reads on from the page it stopped before)"
                   if since is not None and summary.stopped == "budget" else "")
        raise click.ClickException(f"the order list was read back to {reached} only, not to {summary.since}: "
                                   f"{INCOMPLETE[summary.stopped]}{read_on}; what was read is kept")


# Why a sync stopped before reaching `since`, as told to the operator.
INCOMPLETE = {
    "budget": "the hourly API budget is spent (a tenth is kept for voucher fetches and one for the recharge poller), "
              "run it again later",
    "max pages": "the scheduled sync reads at most 20 pages, give --since to read further",
    "page repeated": "the provider answered the same page twice",
}


# `orders close`: the intent's fields, then who closed it, when, why and what the search saw (null when not closed).
INTENT_FIELDS = ["id", "idempotency_key", "ref", "product_id", "denomination", "quantity", "wallet_id", "state",
                 "order_id", "created_at", "updated_at"]


def intent_view(intent: dict, closed: dict | None) -> dict:
    """An order intent as `orders close` prints it, with its closure: `closed_state` "closed", or "overtaken" once
    the provider listed its order after all and it was linked (the provider's record wins)."""
    view = {name: intent[name] for name in INTENT_FIELDS if name != "denomination"}
    view["denomination"] = from_cents(intent["denomination_cents"])
    view = {name: view[name] for name in INTENT_FIELDS}
    still_open = intent["state"] in order_intents.OPEN and intent["order_id"] is None
    return {**view, **closures.view(closed, still_open=still_open)}


@orders_group.command("close")
@click.argument("intent_id", metavar="INTENT_ID", type=ID)
@closing_options("the intent", "Close without reading the provider's order list first: only when support confirmed "
                 "it was never placed (say so in --note), or the list cannot be read back to the intent's time.")
@format_option
@pass_app
def close_command(app: AppContext, intent_id: int, note: str, by: str | None, without_search: bool, fmt: str) -> None:
    """Close an order intent whose outcome is not known, once checked with the provider: it was never placed.

    INTENT_ID is the `#N` that `partnerkit status` names under order_intents_unknown. Only an intent with no
    answer (UNKNOWN; INTENT whose `orders create` no longer runs). First the order list is read back to the
    intent's time, as `partnerkit orders sync --since` reads it (its key is never sent again): if the provider
    lists an order carrying its ref and request, the intent is linked to it instead, not closed (exit 1). An
    intent with an order (PLACED) or refused (REFUSED) has a known outcome and is never closed (exit 1); nor is
    an INTENT whose `orders create` still runs. If the list cannot be read back that far, or shows an order
    carrying its ref that is not its request, nothing is written (exit 1).

    The intent is kept, still UNKNOWN (or INTENT), with who closed it, when and the note: `partnerkit status`
    no longer names it, a new order of the same product, denomination and quantity is no longer held back, and
    `orders create --idempotency-key` of its key is refused. If the provider lists the order later, the order
    sync links it (its record wins; closed_state "overtaken"). Closing one already closed changes nothing (exit 0).
    """
    from partnerkit.ordering import close_intent

    db = app.existing_db
    outcome = close_intent(app.config, db, None if without_search else _client(app), intent_id, note=note,
                           by=by or invoking_user(), without_search=without_search)
    view = intent_view(outcome.intent, order_intents.closure(db, outcome.intent))
    emit_one(view, fmt, rows=[{"field": name, "value": value} for name, value in view.items()],
             columns=["field", "value"])
    if not outcome.closed:
        raise click.ClickException(outcome.message)
    click.echo(outcome.message, err=True)


def register(group: click.Group) -> None:
    group.add_command(orders_group)
