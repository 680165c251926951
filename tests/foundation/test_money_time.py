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


@pytest.mark.parametrize("bad", [None, True, "abc", "NaN", "Infinity", 1.5, [1]])
def test_not_an_amount(bad):
    with pytest.raises(MoneyError):
        to_decimal(bad)


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
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_day("21/11/2026")
    assert iso(datetime(2026, 1, 1, tzinfo=timezone.utc)) == "2026-01-01T00:00:00Z"
