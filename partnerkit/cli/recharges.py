"""`partnerkit recharges submit|list|show|locate|close`: recharges through partnerkit, and the local copy.

Exit codes of `submit` and `locate`: 0 when the provider's outcome is known and not FAILED
(SUCCESS, PROCESSING, REVERSED), 1 for FAILED or any error, 3 when the outcome is UNKNOWN (run
`recharges locate` later: it searches first, and sends the same key again only within minutes of
the submit or with --replay; never resubmit with a new key).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import emit_newest, emit_one, format_option
from partnerkit.cli.params import (ID, MAX_INT64, closing_options, idempotency_key, indian_mobile, invoking_user,
                                   nickname, whole_rupees)
from partnerkit.money import from_cents
from partnerkit.store import closures, recharges as store

EXIT_UNKNOWN = 3
# `amount` is the face value the partner asked for (the submit's --amount, stored with the intent; a row known only
# from the provider's list holds its face there): known when `face`, the provider's figure, is not yet (INTENT, and
# UNKNOWN: the answer never came). The table shows it before FACE; CSV adds it after its earlier columns, which keep
# their places for a script that reads them by position.
TABLE_COLUMNS = ["local_id", "id", "reference_number", "status", "mobile_number", "amount", "face", "payable",
                 "created_at"]
CSV_COLUMNS = ["local_id", "id", "reference_number", "status", "mobile_number", "face", "payable", "created_at",
               "amount"]
# JSON field names follow the document's Recharge record; partnerkit's own fields come after.
VIEW_FIELDS = ["id", "reference_number", "status", "sub_status", "mobile_number", "operator_id", "operator",
               "amount", "face", "discount", "payable", "currency", "vendor_recharge_id", "operator_txn_id",
               "failure_reason", "client_reference", "created_at", "updated_at", "local_id", "origin",
               "idempotency_key", "submitted_at", "settled_at", "last_polled_at", "next_poll_at", "escalated_at",
               "last_error"]


def recharge_view(row: dict) -> dict[str, Any]:
    """A stored row in the document's field names, money as Decimal (printed with 2 decimals)."""
    view = {
        "id": row["provider_id"], "reference_number": row["reference_number"], "status": row["status"],
        "sub_status": row["sub_status"], "mobile_number": row["mobile_number"], "operator_id": row["operator_id"],
        "operator": row["operator"], "amount": from_cents(row["amount_cents"]), "face": from_cents(row["face_cents"]),
        "discount": from_cents(row["discount_cents"]), "payable": from_cents(row["payable_cents"]),
        "currency": row["currency"], "vendor_recharge_id": row["vendor_recharge_id"],
        "operator_txn_id": row["operator_txn_id"], "failure_reason": row["failure_reason"],
        "client_reference": row["client_reference"], "created_at": row["provider_created_at"],
        "updated_at": row["updated_at"], "local_id": row["local_id"], "origin": row["origin"],
        "idempotency_key": row["idempotency_key"], "submitted_at": row["submitted_at"],
        "settled_at": row["settled_at"], "last_polled_at": row["last_polled_at"],
        "next_poll_at": row["next_poll_at"], "escalated_at": row["escalated_at"], "last_error": row["last_error"],
    }
    return {name: view[name] for name in VIEW_FIELDS}


def _columns(fmt: str) -> list[str]:
    """The columns of a recharge row in a table or CSV (JSON prints every field)."""
    return CSV_COLUMNS if fmt == "csv" else TABLE_COLUMNS


def _client(app: AppContext) -> Any:
    from partnerkit.client import PartnerClient

    config = app.config.require("api_base_url", "api_key", "api_secret")
    return PartnerClient(config, app.db, purpose="cli")


def _finish(outcome: Any, fmt: str) -> None:
    """Print the outcome row, the message on stderr, and exit with the documented code."""
    if outcome.row:
        emit_one(recharge_view(outcome.row), fmt, columns=_columns(fmt))
    click.echo(outcome.message, err=True)
    if outcome.status in store.OPEN_INTENT:  # no answer known: locate it, never submit again
        sys.exit(EXIT_UNKNOWN)
    if outcome.status == "FAILED":
        sys.exit(1)


@click.group("recharges")
def recharges_group() -> None:
    """Submit recharges (intent first, never resent blindly), list and show the local copy, locate after a timeout."""


@recharges_group.command("submit")
@click.option("--mobile", "mobile_number", required=True, callback=indian_mobile,
              help="10 digits, no +91, spaces or dashes.")
