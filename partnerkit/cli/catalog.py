"""`partnerkit catalog products|operators`: the provider's catalog, where `orders create --product-id` and
`recharges submit --operator-id` take their ids.

Each is one provider read (GET /api/v1/products, GET /api/v1/recharge/operators) through the client, so
within the shared API budget like every other call (under the purpose `cli`); nothing is stored. The
document shows neither record's fields ("Gaps in record shapes"), nor any paging or filter of these two
endpoints beyond the products' currency and country: each answer is read whole, as a JSON array (bare, or
under `data`, `products` / `operators` or `items`), and each record by the names below, `id` and `name`
also as `product_id` / `operator_id` and `product_name` / `operator_name`, `country` also as
`country_code` and the reverse. A name a record lacks is empty. Denominations are money: 2-decimal strings
in JSON.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import click

from partnerkit.cli.context import AppContext, pass_app
from partnerkit.cli.output import counted, emit, format_option
from partnerkit.errors import MalformedResponse
from partnerkit.money import MoneyError, to_decimal

PRODUCT_FIELDS = ["id", "name", "vendor", "category_id", "currency", "country", "denominations", "max_quantity",
                  "is_active"]
PRODUCT_COLUMNS = ["id", "name", "vendor", "currency", "country", "denominations", "max_quantity"]
OPERATOR_FIELDS = ["id", "name", "country_code", "is_active", "supports_prepaid", "supports_postpaid",
                   "supports_special", "requires_circle"]
OPERATOR_COLUMNS = [name for name in OPERATOR_FIELDS if name != "country_code"]

# Where the records of an answer in an envelope are (after `data`, when the array is not `data` itself).
_LIST_KEYS = {"product": ("products", "items"), "operator": ("operators", "items")}
# The names a field is also read by, in order (the record's own name first).
_ALIASES = {"country": ("country", "country_code"), "country_code": ("country_code", "country")}


def _code(length: int, what: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """Callback: a code of `length` ASCII letters (ISO), upper-cased; anything else is a usage error (a filter
    the provider cannot match would print an empty catalog)."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        text = value.strip()
        if not re.fullmatch(rf"[A-Za-z]{{{length}}}", text):
            raise click.BadParameter(f"{value!r} is not {what} ({length} letters, e.g. "
                                     f"{'INR' if length == 3 else 'IN'})")
        return text.upper()

    return check


def records(body: Any, kind: str) -> list:
    """The records of a catalog answer: a JSON array, bare or in an envelope (MalformedResponse otherwise)."""
    found = body
    if isinstance(found, dict) and isinstance(found.get("data"), (list, dict)):
        found = found["data"]
    for key in _LIST_KEYS[kind]:
        if isinstance(found, dict) and isinstance(found.get(key), list):
            found = found[key]
            break
    if not isinstance(found, list):
        shown = f"an object with {', '.join(sorted(map(str, found)))[:120]}" if isinstance(found, dict) else (
            type(found).__name__)
        raise MalformedResponse(f"the provider's {kind} list is not a JSON array of records (got {shown})", body=body)
    return found


def _field(record: dict, name: str, kind: str) -> Any:
    """A record's field by its name or an alias (`_ALIASES`; `id` and `name` also as `<kind>_id`, `<kind>_name`)."""
    names = _ALIASES.get(name, (name, f"{kind}_{name}") if name in ("id", "name") else (name,))
    for alias in names:
        if record.get(alias) is not None:
            return record[alias]
    return None


def _amount(value: Any) -> Any:
    """A denomination as a Decimal (a 2-decimal string in JSON); one written as an object by its value; text that
    is no amount stays as it came, never rounded into one."""
    if isinstance(value, dict):
        value = next((value[k] for k in ("value", "amount", "denomination") if value.get(k) is not None), None)
    try:
        return to_decimal(value, field="denomination")
    except MoneyError:
        return None if value is None else str(value)


def product_row(record: dict) -> dict[str, Any]:
    """A provider's product record in PRODUCT_FIELDS, its denominations as amounts."""
    row = {name: _field(record, name, "product") for name in PRODUCT_FIELDS}
    listed = row["denominations"]
    row["denominations"] = ([_amount(d) for d in listed] if isinstance(listed, list)
                            else None if listed is None else [_amount(listed)])
    return row


def operator_row(record: dict) -> dict[str, Any]:
    """A provider's operator record in OPERATOR_FIELDS."""
    return {name: _field(record, name, "operator") for name in OPERATOR_FIELDS}


def _rows(body: Any, kind: str, row: Callable[[dict], dict]) -> list[dict]:
    """The answer's records as rows; a record that is not an object is left out, and counted on stderr."""
    found = records(body, kind)
    rows = [row(r) for r in found if isinstance(r, dict)]
    if len(rows) < len(found):
        left = len(found) - len(rows)
        click.echo(f"warning: {counted(left, f'{kind} record')} of the provider's list {'is' if left == 1 else 'are'} "
                   "not a JSON object and not shown", err=True)
    return rows


def _client(app: AppContext):
    from partnerkit.client import PartnerClient

    return PartnerClient(app.config, app.db, purpose="cli")


@click.group("catalog")
def catalog_group() -> None:
    """The provider's catalog: the product ids `orders create` takes, the operator ids `recharges submit` takes."""


@catalog_group.command("products")
@click.option("--currency", callback=_code(3, "a currency code"),
              help="Only the provider's products in this currency (ISO 4217, e.g. INR; any case).")
@click.option("--country", callback=_code(2, "a country code"),
              help="Only the provider's products for this country (ISO 3166 alpha-2, e.g. IN; any case).")
@format_option
@pass_app
def products_command(app: AppContext, currency: str | None, country: str | None, fmt: str) -> None:
    """The provider's products (GET /api/v1/products): the id `orders create --product-id` takes, with its
    denominations.

    One request within the shared API budget; nothing is stored. The provider filters by --currency and
    --country. The `--denomination` of `orders create` must be one of the product's denominations, and its
    `--quantity` at most the product's max_quantity where the provider gives one. JSON and CSV add category_id
    and is_active.
    """
    with _client(app) as client:
        body = client.list_products(currency=currency, country=country)
    rows = _rows(body, "product", product_row)
    filters = [f"in {currency}"] * bool(currency) + [f"for country {country}"] * bool(country)
    emit(rows, PRODUCT_COLUMNS if fmt == "table" else PRODUCT_FIELDS, fmt,
         empty_message=f"the provider lists no products{' ' + ' '.join(filters) if filters else ''}")


@catalog_group.command("operators")
@format_option
@pass_app
def operators_command(app: AppContext, fmt: str) -> None:
    """The provider's recharge operators (GET /api/v1/recharge/operators): the id `recharges submit --operator-id`
    takes.

    One request within the shared API budget; nothing is stored. The provider refuses an operator that is not
    active; `recharges submit` needs --circle-id where requires_circle says so, and takes
    --postpaid and --special only where the operator supports them. JSON and CSV add country_code.
    """
    with _client(app) as client:
        body = client.list_operators()
    rows = _rows(body, "operator", operator_row)
    emit(rows, OPERATOR_COLUMNS if fmt == "table" else OPERATOR_FIELDS, fmt,
         empty_message="the provider lists no recharge operators")


def register(group: click.Group) -> None:
    group.add_command(catalog_group)
