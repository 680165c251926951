"""`partnerkit transactions list|show`: the wallet transactions the syncs stored, for finance reading a drift.

Read only: the local store as the syncs left it (no provider call), through `app.existing_db` like the
other commands that read what the worker recorded. Money is the stored integer paise as a Decimal (a
2-decimal string in JSON), signed as stored: a debit is negative. The provider's record is shown as
`reconcile.ledger_fast.record_json` rebuilds it: its canonical JSON (keys sorted; a number with decimals
as the string of its exact digits, the one form partnerkit keeps of it).
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import counted, emit, emit_one, format_option
from partnerkit.cli.params import ID, past_utc_day
from partnerkit.money import from_cents
from partnerkit.store import ledger, orders, quarantine
from partnerkit.timeutil import parse_ts

# Names as DESIGN.md's alias table reads the provider's record, then partnerkit's own.
FIELDS = ["id", "type", "amount", "currency", "created_at", "balance_after", "reference_number", "recharge_id",
          "order_id", "synced_at"]
TABLE_COLUMNS = FIELDS[:-1]
QUARANTINE_COLUMNS = ["key", "id", "day", "reason", "first_seen_at", "last_seen_at", "record"]
QUARANTINE_TABLE_COLUMNS = ["id", "day", "reason", "last_seen_at"]
# The transaction types partnerkit names (the document shows no transaction fields; the sandbox's ledger writes
# these, docs/sandbox.md): a refund is RECHARGE_REFUND or ORDER_REFUND, never REFUND. The mapping stores any
# type the provider gives, upper-cased, so `--type` also takes one of those where a stored transaction has it.
KNOWN_TYPES = ("RECHARGE", "RECHARGE_REFUND", "ORDER", "ORDER_REFUND", "TOPUP", "ADJUSTMENT")


def _text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: a filter's text, stripped (the mapping stores it stripped); never empty."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("must not be empty")
    return value.strip()


def _type(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: a transaction type in any case (the mapping stores it upper-cased)."""
    text = _text(ctx, param, value)
    return None if text is None else text.upper()


def _row(stored: dict) -> dict[str, Any]:
    """A stored transaction in FIELDS, money from integer paise (signed as stored)."""
    return {"id": stored["id"], "type": stored["type"], "amount": from_cents(stored["amount_cents"]),
            "currency": stored["currency"], "created_at": stored["created_at"],
            "balance_after": from_cents(stored["balance_after_cents"]), "reference_number": stored["reference_number"],
            "recharge_id": stored["recharge_id"], "order_id": stored["order_id"], "synced_at": stored["synced_at"]}


def _record(text: str | None) -> Any:
    """The provider's record from its canonical JSON text, for JSON output (its text when it does not parse).

    A number with decimals is already a string of its exact digits there; any other is kept as its text,
    never a float, so nothing is rounded on the way out."""
    if not text:
        return None
    try:
        return json.loads(text, parse_float=str, parse_constant=str)
    except ValueError:
        return text


def _held_row(entry: dict) -> dict[str, Any]:
    key = entry["key"]
    return {"key": key, "id": quarantine.id_in_key("transaction", key), "day": entry["day"],
            "reason": entry["reason"], "first_seen_at": entry["first_seen_at"], "last_seen_at": entry["last_seen_at"],
            "record": _record(entry["raw"])}


def _check_day_read(db: Any, day: date, held_that_day: int) -> None:
    """Say how far the day was read: a day no sync read in full is never shown as an empty list.

    Nothing stored for such a day is an error (exit 1): an empty list would read as "no transactions".
    What a read stopped part-way stored is listed, with a warning; a day last read in full before it
    ended (today, or read during the day) lists the entries up to that read, with a note."""
    synced = ledger.coverage(db, "transactions", day.isoformat())
    if synced is None:
        stored = ledger.count_transactions(db, day.isoformat(), (day + timedelta(days=1)).isoformat())
        if not stored and not held_that_day:
            raise click.ClickException(
                f"no sync has read the wallet transactions of {day}: the store holds nothing of that day, which "
                f"says nothing about the provider's ledger; `partnerkit reconcile --date {day}` reads it")
        click.echo(f"warning: no sync has read the wallet transactions of {day} in full (a read the budget or the "
                   f"provider stopped part-way reads on at its next run): these are the ones stored so far, not "
                   f"necessarily all of the day's; `partnerkit reconcile --date {day}` reads it now", err=True)
        return
    ended = datetime.combine(day + timedelta(days=1), time(0), tzinfo=timezone.utc)
    if parse_ts(synced, field="synced_at") < ended:
        click.echo(f"note: the latest complete read of {day} began at {synced} (partnerkit's clock), before the day "
                   "ended: transactions made after that may not be stored yet (the worker's 15-minute sync reads on)",
                   err=True)


