"""Money at the wire: JSON numbers and 2-decimal strings become Decimal once, and back.

The document sends recharge money as JSON numbers, order create money as numbers, and order
list/detail money as 2-decimal strings. Responses are parsed with `parse_float=Decimal`
(see `loads`), so a float never exists; `to_decimal` accepts what can legitimately arrive.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import msgspec

from partnerkit.timeutil import iso

CENT = Decimal("0.01")
# Every amount must fit in integer paise in SQLite's 64-bit INTEGER with room to sum: 10**15
# rupees is far beyond any wallet, and refusing it here keeps a hostile or broken number
# (1E+999999999) from ever reaching arithmetic that would overflow or take forever.
MONEY_LIMIT = Decimal(10) ** 15
# What a numeric string may look like: ASCII digits, an optional sign, point and exponent.
# Decimal() itself also takes "1_000", "NaN", "Infinity" and non-ASCII digits such as "١٢".
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,6})?")


class MoneyError(ValueError):
    """A value that should be an amount is not one (or has more than 2 decimals when strict)."""


# msgspec's decoder builds the same dicts, lists, ints, strings and Decimals as the standard library's
# json.loads(parse_float=Decimal), in half the time (a day's transaction list is a million records).
_DECODER = msgspec.json.Decoder(float_hook=Decimal)


def loads(text: str | bytes) -> Any:
    """json.loads with every non-integer number as Decimal (never float).

    Whatever msgspec refuses goes through json.loads itself, which is more lenient than strict JSON
    (NaN and Infinity tokens, a UTF-8 byte-order mark, UTF-16 or UTF-32 bytes, lone surrogate escapes)
    and raises the ValueError callers expect: an unusual body reads exactly as it always did, and a
    NaN amount stays one record's problem (refused by `to_decimal`) instead of failing its whole page.
    """
    try:
        return _DECODER.decode(text)
    except (msgspec.DecodeError, UnicodeEncodeError):  # the latter: a str holding a lone surrogate
        return json.loads(text, parse_float=Decimal)


def to_decimal(value: Any, *, field: str = "amount", strict: bool = False, typed: bool = False) -> Decimal:
    """Convert a wire amount (int, Decimal, numeric string) to Decimal.

    With strict=True an amount with more than 2 decimal places is refused rather than rounded:
    the document promises 2 decimals, and silently rounding money hides a provider fault.
    With typed=True the string is one a person typed (a CLI option, the submit API): written in
    digits, never with an exponent ("1e3" is a number, but as money more likely a slip than 1000).
    Anything else that is not an amount (NaN, infinities, |amount| >= MONEY_LIMIT, a string
    that is not a plain ASCII number) raises MoneyError, never another exception.
    """
    if isinstance(value, bool) or value is None:
        raise MoneyError(f"{field}: expected an amount, got {value!r}")
    if isinstance(value, float):
        # Only reachable if someone parsed JSON without parse_float=Decimal: refuse, loudly.
        raise MoneyError(f"{field}: a float reached money handling ({value!r}); parse with money.loads")
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > 64 or not _NUMBER.fullmatch(text):
            raise MoneyError(f"{field}: {value[:40]!r} is not an amount")
        try:
            amount = Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern admits only what Decimal reads
            raise MoneyError(f"{field}: {value!r} is not an amount") from None
    else:
        raise MoneyError(f"{field}: expected an amount, got {type(value).__name__}")
    if not amount.is_finite():
        raise MoneyError(f"{field}: {value!r} is not a finite amount")
    if amount.copy_abs() >= MONEY_LIMIT:  # copy_abs, not abs(): abs() rounds, and 1E+999999999 overflows
        raise MoneyError(f"{field}: {str(value)[:40]!r} is out of range")
    if typed and isinstance(value, str) and ("e" in value or "E" in value):  # after the range: 1e999999 is that
        raise MoneyError(f"{field}: {value[:40]!r} is written with an exponent; amounts are written in digits")
    if strict and amount != amount.quantize(CENT, rounding=ROUND_HALF_UP):
        raise MoneyError(f"{field}: {value!r} has more than 2 decimal places")
    return amount


def fmt(amount: Decimal | None) -> str | None:
    """Render an amount as a 2-decimal string, the form money takes in partnerkit's JSON."""
    if amount is None:
        return None
    return str(amount.quantize(CENT, rounding=ROUND_HALF_UP))


def cents(amount: Decimal) -> int:
    """An amount in integer hundredths, for exact storage and set-based SQL sums."""
    return int((amount * 100).to_integral_value(rounding=ROUND_HALF_UP))


def from_cents(value: int | None) -> Decimal | None:
    """Inverse of `cents`."""
    return None if value is None else (Decimal(value) / 100).quantize(CENT)


class DecimalEncoder(json.JSONEncoder):
    """JSON encoder for partnerkit's own output: Decimal as a 2-decimal string."""

    def default(self, o: Any) -> Any:
        if isinstance(o, Decimal):
            return fmt(o)
        if isinstance(o, datetime):
            return iso(o)
        if hasattr(o, "isoformat"):
            return o.isoformat()
        return super().default(o)


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps for partnerkit's output (money as 2-decimal strings, datetimes ISO 8601)."""
    return json.dumps(value, cls=DecimalEncoder, **kwargs)