@click.option("--operator-id", type=ID, required=True,
              help="Numeric operator id, not the display name: `partnerkit catalog operators` lists them.")
@click.option("--amount", required=True, callback=whole_rupees, help="Face value in whole rupees, e.g. 199.")
@click.option("--client-reference", help="Your reference, echoed on every read (generated when omitted).")
@click.option("--circle-id", type=ID, help="Only when the operator needs a circle.")
@click.option("--postpaid", "is_postpaid", is_flag=True, default=None, help="Pay a postpaid bill (default: prepaid).")
@click.option("--special", "is_special", is_flag=True, default=None, help="Special recharge (operators that support it).")
@click.option("--nickname", callback=nickname, help="Label for the vendor: letters and digits, at most 40.")
@click.option("--force", is_flag=True,
              help="Deliberately another recharge of this number and amount: sent even while an earlier one is "
                   "unresolved here (INTENT or UNKNOWN), and past the provider's duplicate guard (force=true).")
@click.option("--idempotency-key", callback=idempotency_key,
              help="Your own key for this submit (generated when omitted), or an earlier submit's key to locate that "
                   "one instead: 8-256 visible ASCII characters, no spaces (it is sent as a header). A key refused "
                   "is an error with nothing recorded or sent.")
@format_option
@pass_app
def submit_command(app: AppContext, fmt: str, **fields: Any) -> None:
    """Submit a recharge: the intent is recorded before anything is sent.

    A recharge of a number and amount whose earlier submit is unresolved here (INTENT or UNKNOWN from the
    last 24 hours: its process was killed while sending, or its answer was lost) may already have been
    made: it is refused before anything is recorded or sent (exit 1), naming that one and `partnerkit
    recharges locate --local-id N`, which settles it. --force submits another one deliberately.

    Exit code 0 when the recharge is SUCCESS, PROCESSING or REVERSED, 1 when it FAILED or on an error,
    3 when its outcome is UNKNOWN (the provider's answer was lost and locating it found nothing: the
    message says what `partnerkit recharges locate --local-id N` will do next; never submit it again
    with a new key) or the intent stays INTENT (the answer came but the database could not store it:
    the message names the recharge, and that locate links it once the database takes writes), or the
    answer names a recharge another local row holds with other fields (the message names the row and
    each difference: not a database fault; compare both with the provider). An answer under the key that is
    another request's recharge (its number, operator, face or client_reference not this one's: the key was
    used first by another program of the account) is an error (exit 1): nothing is linked, the recharge
    stays UNKNOWN, and the message says what to do (check with `recharges locate`, then submit without
    --idempotency-key). Exit code 2, nothing recorded or sent, for a bad option or setting, and for a
    database (PARTNERKIT_DB) that does not exist: a mistyped path would record a real debit where the
    worker never looks (the message says how to create it on purpose).
    """
    from reconcile.recharges import submit

    outcome = submit(app.config, app.existing_db_to_send, _client(app), **fields)
    _finish(outcome, fmt)


@recharges_group.command("quote")
@click.option("--operator-id", type=ID, required=True,
              help="Numeric operator id, not the display name: `partnerkit catalog operators` lists them.")
@click.option("--amount", required=True, callback=whole_rupees, help="Face value in whole rupees, e.g. 199.")
@format_option
@pass_app
def quote_command(app: AppContext, fmt: str, operator_id: int, amount: Any) -> None:
    """What a recharge would cost: the provider's charge preview (face, discount_pct, discount, payable).

    Nothing is placed, recorded or held (the provider's quote is no price lock). It is a signed request, as a
    submit is: an answer shows that the provider accepts this host's requests for writes, its clock included;
    after a refusal of the request's timestamp (`partnerkit status`: check this host's clock), a quote accepted
    once the clock is put right clears it. Within the shared API budget (purpose `cli`).

    Exit code 0 with the quote; 1 when the provider refuses it (an operator it does not know, an amount it does
    not take: its message says which) or cannot be reached; 2 for a bad option or setting.
    """
    with _client(app) as client:
        quote = client.preview_recharge(operator_id, amount)
    record = {"operator_id": operator_id, "face": quote.face, "discount_pct": quote.discount_pct,
              "discount": quote.discount, "payable": quote.payable}
    emit_one(record, fmt, columns=list(record))


