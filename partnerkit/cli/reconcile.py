"""`partnerkit reconcile`, `report` and `drifts`: the nightly reconciliation and finance's workflow."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from typing import Callable

import click

from partnerkit.cli.context import AppContext, created_line, pass_app
from partnerkit.cli.output import Progress, counted, emit, emit_one, format_option
from partnerkit.cli.params import invoking_user, not_blank, output_file, past_utc_day, utc_day
from partnerkit.csvcell import spreadsheet_id, spreadsheet_ids
from partnerkit.store import drifts as drift_store
from partnerkit.store import matching as matching_store
from partnerkit.store import reports as report_store
from partnerkit.timeutil import utcnow
from partnerkit.walks import stopped_by_signals

# `drifts list`: JSON and CSV carry every column (scripts read the first eleven: new ones go after them);
# the table keeps to one line a drift, with when it was first detected.
# `unit`, added after them: the currency of expected and actual, or "vouchers" for a count (as the report's CSV has
# it); then `transaction_ids`, the wallet transactions linked to the drift's recharge or order (as in the report).
DRIFT_COLUMNS = ("id", "kind", "subject", "reference", "expected", "actual", "currency", "report_date",
                 "resolution", "resolution_by", "resolution_note", "detected_at", "resolution_at", "detail", "unit",
                 "transaction_ids")
DRIFT_TABLE_COLUMNS = DRIFT_COLUMNS[:12]


def _in_progress(day: date) -> None:
    """Say so when the day is today: its report is partial until the nightly run reports it again."""
    if day == utcnow().date():
        click.echo(f"note: {day} is not over yet (UTC); the nightly run reports the whole day after it ends",
                   err=True)


def _client(app: AppContext):
    from partnerkit.client import PartnerClient

    app.config.require("api_base_url", "api_key", "api_secret")
    return PartnerClient(app.config, app.db, purpose="reconcile")


def _reading(progress: Progress) -> Callable[[date, date], None]:
    """Say on stderr which days the sync reads, and label its progress lines with them."""
    def say(first: date, through: date) -> None:
        today = utcnow().date()
        if through > first:
            progress.label = f"{first}..{through}"
            so_far = f" ({through} so far)" if through == today else ""
            click.echo(f"{first}: syncing {first}..{through} from the provider{so_far}: the day after too, for a "
                       "credit back or a debit dated after midnight", err=True)
        elif first < today:
            click.echo(f"{first}: syncing {first} from the provider ({first + timedelta(days=1)}, which its match "
                       "reads too, is stored: read in full after it ended)", err=True)
        else:
            click.echo(f"{first}: syncing {first} so far from the provider", err=True)
    return say


@click.command("reconcile")
@click.option("--date", "day", required=True, callback=past_utc_day, help="The UTC day, YYYY-MM-DD.")
@pass_app
def reconcile_command(app: AppContext, day: date) -> None:
    """Sync one UTC day and the day after it from the provider, match the day, and write its report.

    The day after counts because money does not stop at midnight: a recharge that fails after it is
    credited back the next day, and the provider may stamp a debit just before the midnight its recharge
    is created after. Never past today, and not read again when the database holds it read in full after
    it ended (the nightly run reads it so). Before the sync starts, a line on stderr names the days it reads.

    A busy day is minutes of pages: how far the sync has read is printed on stderr every few seconds.
    Ctrl-C ends the sync after the page it is reading, what it read stored and its place kept (exit 1, one
    line naming the page): run again within 6 hours, it reads on from there. A second Ctrl-C stops at once.
    A database that does not exist yet is created, with a one-line warning on stderr (the sync fills it
    from the provider; if it was meant to be the worker's, PARTNERKIT_DB is mistyped).
    """
    from reconcile.jobs import reconcile_day

    client = _client(app)
    if app.db_created:
        # Allowed (the sync reads the day from the provider first), but a mistyped PARTNERKIT_DB lands
        # here too, and then every recharge the provider lists is reported as unknown_to_partner.
        said = created_line(app.config.db_path, origin=app.db_origin(), made=app.db_dirs_made)
        click.echo(f"warning: {said}", err=True)
    progress = Progress(day)
    with stopped_by_signals(lambda line: click.echo(line, err=True)):  # Ctrl-C: WalkStopped, one line
        report = reconcile_day(app.config, app.db, client, day, progress=progress, reading=_reading(progress))
    s = report["summary"]
    click.echo(f"{report['date']}: {counted(s['recharges_total'], 'recharge')}, "
               f"{counted(s['orders_total'], 'order')}, {counted(s['transactions_total'], 'transaction')}; "
               f"{s['matched']:,} matched, {s['drifted']:,} drifted, "
               f"{s['unmatched']:,} unmatched, {counted(len(report['drifts']), 'drift')}; "
               f"report in {app.config.report_dir}", err=True)
    _nothing_recorded(app, report)
    _in_progress(day)


def _nothing_recorded(app: AppContext, report: dict) -> None:
    """Say so when the day holds nothing at all: an empty day is legitimate (exit 0, its report kept), but a
    mistyped date (1999 for 2026) reads the same, and its report is easy to take for a quiet day's."""
    s = report["summary"]
    if any(s.get(key) for key in ("recharges_total", "orders_total", "transactions_total", "quarantined",
                                  "drifted")) or report["drifts"]:
        return
    first = report_store.first_activity_day(app.db)
    since = f" (the first day the store holds any is {first})" if first is not None and first > report["date"] else ""
    click.echo(f"nothing was recorded on {report['date']} (no recharge, transaction or order): was the date "
               f"right?{since}", err=True)


@click.command("report")
@click.option("--date", "day", required=True, callback=past_utc_day, help="The UTC day, YYYY-MM-DD.")
@click.option("--format", "fmt_name", type=click.Choice(("json", "csv", "html")), default="json", show_default=True,
              help="json (the whole report), csv (the drift table) or html (one self-contained page).")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), callback=output_file,
              help="Write to FILE instead of stdout (the same text, UTF-8), in a directory that exists.")
