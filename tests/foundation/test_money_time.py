"""Money is Decimal from the wire; time is aware UTC."""

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from partnerkit.money import MoneyError, cents, dumps, fmt, from_cents, loads, to_decimal
from partnerkit.timeutil import iso, parse_day, parse_ts


def test_loads_never_makes_a_float():
    data = loads('{"payable": 99.10, "face": 100, "amount": "12.30"}')
    assert data["payable"] == Decimal("99.10") and isinstance(data["payable"], Decimal)
    assert to_decimal(data["face"]) == Decimal("100")
    assert to_decimal(data["amount"]) == Decimal("12.30")


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


def test_bad_timestamps_and_days():
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