@recharges_group.command("list")
@click.option("--status", type=click.Choice(["INTENT", "UNKNOWN", "PROCESSING", "SUCCESS", "FAILED", "REVERSED"],
                                            case_sensitive=False),
              help="Only this status (INTENT: recorded, no answer yet; UNKNOWN: the answer was lost, see "
                   "`recharges locate`).")
@click.option("--limit", type=click.IntRange(1, 10_000_000), default=100, show_default=True,
              help="At most this many recharges, newest first (a note on stderr says so when there are more, in every format).")
@format_option
@pass_app
def list_command(app: AppContext, fmt: str, status: str | None, limit: int) -> None:
    """Recharges partnerkit knows, newest first.

    A store holds every recharge since the first day (a million a day for a busy partner): the newest
    100 are listed unless --limit says more, as `orders list` and `events list` do.

    AMOUNT is the face value asked for (the submit's --amount), known from the moment the intent is
    recorded; FACE and PAYABLE are the provider's figures, blank until its answer comes (an INTENT, and
    an UNKNOWN one, whose answer was lost, show AMOUNT only). CSV adds amount as its last
    column; JSON has had it all along."""
    views = [recharge_view(r) for r in store.list_rows(app.existing_db, status=status, limit=limit + 1)]
    emit_newest(views, limit, "recharges", _columns(fmt), fmt,
                empty_message=f"no recharges in status {status.upper()}" if status else "no recharges")


@recharges_group.command("show")
@click.argument("key")
@format_option
@pass_app
def show_command(app: AppContext, fmt: str, key: str) -> None:
    """One recharge by provider id, reference_number or local id.

    One closed by hand (`recharges close`) shows who closed it, when, why and what the provider showed then
    (closed_at, closed_by, closed_note, closed_search), and closed_state: "closed", or "overtaken" when the
    provider listed it later and its record was linked (the provider's record wins)."""
    text = key.strip()
    if text.isdigit() and not (text.isascii() and int(text) <= MAX_INT64):
        row = None  # "²" or a number past SQLite's INTEGER: no id, and store.find would raise on it
    else:
        row = store.find(app.existing_db, key)
    if row is None:
        raise click.ClickException(f"no recharge with id, reference_number or local id {key!r}")
    view = {**recharge_view(row), **closure_view(row, store.closure(app.existing_db, row))}
    emit_one(view, fmt, rows=[{"field": name, "value": value} for name, value in view.items()],
             columns=["field", "value"])


def closure_view(row: dict, closed: dict | None) -> dict[str, Any]:
    """`recharges show` only, after VIEW_FIELDS: who closed the recharge by hand (`recharges close`), when, why, what
    the provider showed then, and whether the provider listed it after all (partnerkit.store.closures.view)."""
    return closures.view(closed, still_open=row["status"] in store.OPEN_INTENT and row["provider_id"] is None)


@recharges_group.command("locate")
@click.option("--local-id", type=ID, help="A local recharge (e.g. UNKNOWN after a timeout).")
@click.option("--mobile", "mobile_number", callback=indian_mobile,
              help="Number searched when there is no local id (with --amount).")
@click.option("--amount", callback=whole_rupees, help="Face value in whole rupees; required with --mobile.")
@click.option("--client-reference", help="Match this client_reference, with --mobile.")
@click.option("--replay", is_flag=True,
              help="When the search finds nothing to link, send it again under its Idempotency-Key, however long "
                   "after the submit (by itself locate does so only within 5 minutes, and not when another recharge "
                   "of the number and amount was made since): if the first send never arrived, this PERFORMS the "
                   "recharge now. The same key never makes a second one.")