@pass_app
def report_command(app: AppContext, day: date, fmt_name: str, output: Path | None) -> None:
    """The day's report with current resolutions.

    The stored report; for a day without one, the day is matched from the local store (no sync) and,
    besides this output, the command writes its three files to PARTNERKIT_REPORT_DIR (a directory that
    cannot be written is a warning: the output asked for is still given). Files of that day already there
    which hold another report (the night's, when the database was restored from an older backup) are not
    overwritten: they are kept as NAME.replaced-TIME-not-in-database, with a warning, as the nightly run
    keeps them. A day no sync has read in full is refused (exit 1, nothing written): `partnerkit reconcile
    --date D` syncs it first.
    """
    from partnerkit.cli import os_error_line
    from reconcile.jobs import current_report, day_synced, report_day, write_atomic, write_report_files
    from reconcile.report import render

    report = current_report(app.existing_db, day)
    if report is None and not day_synced(app.db, day):
        # Matched from a store that never read the day, the files would say "every recharge, order and
        # transaction of the day reconciles", beside the real nightly ones, and stay there.
        raise click.ClickException(f"no stored report for {day}, and no sync has read that day in full: the local "
                                   f"store cannot vouch for it; `partnerkit reconcile --date {day}` syncs and "
                                   "reports it (nothing written)")
    if report is None:
        click.echo(f"no stored report for {day}; matching it from the local store (no sync; "
                   f"`partnerkit reconcile --date {day}` syncs and stores it)", err=True)
        report = report_day(app.config, app.db, day, save=False, files=False)
        try:
            # No stored report of the day, so files of it already there are another report's (the night's,
            # of a database restored from an older backup): kept aside as the nightly run keeps them.
            write_report_files(app.config.report_dir, report, unrecorded=True,
                               warn=lambda message: click.echo(f"warning: {message}", err=True))
        except OSError as exc:  # the files are a side effect; what was asked for is the output below
            click.echo(f"warning: the report files were not written to PARTNERKIT_REPORT_DIR "
                       f"({os_error_line(exc)})", err=True)
    _in_progress(day)
    if output is None:
        click.echo(render(report, fmt_name), nl=False)
    else:
        try:
            write_atomic(output, render(report, fmt_name))  # the same text as the report's own file
        except OSError as exc:
            raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from exc
        click.echo(f"wrote {output}", err=True)


@click.group("drifts")
def drifts_group() -> None:
    """Finance's workflow: list drifts, resolve or escalate them (every change is audited)."""


def _row(d: drift_store.Drift, fmt: str, transaction_ids: list[str] | None) -> dict:
    row = {c: getattr(d, c) for c in DRIFT_COLUMNS[:-2]}
    row["unit"] = "vouchers" if d.measure == "count" else d.currency
    row["transaction_ids"] = transaction_ids or []
    if d.measure == "count":  # voucher counts print as whole numbers, money as 2 decimals
        row["expected"], row["actual"] = (None if v is None else str(v) for v in (d.expected, d.actual))
        if fmt == "table":  # the table has no unit column: "3 vouchers", never a count beside a currency
            row["expected"], row["actual"] = (v and f"{v} vouchers" for v in (row["expected"], row["actual"]))
    if fmt == "csv":  # a reference a spreadsheet would turn into another number stays as written
        row["reference"] = spreadsheet_id(d.reference)
        row["transaction_ids"] = spreadsheet_ids(row["transaction_ids"])  # as the report's CSV writes them
    return row


