"""`partnerkit orders list|show|create|sync`: local order state; create and sync go through the client."""

from __future__ import annotations

from datetime import datetime

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import Progress, emit, emit_newest, emit_one, format_option
from partnerkit.cli.params import ID, at_most_int64, moment
from partnerkit.crypto import load_cipher
from partnerkit.money import MoneyError, cents, from_cents, to_decimal
from partnerkit.store import inbox, jobs, orders
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.db import transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import iso, utcnow
from partnerkit.vouchers import catch_up_orders, seal

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
@click.option("--status", help="Only orders in this status (any case).")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="At most this many orders, newest first (a table says so on stderr when there are more).")
@format_option
@pass_app
def list_command(app: AppContext, status: str | None, limit: int, fmt: str) -> None:
    """Local orders, newest first, with how many vouchers are stored."""
    rows = [_money(r) for r in orders.list_orders(app.existing_db, status=status, limit=limit + 1)]
    emit_newest(rows, limit, "orders", LIST_COLUMNS, fmt,
                empty_message=f"no orders in status {status.upper()}" if status else "no orders known yet")


@orders_group.command("show")
@click.argument("order_id", type=ID)
@format_option
@pass_app
def show_command(app: AppContext, order_id: int, fmt: str) -> None:
    """One local order: state, vouchers stored, fetch job, and its events."""
    row = orders.get(app.existing_db, order_id)
    if row is None:
        raise click.ClickException(f"order {order_id} is not known locally (try `partnerkit orders sync`)")
    row = _money(row)
    row["vouchers_stored"] = voucher_store.count(app.db, order_id)
    job = jobs.latest_for_orders(app.db, [order_id]).get(order_id) or {}
    row.update({f"job_{k}": v for k, v in job.items()})
    events = inbox.listing(app.db, order_id=order_id, limit=50)
    for event in events:
        # `duplicates`, as in `events list`; `duplicate_count` stays as a deprecated JSON alias.
        event["duplicates"] = event["duplicate_count"]
    emit_one(row, fmt, json_value={**row, "events": events},
             rows=[{"field": k, "value": v} for k, v in row.items()], columns=["field", "value"])
    if fmt == "table" and events:
        click.echo("")
        emit(events, ["dedup_key", "event_type", "status", "state", "duplicates", "received_at"], fmt)


@orders_group.command("create")
@click.option("--product-id", type=ID, required=True,
              help="The provider's product id (its catalog: GET /api/v1/products).")
@click.option("--denomination", required=True, help="Per-voucher amount, e.g. 500 or 500.00.")
@click.option("--quantity", type=click.IntRange(1), required=True, callback=at_most_int64,
              help="Number of vouchers (at most the product's max_quantity).")
@click.option("--ref", help="Your reference code for the order.")
@click.option("--email", help="Customer e-mail.")
@click.option("--idempotency-key", help="Reuse the key of an earlier attempt to replay it instead of ordering twice.")
@format_option
@pass_app
def create_command(app: AppContext, product_id: int, denomination: str, quantity: int, ref: str | None,
                   email: str | None, idempotency_key: str | None, fmt: str) -> None:
    """Place a voucher order (wallet debited); vouchers delivered at once are stored encrypted."""
    try:
        amount = to_decimal(denomination, field="--denomination", strict=True, typed=True)
    except MoneyError as exc:
        raise click.BadParameter(str(exc), param_hint="--denomination") from exc
    # The create body carries money as a JSON number (the document's create table).
    value = int(amount) if amount == amount.to_integral_value() else amount
    # The key is checked before the order is placed: vouchers delivered at once must be stored,
    # and a key error after the wallet is debited invites a second, paid, attempt.
    cipher = load_cipher(app.config)
    created = _client(app).create_order(product_id=product_id, denomination=value, quantity=quantity,
                                        ref=ref, email=email, idempotency_key=idempotency_key)
    now = utcnow()
    sealed = [seal(cipher, created.id, v) for v in created.vouchers]
    status = created.status.upper()
    with transaction(app.db) as conn:
        orders.apply(conn, created.id, status, now=now, source="create", reference_code=created.ref,
                     transaction_id=created.transaction_id, product_id=created.product_id, quantity=created.quantity,
                     amount_cents=cents(created.amount), denomination_cents=cents(created.denomination),
                     discount_cents=cents(created.discount), email=email,
                     placed_at=stamp(created.placed_at) if isinstance(created.placed_at, datetime) else None,
                     delivered_quantity=len(sealed) if status in orders.DELIVERING else None)
        stored = voucher_store.add(conn, created.id, sealed, now=now)
        if status in orders.DELIVERING and stored < created.quantity:
            jobs.queue(conn, created.id, now=now, expected_status=status, expected_count=created.quantity)
    row = {"id": created.id, "ref": created.ref, "status": status, "amount": created.amount,
           "quantity": created.quantity, "vouchers_stored": stored, "idempotency_key": created.idempotency_key}
    emit_one(row, fmt)
    if status not in orders.DELIVERING:
        click.echo(f"order {created.id} is {status}: its vouchers are fetched when the provider announces "
                   "delivery (or the order sync notices it)", err=True)
    elif stored:
        click.echo(f"{stored} voucher(s) stored encrypted; see `partnerkit vouchers {created.id}`", err=True)


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

    Exits 1, after printing what it did, when it stopped before the requested time (budget spent).
    How far a long walk has read is printed on stderr every few seconds.
    """
    if since is not None and since > utcnow():
        raise click.BadParameter(f"{iso(since)} is in the future: orders placed since then cannot exist yet",
                                 param_hint="'--since'")
    summary = catch_up_orders(app.config, app.db, _client(app), since=since, progress=Progress("orders sync"))
    emit_one(vars(summary), fmt)
    if summary.stopped in INCOMPLETE:
        reached = f"orders placed at {summary.reached}" if summary.reached else "no order"
        raise click.ClickException(f"the order list was read back to {reached} only, not to {summary.since}: "
                                   f"{INCOMPLETE[summary.stopped]}; what was read is kept")


# Why a sync stopped before reaching `since`, as told to the operator.
INCOMPLETE = {
    "budget": "the hourly API budget is spent (a tenth is kept for voucher fetches and one for the recharge poller), "
              "run it again later",
    "max pages": "the scheduled sync reads at most 20 pages, give --since to read further",
    "page repeated": "the provider answered the same page twice",
}


def register(group: click.Group) -> None:
    group.add_command(orders_group)
