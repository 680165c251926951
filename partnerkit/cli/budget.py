"""`partnerkit budget show|unblock`: the shared API request budget, and lifting a 429's block by hand."""

from __future__ import annotations

from datetime import timedelta

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import emit, format_option
from partnerkit.cli.params import invoking_user, not_blank
from partnerkit.store import jobs
from partnerkit.store.budget import GENERAL, ORDER_CREATE, Budget
from partnerkit.timeutil import iso, utcnow

COLUMNS = ["class", "limit", "window_s", "used", "remaining", "provider_remaining", "provider_remaining_sent_at",
           "blocked_until", "blocked_because", "last_unblocked", "requests_elsewhere", "configured_limit",
           "provider_limit", "used_by_purpose"]
TABLE_COLUMNS = COLUMNS[:10]  # the rest in json and csv


def _budget(app: AppContext) -> Budget:
    """The budget of PARTNERKIT_API_KEY in the existing database (its rows are kept by the key's hash)."""
    return Budget.from_config(app.config.require("api_key"), app.existing_db)


@click.group("budget", short_help="The API request budget every process using this database shares, and the"
             " provider's 429 blocks of it.")
def budget_group() -> None:
    """The API request budget every process using this database shares (PARTNERKIT_HOURLY_BUDGET an hour,
    PARTNERKIT_ORDER_BUDGET_PER_MINUTE order creations a minute), and the provider's 429 blocks of it."""


@budget_group.command("show")
@format_option
@pass_app
def show_command(app: AppContext, fmt: str) -> None:
    """What the budget knows, per class: used, left, the provider's figures, any 429 block and why.

    One row per class: `general` (every call, per hour) and `order_create` (order creation, per minute). The limit it keeps to (the lower of PARTNERKIT_* and the provider's X-RateLimit-Limit), the requests this
    database made in the window and what is left (after the provider's own figures), the provider's last
    X-RateLimit-Remaining and when its request was sent, a 429's block and the call that met it, the last
    block lifted by hand (who, when), and `requests_elsewhere`: requests the provider counted beyond this
    database's own (another process using the key; see `partnerkit status`). The table leaves out
    requests_elsewhere, the configured and provider's limits and the requests by purpose: json and csv have
    them. Reads the database only: no call, no budget spent. Exit codes: 0; 1 when the database cannot be
    opened; 2 for a bad option or setting (PARTNERKIT_API_KEY must be set: the budget is the key's).
    """
    rows = _budget(app).describe()
    emit(rows, TABLE_COLUMNS if fmt == "table" else COLUMNS, fmt)


@budget_group.command("unblock")
@click.option("--class", "budget_class", type=click.Choice([GENERAL, ORDER_CREATE]),
              help="Only this class (default: every class that is blocked). A block of general also holds order "
                   "creation, which spends one of it.")
@click.option("--by", callback=not_blank,
              help="Who lifts it (default: the user who ran sudo, SUDO_USER, when set; else the login name).")
@click.option("--note", callback=not_blank, help="Why, kept with who and when (e.g. the provider's incident number).")
@pass_app
def unblock_command(app: AppContext, budget_class: str | None, by: str | None, note: str | None) -> None:
    """Lift a 429's block of the request budget now, for every process using this database.

    A 429 blocks its class for every process until its Retry-After has passed (at most an hour, one window
    of the class): the document's rule, which the worker, the receiver and every command obey. A provider
    in trouble may send a long Retry-After once and be back in minutes; once it confirms it is back (its
    status page, its support), this lifts the block. It is safe because nothing else changes: the
    budget's own count still holds every process to the limits, and the next 429 blocks again. Voucher
    fetches that waited for the block are made due at once. Who and when are kept in the database
    (`partnerkit budget show`, last_unblocked) and printed. Nothing is sent to the provider.

    Exit codes: 0, also when nothing was blocked (said so on stderr); 1 when the database cannot be
    opened; 2 for a bad option or setting (PARTNERKIT_API_KEY must be set).
    """
    lifted = _budget(app).unblock(budget_class, by=by or invoking_user(), note=note)
    if not lifted:
        named = f"the {budget_class} budget is not" if budget_class else "no budget class is"
        click.echo(f"nothing to lift: {named} blocked by a 429 now", err=True)
        return
    for record in lifted:
        waited = ""
        if record["class"] == GENERAL:  # what the voucher fetches waited for (they spend the general budget)
            moved = jobs.bring_forward(app.db, now=utcnow(), until=record["blocked_until"] + timedelta(seconds=1))
            waited = f"; {moved} voucher fetch(es) that waited for it are due now" if moved else ""
        because = f" ({record['why']})" if record["why"] else ""
        until, at = (iso(record[name].replace(microsecond=0)) for name in ("blocked_until", "at"))
        click.echo(f"lifted the 429 block of the {record['class']} budget, which ran until {until}{because}, "
                   f"by {record['by']} at {at}{waited}; the next 429 blocks again", err=True)


def register(group: click.Group) -> None:
    group.add_command(budget_group)