@drifts_group.command("list")
@click.option("--kind", type=click.Choice(drift_store.KINDS, case_sensitive=False), help="Only this drift kind.")
@click.option("--resolution", type=click.Choice(drift_store.RESOLUTIONS, case_sensitive=False),
              help="Only this resolution.")
@click.option("--date", "day", callback=utc_day,
              help="Only this report day (UTC), YYYY-MM-DD.")
@format_option
@pass_app
def drifts_list(app: AppContext, kind: str | None, resolution: str | None, day: date | None, fmt: str) -> None:
    """List drifts, newest day first.

    JSON and CSV give every column: id, kind, subject, reference, expected, actual, currency, report_date,
    resolution, resolution_by, resolution_note, then detected_at, resolution_at, detail, unit (the
    currency, or "vouchers" for a voucher count) and transaction_ids (the wallet transactions linked to the
    drift's recharge or order, oldest first: a JSON array, in CSV one cell separated by spaces); the table the
    same up to detected_at, a count as "3 vouchers" (`drifts show ID` gives one drift whole, `drifts history ID`
    every change, with who and when).
    """
    filters = {"kind": kind, "resolution": resolution, "report_date": None if day is None else day.isoformat()}
    db = app.existing_db
    found = drift_store.list_drifts(db, **filters)
    linked = matching_store.drift_transactions(db, **filters) if fmt != "table" else {}
    emit([_row(d, fmt, linked.get(d.id)) for d in found], DRIFT_TABLE_COLUMNS if fmt == "table" else DRIFT_COLUMNS,
         fmt, empty_message="no drifts match")


@drifts_group.command("show")
@click.argument("ident", metavar="ID")
@format_option
@pass_app
def drifts_show(app: AppContext, ident: str, fmt: str) -> None:
    """One drift by id, every column of `drifts list --format json`: its transaction_ids are the wallet
    transactions linked to its recharge or order, oldest first (`transactions show TID` gives each one;
    `drifts history ID` the drift's changes). An unknown id: exit 1."""
    db = app.existing_db
    drift = drift_store.get_drift(db, ident)
    row = _row(drift, fmt, matching_store.drift_transactions(db, ids=[drift.id]).get(drift.id))
    if fmt == "json":
        emit_one(row, fmt)
        return
    emit_one(row, fmt, rows=[{"field": c, "value": row[c]} for c in DRIFT_COLUMNS], columns=["field", "value"])


def _change(app: AppContext, ident: str, resolution: str, note: str, by: str | None) -> None:
    drift = drift_store.set_resolution(app.existing_db, ident, resolution, note=note, by=by or invoking_user(),
                                       at=utcnow().replace(microsecond=0))
    click.echo(f"{drift.id} {drift.kind} {drift.reference}: {drift.resolution} by {drift.resolution_by}", err=True)


_note = click.option("--note", required=True, callback=not_blank, help="Why (kept in the audit trail).")
_by = click.option("--by", callback=not_blank,
                   help="Who (default: the user who ran sudo, SUDO_USER, when set, e.g. by `sudo -u partnerkit "
                        "partnerkit drifts ...`; else the login name).")


@drifts_group.command("resolve")
@click.argument("ident", metavar="ID")
@_note
@_by
@pass_app
def drifts_resolve(app: AppContext, ident: str, note: str, by: str | None) -> None:
    """Mark a drift resolved."""
    _change(app, ident, "resolved", note, by)


@drifts_group.command("escalate")
@click.argument("ident", metavar="ID")
@_note
@_by
@pass_app
def drifts_escalate(app: AppContext, ident: str, note: str, by: str | None) -> None:
    """Mark a drift escalated (to the provider's support, with its reference)."""
    _change(app, ident, "escalated", note, by)


@drifts_group.command("history")
@click.argument("ident", metavar="ID")
@format_option
@pass_app
def drifts_history(app: AppContext, ident: str, fmt: str) -> None:
    """The audit trail of one drift, oldest first."""
    drift_store.get_drift(app.existing_db, ident)
    emit(drift_store.audit_trail(app.db, ident), ("seq", "action", "resolution", "note", "by", "at"), fmt)


def register(group: click.Group) -> None:
    group.add_command(reconcile_command)
    group.add_command(report_command)
    group.add_command(drifts_group)
