"""`partnerkit status`: the operator's one-glance view."""

from __future__ import annotations

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import emit_one, format_option


@click.command("status", short_help="What needs a person now, and the facts behind it: webhooks, recharges, orders,"
                                   " budget, reports, drifts, the receiver and the worker, disk space (--check for"
                                   " monitoring).")
@format_option
@click.option("--check", is_flag=True,
              help="Exit 1 when anything needs attention (the same figures are printed), for a monitor or cron; "
                   "drifts waiting on finance (`for_finance`) are not attention.")
@pass_app
def status_command(app: AppContext, fmt: str, check: bool) -> None:
    """Last webhook, deliveries the receiver refused in the last hour (by reason), voucher backlog and parked
    jobs, PROCESSING recharges, recharges and orders whose answer was lost (naming at once a submit whose
    process was killed while sending), budget, the provider failing every call (or refusing the key, or this
    host's clock), last report (a nightly run that failed, named at once, and a report overdue two hours past
    PARTNERKIT_DUE_HOUR_UTC; a PARTNERKIT_REPORT_DIR that cannot take the files, before the night), open drifts (finance's queue: `for_finance` lines, not attention), the
    receiver's gunicorn master and the worker (and whether their processes still run: one killed on this host is
    named), the free space on PARTNERKIT_DB's filesystem, and what needs a person now.

    Exit codes: 0; 1 with --check when the `attention` list is not empty (pending and escalated drifts alone
    leave it empty: finance reads them in the night's report), and 1 when the database cannot be opened; 2 for a
    bad option or setting.
    """
    from partnerkit.status import collect

    status = collect(app.config, app.existing_db)
    rows = [{"item": key, "value": value} for key, value in status.items() if key not in ("attention", "for_finance")]
    rows += [{"item": "for_finance", "value": line} for line in status["for_finance"]]
    rows += [{"item": "attention", "value": line} for line in status["attention"] or ["nothing needs attention"]]
    emit_one(status, fmt, rows=rows, columns=["item", "value"])
    if check and status["attention"]:
        raise SystemExit(1)


def register(group: click.Group) -> None:
    group.add_command(status_command)
