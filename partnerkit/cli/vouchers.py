"""`partnerkit vouchers ORDER_ID [--reveal]`: stored vouchers, masked unless asked."""

from __future__ import annotations

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import emit, format_option
from partnerkit.cli.params import ID
from partnerkit.crypto import load_cipher
from partnerkit.store import jobs, orders
from partnerkit.store import vouchers as voucher_store
from partnerkit.vouchers import unseal

COLUMNS = ["card_number", "pin_code", "claim_url", "voucher_reference_number", "expires_at"]


def mask(value: str | None, visible: int = 4) -> str | None:
    """`************1111`: enough to tell vouchers apart, not enough to redeem one."""
    if value is None:
        return None
    return "*" * max(4, len(value) - visible) + value[-visible:] if len(value) > visible * 2 else "****"


@click.command("vouchers")
@click.argument("order_id", type=ID)
@click.option("--reveal", is_flag=True, help="Print codes, PINs and claim URLs in clear (they are secrets).")
@format_option
@pass_app
def vouchers_command(app: AppContext, order_id: int, reveal: bool, fmt: str) -> None:
    """Stored vouchers of one order (decrypted; masked unless --reveal).

    With --format csv a cell a spreadsheet would run as a formula is written with a leading ' (a code the
    provider sends could be one), so a code that starts with =, +, -, @ or a tab is not as stored there: a script
    that reads the codes should use --format json, which gives every field exactly.
    """
    rows = voucher_store.for_order(app.existing_db, order_id)
    order = None if rows else orders.get(app.db, order_id)
    if not rows and order is None:
        raise click.ClickException(f"order {order_id} is not known locally (see `partnerkit orders list`)")
    cipher = load_cipher(app.config)
    shown = []
    for row in rows:
        clear = unseal(cipher, row)
        if not reveal:
            clear.update(card_number=mask(clear["card_number"]), pin_code="****" if clear["pin_code"] else None,
                         claim_url="(hidden)" if clear["claim_url"] else None)
        shown.append({c: clear[c] for c in COLUMNS})
    if reveal and shown:
        click.echo(f"revealing {len(shown)} voucher(s) of order {order_id}: treat this output as secret", err=True)
    emit(shown, COLUMNS, fmt, empty_message=None if rows else _why_none(app, order))


def _why_none(app: AppContext, order: dict) -> str:
    """Why an order known locally has no vouchers stored, and what brings them."""
    head = f"no vouchers stored for order {order['id']} yet"
    if order["status"] in orders.FINAL - orders.DELIVERING:  # FAILED, CANCELLED: nothing will ever come
        return (f"order {order['id']} is {order['status']}: it has no vouchers and never will "
                "(the provider refunds a failed or cancelled order)")
    if order["status"] not in orders.DELIVERING:
        return f"{head}: it is {order['status']}; vouchers are fetched once the provider delivers it"
    job = jobs.latest_for_orders(app.db, [order["id"]]).get(order["id"])
    if job is None or job["state"] == "done":
        return f"{head}: it is {order['status']} but no voucher fetch is queued; `partnerkit orders sync` queues one"
    if job["state"] == "dead":
        return (f"{head}: its voucher fetch is parked after {job['attempts']} attempt(s) ({job['last_error']}); "
                "the order sync retries it hourly")
    return (f"{head}: it is {order['status']} and its voucher fetch is queued; the worker fetches it "
            "(`partnerkit worker` or `partnerkit run`; `partnerkit serve` alone does not)")


def register(group: click.Group) -> None:
    group.add_command(vouchers_command)