@format_option
@pass_app
def locate_command(app: AppContext, fmt: str, local_id: int | None, mobile_number: str | None,
                   amount: str | None, client_reference: str | None, replay: bool) -> None:
    """Find out what became of a submit whose answer was lost: search the provider first.

    Searches by number and client_reference, then by face and time, and links what it finds. Only if
    the provider shows no such recharge does it send the same Idempotency-Key again: by itself within
    5 minutes of the submit (the customer is still waiting: the document's locate procedure starts with
    that send), later only with --replay, because if the first send never arrived that performs the
    recharge now. The same key never makes a second one. Not by itself while the `recharges submit` that
    recorded an INTENT still runs (it may be waiting for the budget or its answer, and stores that answer
    itself): the message says so; run locate again once that command has ended. Never for an intent
    whose earlier answer named a recharge id another local recharge already holds (the provider would
    answer the same id), nor for one whose key answered another request's recharge (the same answer
    would come back; a replay that meets such an answer is an error, exit 1, and links nothing): it is
    only searched, --replay is refused (exit 1), and the message says what to do instead (as
    `partnerkit status` does).

    Exit code 0 when the recharge is SUCCESS, PROCESSING or REVERSED, 1 when it FAILED or on an error,
    3 when its outcome is UNKNOWN still (the message says why and what to do). --mobile without a
    local intent only lists what the provider has, with exit code 0 (1 if the provider could not be
    read in full). An intent whose stored key the client refuses to send (left by a submit from
    before keys were checked first) was never sent: it is removed, and the error says so (exit 1).
    """
    from reconcile.locate import locate

    if local_id is None and not (mobile_number and amount):
        raise click.UsageError("give --local-id N, or --mobile M --amount A [--client-reference R]")
    if local_id is not None and (mobile_number or amount or client_reference):
        raise click.UsageError("--local-id cannot be combined with --mobile/--amount/--client-reference")
    if replay and local_id is None:
        raise click.UsageError("--replay needs --local-id N: only a local intent has a key to send again")
    # A local id names an intent in the worker's database: a mistyped PARTNERKIT_DB is named, not
    # answered with "no local recharge" from a new empty one.
    db = app.existing_db if local_id is not None else app.db
    outcome = locate(app.config, db, _client(app), local_id=local_id, mobile_number=mobile_number,
                     amount=amount, client_reference=client_reference, replay=replay)
    if outcome.status == "NOT_RECORDED":
        # Nothing local to show: the provider's matching recharges (a script reading JSON gets them too).
        found = [{"id": r.id, "reference_number": r.reference_number, "status": r.status, "face": r.face,
                  "client_reference": r.client_reference, "created_at": r.created_at} for r in outcome.matches]
        if fmt != "table":
            emit_one({"status": "NOT_RECORDED", "local_id": None, "mobile_number": mobile_number, "matches": found},
                     fmt, rows=found, columns=["id", "reference_number", "status", "face", "client_reference",
                                               "created_at"])
        click.echo(outcome.message, err=True)
        if outcome.unchecked:
            sys.exit(1)  # "0 matches" would be a guess: the provider did not answer every lookup
        return
    _finish(outcome, fmt)


def register(group: click.Group) -> None:
    group.add_command(recharges_group)


@recharges_group.command("close")
@click.argument("local_id", metavar="LOCAL_ID", type=ID)
@closing_options("the recharge", "Close without searching the provider first: only when support confirmed it was "
                 "never made (say so in --note), or the provider's list cannot show it (more recharges of the number "
                 "than locate reads).")
@format_option
@pass_app
def close_command(app: AppContext, fmt: str, local_id: int, note: str, by: str | None, without_search: bool) -> None:
    """Close a recharge whose outcome is not known, once checked with the provider: it was never made.

    Only an intent with no answer (UNKNOWN; INTENT whose `recharges submit` no longer runs). First the same
    search `recharges locate` runs (by number and client_reference, then face and time; its key is never sent
    again): if the provider shows the recharge, it is linked instead, not closed (exit 1). A recharge with a
    provider id (SUCCESS, PROCESSING, FAILED, REVERSED) is the provider's record and is never closed (exit 1);
    so is an INTENT whose submit still runs. If the provider cannot be read in full, or shows several recharges
    that could be this one, nothing is written (exit 1).

    The row is kept, still UNKNOWN (or INTENT), with who closed it, when and the note (`recharges show`):
    `partnerkit status` no longer names it, a new submit of the same number and amount is no longer held back,
    and `recharges locate` only searches it. If the provider lists it later, the sync links it (its record
    wins; `recharges show` says the closure was overtaken). The nightly match still reports it as
    `unknown_to_provider` (recorded here, not at the provider) for finance to resolve. Closing one already
    closed changes nothing (exit 0).
    """
    from reconcile.locate import close

    db = app.existing_db
    outcome = close(app.config, db, _client(app) if not without_search else None, local_id, note=note,
                    by=by or invoking_user(), without_search=without_search)
    view = {**recharge_view(outcome.row), **closure_view(outcome.row, store.closure(db, outcome.row))}
    emit_one(view, fmt, rows=[{"field": name, "value": value} for name, value in view.items()],
             columns=["field", "value"])
    if not outcome.closed:
        raise click.ClickException(outcome.message)
    click.echo(outcome.message, err=True)
