"""Exact money: Decimal parsing and rounding, and JSON with amounts as 2-decimal numbers.

Money never touches a float: bodies are parsed with ``parse_float=Decimal`` and every
Decimal written to JSON is rendered as a number literal with exactly two decimals.
"""
from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

CENT = Decimal("0.01")
_MARK = "\x00"
_MARKED = re.compile(r'"\\u0000(-?[0-9]+\.[0-9]+)"')


class Unrounded(Decimal):
    """A Decimal written to JSON exactly as it is, not rounded to cents (fault money_precision)."""


class BadJSON(ValueError):
    """The request body is not valid JSON."""


def q2(value) -> Decimal:
    """Round to cents, half up."""
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)


def money_str(value) -> str:
    """A 2-decimal string, e.g. '99.50' (order list/detail, transactions, wallets)."""
    return f"{q2(value):f}"


def parse_amount(value) -> Decimal | None:
    """A JSON number or numeric string as an exact finite Decimal; None if not one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, Decimal)):
        result = Decimal(value)
    elif isinstance(value, str):
        try:
            result = Decimal(value.strip())
        except InvalidOperation:
            return None
    else:
        return None
    if not result.is_finite():
        return None
    try:
        result.quantize(CENT)  # beyond the context's 28 digits (1E+30) no cent can be counted: not an amount
    except InvalidOperation:
        return None
    return result


def parse_int(value) -> int | None:
    """A JSON integer (or an integral Decimal like 3.0); None otherwise (bools excluded)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return None


def loads(raw: bytes | str):
    """Parse a JSON body with floats as Decimal; raise BadJSON on anything malformed."""
    def reject_constant(name):
        raise BadJSON(name)
    try:
        return json.loads(raw, parse_float=Decimal, parse_constant=reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadJSON(str(exc)) from exc


def _default(obj):
    if isinstance(obj, Unrounded):
        return _MARK + f"{obj:f}"
    if isinstance(obj, Decimal):
        return _MARK + f"{q2(obj):f}"
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj) -> str:
    """JSON text where every Decimal is a number literal with 2 decimals (99.50, not 99.5)."""
    text = json.dumps(obj, default=_default, separators=(",", ":"))
    return _MARKED.sub(r"\1", text) if "\\u0000" in text else text
