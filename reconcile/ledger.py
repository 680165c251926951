"""The one mapping from the provider's wallet transaction records to partnerkit's ledger rows.

The document does not show the transaction record ("Gaps in record shapes: ... wallet,
transaction ... fields not shown"), so DESIGN.md fixes the aliases read here, keys matched
case-insensitively:

    id | transaction_id                       required
    type | transaction_type                   optional, upper-cased
    amount                                    required; number or string, at most 2 decimals;
                                              signed (debit < 0), or unsigned with
    direction | entry_type = DEBIT | CREDIT   which then gives the sign
    order_id, recharge_id                     optional integers
    reference_number | reference | recharge_reference   optional
    currency                                  optional, upper-cased
    created_at | timestamp                    required, ISO 8601
    balance_after                             optional, at most 2 decimals

A record that fits none of it is `Quarantined` with the reason, never dropped, never a crash.
Pure: no I/O here.

`map_transaction` + `to_row` is the mapping as written above. `reconcile.ledger_fast.map_page`, which
a sync runs over every page, reaches the same rows faster (compiled per key shape) and falls back to
`map_transaction` for anything unusual, so a quarantine reason is only ever written here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Mapping

from partnerkit.money import MONEY_LIMIT, MoneyError, cents, to_decimal
from partnerkit.store import quarantine
from partnerkit.timeutil import iso, parse_ts

ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "transaction_id"),
    "type": ("type", "transaction_type"),
    "amount": ("amount",),
    "direction": ("direction", "entry_type"),
    "order_id": ("order_id",),
    "reference_number": ("reference_number", "reference", "recharge_reference"),
    "recharge_id": ("recharge_id",),
    "currency": ("currency",),
    "created_at": ("created_at", "timestamp"),
    "balance_after": ("balance_after",),
}
DIRECTIONS = {"DEBIT": -1, "CREDIT": 1}
INTEGER_MIN, INTEGER_MAX = -(2 ** 63), 2 ** 63 - 1  # SQLite's INTEGER: order and recharge ids beyond it cannot be stored
ALIAS_FIELD = {alias: field for field, names in ALIASES.items() for alias in names}
_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Transaction:
    """A wallet transaction in partnerkit's terms: `amount` is signed, a debit is negative."""

    id: str
    type: str | None
    amount: Decimal
    order_id: int | None
    reference_number: str | None
    recharge_id: int | None
    currency: str | None
    created_at: datetime
    balance_after: Decimal | None

    @property
    def is_debit(self) -> bool:
        """True when the wallet went down."""
        return self.amount < 0


@dataclass(frozen=True)
class Quarantined:
    """A record that could not be read, with the reason and the record as received."""

    reason: str
    raw: Any

    @property
    def key(self) -> str:
        """A stable key, so re-syncs do not pile up: `transaction:<id>` when the record shows an integer
        id (released once that id is stored correctly), else the sha256 of its canonical JSON."""
        return quarantine.key_for("transaction", self.raw, text=canonical_json(self.raw))


class _Unfit(ValueError):
    """Internal: the reason a record is quarantined."""


def canonical_json(raw: Any) -> str:
    """The record as sorted, compact JSON (Decimal kept exact as a string)."""
    try:
        return _JSON.encode(raw)  # one encoder: json.dumps with options builds a new one per call
    except TypeError:  # keys of mixed types ({"id": .., 5: ..}) cannot be sorted: order them by their text
        return _JSON.encode(_keys_as_text(raw))


