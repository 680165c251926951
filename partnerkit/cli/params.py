"""Parameter types and checks shared by the commands, so bad input is a usage error (exit 2).

They keep the help text unchanged (an id still shows as INTEGER) and only narrow what is accepted:
an id must fit SQLite's 64-bit INTEGER, a UTC day must be one the kit can compute with (and, for
the commands that read what happened, one that has begun).
"""

from __future__ import annotations

import getpass
import os
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import click

from partnerkit.money import MoneyError, to_decimal
from partnerkit.timeutil import parse_day, parse_ts, utcnow

MAX_INT64 = 2 ** 63 - 1
FIRST_DAY = date(1970, 1, 1)
NICKNAME_MAX = 40  # Limits: nickname, alphanumeric, max 40 characters
LAST_DAY = date(2999, 12, 31)  # far enough; date.max + 1 day would overflow in the report windows


class IdType(click.types.IntParamType):
    """A positive integer id that fits SQLite's INTEGER (shown as INTEGER in --help)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = super().convert(value, param, ctx)
        if not 1 <= number <= MAX_INT64:
            self.fail(f"{number} is not an id (a whole number from 1 to {MAX_INT64})", param, ctx)
        return number


ID = IdType()


def at_most_int64(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """Callback for counts with no upper bound of their own: past 2**63 - 1 SQLite cannot take them."""
    if value is not None and value > MAX_INT64:
        raise click.BadParameter(f"{value} is too large (at most {MAX_INT64})")
    return value


def utc_day(ctx: click.Context, param: click.Parameter, value: str | None) -> date | None:
    """Callback: YYYY-MM-DD between 1970-01-01 and 2999-12-31, as a date."""
    if value is None:
        return None
    try:
        day = parse_day(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise click.BadParameter(f"{day} is out of range ({FIRST_DAY} to {LAST_DAY})")
    return day


def past_utc_day(ctx: click.Context, param: click.Parameter, value: str | None) -> date | None:
    """Callback: a UTC day (as utc_day) that has begun; a future day has nothing to reconcile or list yet."""
    day = utc_day(ctx, param, value)
    today = utcnow().date()
    if day is not None and day > today:
        raise click.BadParameter(f"{day} is in the future (today is {today} UTC)")
    return day


def moment(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """Callback: an ISO 8601 time (UTC when it has no offset), as an aware datetime."""
    if value is None:
        return None
    field = param.opts[0] if param.opts else "time"
    try:
        return parse_ts(value, field=field)
    except ValueError as exc:  # click prefixes the option's name itself
        raise click.BadParameter(str(exc).removeprefix(f"{field}: ")) from None


def _typed(param: click.Parameter, value: str, *, strict: bool) -> Decimal:
    field = param.opts[0] if param.opts else "amount"
    try:
        return to_decimal(value, field=field, strict=strict, typed=True)
    except MoneyError as exc:  # click prefixes the option's name itself
        raise click.BadParameter(str(exc).removeprefix(f"{field}: ")) from None


def typed_amount(ctx: click.Context, param: click.Parameter, value: str | None) -> Decimal | None:
    """Callback: an amount a person typed (digits, at most 2 decimals), as a Decimal; never rounded."""
    return None if value is None else _typed(param, value, strict=True)


def positive_amount(ctx: click.Context, param: click.Parameter, value: str | None) -> Decimal | None:
    """Callback: a typed amount greater than zero (an order's denomination: "Greater than 0.00")."""
    amount = typed_amount(ctx, param, value)
    if amount is not None and amount <= 0:
        raise click.BadParameter(f"{value!r} is not greater than 0")
    return amount


def idempotency_key(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: an Idempotency-Key as the client sends it (Limits: 8 to 256 characters; a header, so visible
    ASCII), refused before anything is recorded or sent; None when not given (the command generates one)."""
    if value is None:
        return None
    from partnerkit.client import check_idempotency_key

    try:
        return check_idempotency_key(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def some_text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: a text that must not be blank, kept as typed (an order's ref is sent as given)."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty")
    return value


def whole_rupees(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: a recharge's face value, refused before any call where the provider would refuse it ("amount
    must be a whole rupee greater than zero": a fraction is a 400, never rounded), by the submit's own rule
    (reconcile.recharges.validate_amount). Kept as typed (the submit reads it again)."""
    if value is None:
        return None
    from reconcile.recharges import RechargeInputError, validate_amount

    try:
        validate_amount(_typed(param, value, strict=False))
    except RechargeInputError:
        raise click.BadParameter(f"{value!r} is not a whole number of rupees greater than zero (e.g. 199)") from None
    return value


def indian_mobile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: a mobile number as the provider takes it ("Digits only, 10 digits for India, no country
    prefix, spaces or dashes"), refused before any call by the submit's own rule
    (reconcile.recharges.validate_mobile)."""
    if value is None:
        return None
    from reconcile.recharges import RechargeInputError, validate_mobile

    try:
        return validate_mobile(value)
    except RechargeInputError:
        raise click.BadParameter(f"{value!r} is not a mobile number: 10 digits, no +91, spaces or dashes") from None


def nickname(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: a recharge's nickname as the provider takes it (Limits: "Alphanumeric, max 40 characters")."""
    if value is not None and not (value.isascii() and value.isalnum() and len(value) <= NICKNAME_MAX):
        raise click.BadParameter(f"must be letters and digits only, at most {NICKNAME_MAX} characters")
    return value


def output_file(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Callback for a file to write (`backup DESTINATION`, `report --output FILE`): refuse at once a path whose
    directory does not exist, or whose nearest existing ancestor is not a directory. Nothing is created: a typo
    in a directory's name (`/backups/partnerkti/x.db`) would otherwise make new directories and put the file
    where nobody looks for it."""
    if value is None:
        return None
    folder = Path(value).absolute().parent
    if folder.is_dir():
        return value
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise click.BadParameter(f"{str(parent)!r} is not a directory")
            break
    raise click.BadParameter(f"the directory {str(folder)!r} does not exist: create it first (nothing was written)")


def invoking_user() -> str:
    """Who ran the command, for --by: the user who ran sudo (SUDO_USER: in the documented deployment finance
    runs `sudo -u partnerkit partnerkit drifts ...`, and the service account is partnerkit's own name in the
    audit trail), else the login name; a uid without a passwd entry (a container's) is named by its number."""
    sudo_user = os.environ.get("SUDO_USER", "").strip()
    if sudo_user:
        return sudo_user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback: the audit trail's why and who are never empty (an empty --note records nothing)."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty")
    return None if value is None else value.strip()


def closing_options(kept_with: str, without_search: str):
    """The options of a `close` command (`recharges close`, `orders close`): --note (kept with `kept_with`), --by and
    --without-search (`without_search`: its help, what the search would read and when to skip it)."""
    def decorate(command):
        for option in reversed((
                click.option("--note", required=True, callback=not_blank,
                             help=f"Why: what the provider (or its support) said (kept with {kept_with})."),
                click.option("--by", callback=not_blank,
                             help="Who (default: the user who ran sudo, SUDO_USER, when set; else the login name)."),
                click.option("--without-search", is_flag=True, help=without_search))):
            command = option(command)
        return command
    return decorate
