"""Money is Decimal from the wire; time is aware UTC."""

import json
import math
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partnerkit.money import MoneyError, cents, dumps, fmt, from_cents, loads, to_decimal
from partnerkit.timeutil import iso, parse_day, parse_ts, same_second


def test_loads_never_makes_a_float():
    data = loads('{"payable": 99.10, "face": 100, "amount": "12.30"}')
    assert data["payable"] == Decimal("99.10") and isinstance(data["payable"], Decimal)
    assert to_decimal(data["face"]) == Decimal("100")
    assert to_decimal(data["amount"]) == Decimal("12.30")


def _standard_loads(text):
    """What `loads` promises to equal: the standard library with parse_float=Decimal, errors as a type."""
    try:
        return json.loads(text, parse_float=Decimal)
    except ValueError as exc:
        return ValueError, type(exc)


def _same(a, b):
    """Equal values of equal types all the way down (1 == Decimal(1) == True would hide a difference)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _our_loads(text):
    try:
        return loads(text)
    except ValueError as exc:
        return ValueError, type(exc)


_ODD_BODIES = [b'{"a": 1, "a": 2}', b"123456789012345678901234567890", b"-9223372036854775809", b'"\\ud800"',
               b'"\\ud83d\\ude00"', b"1e400", b"-0", b"-0.0", b"NaN", b'{"amount": Infinity}', b"-Infinity",
               b"[1, 2,]", b'{"a": 1}x', b"\xef\xbb\xbf{}", '{"a": "\u00e9"}'.encode("utf-16"), b'"\x00"',
               b'"a\tb"', b'"\\u0000"', b"", b" ", b"\xff", b"[" * 100 + b"]" * 100, '{"é": 1.10}',
               '"\ud800"', '{"a": "\udcff"}']


@pytest.mark.parametrize("body", _ODD_BODIES)
def test_loads_reads_odd_bodies_exactly_as_the_standard_library(body):
    # msgspec does the usual work; whatever it refuses goes through json.loads, so nothing reads differently.
    assert _same(_our_loads(body), _standard_loads(body))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.decimals(allow_nan=False, places=None).map(str)
    | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


def _as_json(value):
    """JSON text of a generated value; strings that look like Decimals become JSON numbers."""
    if isinstance(value, str) and value and value[0] in "-0123456789" and "N" not in value and "I" not in value:
        return value if "." in value or "E" in value or "e" in value else value + ".0"
    if isinstance(value, list):
        return "[" + ", ".join(_as_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_as_json(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.integers(min_value=0, max_value=40), st.binary(max_size=2))
def test_loads_matches_the_standard_library_on_any_body(value, cut, noise):
    text = _as_json(value)
    assert _same(_our_loads(text), _standard_loads(text))  # a str, as callers may pass
    text = text.encode("utf-8", "surrogatepass")
    assert _same(_our_loads(text), _standard_loads(text))
    broken = text[:cut] + noise + text[cut:]  # most of these are not JSON: the error must be a ValueError too
    assert _same(_our_loads(broken), _standard_loads(broken))


@pytest.mark.parametrize("bad", [None, True, "abc", "NaN", "Infinity", 1.5, [1], "1_000", "١٢", "²", "0x10", "",
                                 " ", "1e1234567", "1" * 65, "\ud800"])
def test_not_an_amount(bad):
    with pytest.raises(MoneyError):
        to_decimal(bad)


@pytest.mark.parametrize("huge", [Decimal("1E+999999999"), Decimal("-1E+999999999"), "1e400", 10 ** 30,
                                  Decimal(10) ** 15, "-1000000000000000.00"])
@pytest.mark.parametrize("strict", [False, True])
def test_out_of_range_is_a_money_error_never_an_arithmetic_error(huge, strict):
    # abs() and quantize() of 1E+999999999 raise decimal.Overflow / InvalidOperation, not MoneyError.
    with pytest.raises(MoneyError, match="out of range"):
        to_decimal(huge, strict=strict)


def test_the_largest_amount_still_fits_integer_paise():
    assert cents(to_decimal("999999999999999.99", strict=True)) < 2 ** 63 - 1
    assert to_decimal(" -12.5e1 ") == Decimal("-125")


def test_strict_refuses_more_than_two_decimals():
    assert to_decimal("1.20", strict=True) == Decimal("1.20")
    with pytest.raises(MoneyError, match="more than 2 decimal places"):
        to_decimal("1.205", strict=True, field="payable")


def test_formatting_and_paise():
    assert fmt(Decimal("5")) == "5.00"
    assert fmt(Decimal("0.105")) == "0.11"
    assert cents(Decimal("99.10")) == 9910
    assert from_cents(9910) == Decimal("99.10")
    assert dumps({"a": Decimal("1.5")}) == '{"a": "1.50"}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T10:00:00Z", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        ("2026-11-21T15:30:00+05:30", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        ("2026-11-21T10:00:00", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        ("2026-11-21T10:00:00.123456Z", datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=timezone.utc)),
    ],
)
def test_timestamps_become_aware_utc(text, expected):
    assert parse_ts(text) == expected
    assert parse_ts(text).tzinfo is not None


@pytest.mark.parametrize(("text", "expected"), [
    ("2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999999Z"),        # RFC 3339 5.7: a leap second
    ("2016-12-31T23:59:60.250Z", "2016-12-31T23:59:59.999999Z"),
    ("2017-01-01T05:29:60+05:30", "2016-12-31T23:59:59.999999Z"),   # the same second in India
    ("2016-12-31 23:59:60z", "2016-12-31T23:59:59.999999Z"),
])
def test_a_leap_second_stays_on_the_day_it_ends(text, expected):
    """A provider clock that keeps leap seconds writes 23:59:60, which datetime cannot hold: the record was
    quarantined ("not an ISO 8601 timestamp"), at the one instant where the day matters most."""
    assert iso(parse_ts(text)) == expected


def test_bad_timestamps_and_days():
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_ts("2016-12-31T23:59:61Z")  # only 60 is a leap second
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_ts("2016-12-31T23:60:60Z")
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_ts("yesterday")
    with pytest.raises(ValueError, match="out of range"):  # valid text, but past datetime.max in UTC
        parse_ts("9999-12-31T23:59:59-23:00")
    with pytest.raises(ValueError, match="out of range"):
        parse_ts("0001-01-01T00:00:00+05:00")
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_day("21/11/2026")
    assert iso(datetime(2026, 1, 1, tzinfo=timezone.utc)) == "2026-01-01T00:00:00Z"


@pytest.mark.parametrize("text", ["1e3", "2E2", " 1.5e2 ", "-1e1"])
def test_an_amount_a_person_typed_is_never_read_with_an_exponent(text):
    assert to_decimal(text) == Decimal(text.strip())  # on the wire the document's JSON numbers may have one
    with pytest.raises(MoneyError, match="written with an exponent; amounts are written in digits"):
        to_decimal(text, typed=True)
    assert to_decimal("199.00", typed=True) == Decimal("199.00")


@pytest.mark.parametrize("one, other, same", [
    ("2026-03-10T10:00:00Z", "2026-03-10T10:00:00.000000Z", True),  # iso's and stamp's forms
    ("2026-03-10T10:00:00.400Z", datetime(2026, 3, 10, 10, 0, 0, 900000, tzinfo=timezone.utc), True),
    ("2026-03-10T15:30:00+05:30", "2026-03-10T10:00:00Z", True),  # another offset, the same instant
    ("2026-03-10T10:00:01Z", "2026-03-10T10:00:00Z", False),
    ("2026-03-10T15:30:00+05:30", "2026-03-10T15:30:00Z", False),
    (None, "2026-03-10T10:00:00Z", True), ("not a time", "2026-03-10T10:00:00Z", True),  # nothing to compare
])
def test_same_second_compares_instants_to_the_second(one, other, same):
    assert same_second(one, other) is same and same_second(other, one) is same