def _keys_as_text(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {_JSON.encode(k).strip('"') if not isinstance(k, str) else k: _keys_as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_keys_as_text(v) for v in value]
    return value


# Fields read upper-cased: two aliases that differ only in case say the same thing ("DEBIT", "debit").
_UPPER_FIELDS = frozenset({"type", "direction", "currency"})


def _pick(record: Mapping[str, Any], field: str) -> Any:
    """The value under any alias of `field`; aliases that disagree (as the field is read) are refused."""
    found = [(name, record[name]) for name in ALIASES[field] if name in record and record[name] not in (None, "")]
    if not found:
        return None
    values = {str(v).upper() if field in _UPPER_FIELDS else str(v) for _, v in found}
    if len(values) > 1:
        raise _Unfit(f"{' and '.join(n for n, _ in found)} disagree")
    return found[0][1]


def _integer(value: Any, field: str) -> int | None:
    """An optional integer field, within SQLite's INTEGER (a larger one could not be stored)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Unfit(f"{field} is not an integer: {value!r}")
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 20:
        value = int(value.strip())  # isdecimal(), not isdigit(): isdigit() also takes "²", which int() refuses
    elif isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value() \
            and INTEGER_MIN <= value <= INTEGER_MAX:  # compared first: int() of 1E+999999999 would not end
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Unfit(f"{field} is not an integer: {str(value)[:40]!r}")
    if not INTEGER_MIN <= value <= INTEGER_MAX:
        raise _Unfit(f"{field} is out of range: {str(value)[:40]}")
    return value


def _money(value: Any, field: str) -> Decimal:
    try:
        amount = to_decimal(value, field=field, strict=True)
    except MoneyError as exc:
        raise _Unfit(str(exc)) from None
    except ArithmeticError:  # quantize of a number wider than Decimal's precision
        raise _Unfit(f"{field}: {value!r} is out of range") from None
    if abs(amount) >= MONEY_LIMIT:
        raise _Unfit(f"{field}: {value!r} is out of range")
    return amount


def _text(value: Any) -> str | None:
    return None if value is None else str(value).strip() or None


def _read(raw: Any) -> Transaction:
    if not isinstance(raw, Mapping):
        raise _Unfit(f"not an object: {type(raw).__name__}")
    record = {str(k).strip().lower(): v for k, v in raw.items()}
    ident = _text(_pick(record, "id"))
    if ident is None:
        raise _Unfit("no id (id | transaction_id)")
    amount_raw = _pick(record, "amount")
    if amount_raw is None:
        raise _Unfit("no amount")
    amount = _money(amount_raw, "amount")
    direction = _text(_pick(record, "direction"))
    if direction is not None:
        sign = DIRECTIONS.get(direction.upper())
        if sign is None:
            raise _Unfit(f"direction must be DEBIT or CREDIT, got {direction!r}")
        if amount < 0 and sign > 0:
            raise _Unfit("a negative amount marked CREDIT")
        amount = abs(amount) * sign
    created_raw = _pick(record, "created_at")
    if created_raw is None:
        raise _Unfit("no created_at | timestamp")
    try:
        created_at = parse_ts(created_raw, field="created_at")
    except ValueError as exc:
        raise _Unfit(str(exc)) from None
    balance_raw = _pick(record, "balance_after")
    currency = _text(_pick(record, "currency"))
    kind = _text(_pick(record, "type"))
    return Transaction(
        id=ident,
        type=kind.upper() if kind else None,
        amount=amount,
        order_id=_integer(_pick(record, "order_id"), "order_id"),
        reference_number=_text(_pick(record, "reference_number")),
        recharge_id=_integer(_pick(record, "recharge_id"), "recharge_id"),
        currency=currency.upper() if currency else None,
        created_at=created_at,  # type: ignore[arg-type]
        balance_after=None if balance_raw is None else _money(balance_raw, "balance_after"),
    )


def map_transaction(raw: Any) -> Transaction | Quarantined:
    """Read one provider record through the alias table; never raises for a bad record."""
    try:
        return _read(raw)
    except _Unfit as exc:
        return Quarantined(str(exc), raw)


def to_row(tx: Transaction, raw: Any, synced_at: str) -> tuple:
    """The store tuple of a mapped transaction (integer paise, ISO UTC text)."""
    return (tx.id, tx.type, cents(tx.amount), tx.order_id, tx.reference_number, tx.recharge_id, tx.currency,
            iso(tx.created_at), None if tx.balance_after is None else cents(tx.balance_after),
            None if raw is None else canonical_json(raw), synced_at)