@click.group("transactions")
def transactions_group() -> None:
    """Wallet transactions the syncs stored (read only): what lies behind a drift, without opening SQLite."""


@transactions_group.command("list")
@click.option("--date", "day", callback=past_utc_day,
              help="The UTC day, YYYY-MM-DD: transactions the provider dated that day. Required unless --reference "
                   "or --order is given (those search every stored day: a refund can come days later).")
@click.option("--type", "kind", callback=_type,
              help=f"Only this transaction type, in any case: {', '.join(KNOWN_TYPES)}, or another the provider "
                   "gives (a type none of the transactions listed has, and none of these, is a usage error).")
@click.option("--reference", callback=_text,
              help="Only those paying for the recharge with this reference_number (a recharge drift's reference), "
                   "or for the order with this reference_code, linked as the matcher links them: by recharge_id or "
                   "reference_number; by order_id, or named by the order's transaction_id.")
@click.option("--order", "order_id", type=ID,
              help="Only those paying for this order (an order drift's reference): carrying its order_id, or named "
                   "by its transaction_id.")
@click.option("--quarantined", is_flag=True,
              help="Instead, the day's records held in the quarantine, oldest first: those the alias mapping "
                   "refused and those the provider no longer lists (withdrawn, out of the day's figures), with the "
                   "reason and the record. Not with --type, --reference or --order.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="At most this many, oldest first; when there are more, stderr says how many (in every format).")
@format_option
@pass_app
def list_command(app: AppContext, day: date | None, kind: str | None, reference: str | None, order_id: int | None,
                 quarantined: bool, limit: int, fmt: str) -> None:
    """Stored wallet transactions, oldest first (the balance chain's order); amounts signed as stored, a debit negative.

    A day no sync has read is refused (exit 1) rather than shown as an empty list; the transactions a read
    stopped part-way stored are listed with a warning, and a day last read before it ended says from when
    the list is. Records of the day held in the quarantine are counted on stderr. JSON and CSV add synced_at:
    when the read that last listed the transaction began. `transactions show ID` gives one with the
    provider's record.
    """
    if quarantined and (kind or reference or order_id is not None):
        raise click.UsageError("--quarantined cannot be combined with --type, --reference or --order: it lists the "
                               "records that could not be read into those fields, or that the provider withdrew")
    if day is None and reference is None and order_id is None:
        raise click.UsageError("give --date YYYY-MM-DD, or --reference / --order (which search every stored day)")
    db = app.existing_db
    held = quarantine.held(db, "transaction", day=day.isoformat()) if day is not None else []
    start = end = None
    if day is not None:
        start, end = day.isoformat(), (day + timedelta(days=1)).isoformat()
    stored: list[dict] = []
    total = 0
    if not quarantined:
        stored, total = ledger.list_transactions(db, start=start, end=end, kind=kind, reference=reference,
                                                 order_id=order_id, limit=limit)
        if kind is not None and kind not in KNOWN_TYPES and not total:
            _unknown_type(kind)  # a usage error comes first and alone: before any note or warning about the day
    if day is not None:
        _check_day_read(db, day, sum(entry["day"] == day.isoformat() for entry in held))
    if quarantined:
        rows = [_held_row(entry) for entry in sorted(held, key=lambda e: (e["first_seen_at"], e["key"]))]
        shown = rows[:limit]
        emit(shown, QUARANTINE_TABLE_COLUMNS if fmt == "table" else QUARANTINE_COLUMNS, fmt,
             empty_message=f"no transaction record of {day} is quarantined")
        _say_cut(len(shown), len(rows), "quarantined records")
        return
    filters = ([f"of type {kind}"] * bool(kind) + [f"paying for reference {reference}"] * bool(reference)
               + [f"paying for order {order_id}"] * (order_id is not None))
    where = f"on {day}" if day is not None else "on any stored day"
    emit([_row(r) for r in stored], TABLE_COLUMNS if fmt == "table" else FIELDS, fmt,
         empty_message=f"no transactions {where}{' ' + ' and '.join(filters) if filters else ''}")
    _say_cut(len(stored), total, "transactions")
    if not stored and reference is not None and reference.isdigit() and orders.get(db, int(reference)):
        # An order drift's reference is the order's id, and finance copies it here.
        click.echo(f"{reference} is an order's id (an order drift's reference): "
                   f"`partnerkit transactions list --order {reference}`", err=True)
    if held:
        click.echo(f"note: {counted(len(held), 'transaction record')} of {day} "
                   f"{'is' if len(held) == 1 else 'are'} held in the quarantine (refused by the mapping, or "
                   f"withdrawn): `partnerkit transactions list --date {day} --quarantined`", err=True)


def _unknown_type(kind: str) -> None:
    """A usage error (exit 2, with the usage line): `--type` names no type partnerkit knows, and no transaction
    listed has it, so the filter can never match (a mistyped REFUND printed "no transactions" and exit 0)."""
    ctx = click.get_current_context()
    param = next(p for p in ctx.command.params if p.name == "kind")
    raise click.BadParameter(f"{kind!r} is not a transaction type: one of {', '.join(KNOWN_TYPES)} (any case), or "
                             "another the provider gives where a stored transaction has it (none listed here does)",
                             ctx=ctx, param=param)


def _say_cut(shown: int, total: int, noun: str) -> None:
    """On stderr, in every format: a list cut at --limit must not read as all there is."""
    if total > shown:
        first = "the first" if shown == 1 else f"the first {shown:,}"
        click.echo(f"{first} of {total:,} {noun} {'is' if shown == 1 else 'are'} shown (oldest first); --limit N "
                   "shows more", err=True)


@transactions_group.command("show")
@click.argument("ident", metavar="ID")
@format_option
@pass_app
def show_command(app: AppContext, ident: str, fmt: str) -> None:
    """One wallet transaction by id: the stored row's fields and the provider's record as received.

    ID is the transaction id a drift's reference or detail names. The record is the provider's, as
    received: its canonical JSON (keys sorted; a number with decimals as the string of its exact digits).
    A transaction held in the quarantine shows the reason: withdrawn by the provider, or never read
    correctly, it has no stored row and is in none of the figures (state `quarantined`, its fields empty);
    stored but held, its latest copy could not be read and the last readable one stands (state `stored`).
    An id neither stored nor held: exit 1.
    """
    from reconcile.ledger_fast import record_json

    text = ident.strip()
    db = app.existing_db
    stored = ledger.get_transaction(db, text) if text else None
    held = quarantine.held_entry(db, "transaction", text) if text else None
    if stored is None and held is None:
        raise click.ClickException(f"no transaction with id {ident!r} is stored or quarantined (the syncs store what "
                                   "the provider lists: `partnerkit transactions list --date D` lists a day)")
    if stored is not None:
        row: dict[str, Any] = {**_row(stored), "state": "stored"}
        record = record_json(tuple(stored[c] for c in ledger.ROW_COLUMNS), stored["shape"], stored["raw"])
    else:
        row = {**{name: None for name in FIELDS}, "id": text, "state": "quarantined"}
        record = held["raw"]  # type: ignore[index]
    row["quarantine_reason"] = None if held is None else held["reason"]
    row["quarantined_since"] = None if held is None else held["first_seen_at"]
    if fmt == "json":
        emit_one({**row, "record": _record(record)}, fmt)
        return
    row["record"] = record
    emit_one(row, fmt, rows=[{"field": k, "value": v} for k, v in row.items()], columns=["field", "value"])


def register(group: click.Group) -> None:
    group.add_command(transactions_group)
