"""The one transaction alias mapping (DESIGN.md: id | transaction_id; type | transaction_type; ...)."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from reconcile.ledger import Quarantined, Transaction, map_transaction, to_row
from reconcile.ledger_fast import map_page

BASE = {"id": "T1", "amount": "-98.00", "created_at": "2025-03-14T10:00:00Z"}
WHEN = datetime(2025, 3, 14, 10, tzinfo=timezone.utc)


def read(**changes) -> Transaction:
    record = {**BASE, **changes}
    for key in [k for k, v in changes.items() if v is DROP]:
        record.pop(key)
    result = map_transaction(record)
    assert isinstance(result, Transaction), result
    return result


class _Drop:
    """A key the record leaves out (a fixed repr: test ids must not name a memory address)."""

    def __repr__(self) -> str:
        return "DROP"


DROP = _Drop()


@pytest.mark.parametrize("record, field, expected", [
    ({"id": "T1"}, "id", "T1"),
    ({"id": DROP, "transaction_id": 77}, "id", "77"),
    ({"type": "recharge"}, "type", "RECHARGE"),
    ({"transaction_type": "Order"}, "type", "ORDER"),
    ({"order_id": 12}, "order_id", 12),
    ({"order_id": "12"}, "order_id", 12),
    ({"reference_number": "RCH1"}, "reference_number", "RCH1"),
    ({"reference": "RCH2"}, "reference_number", "RCH2"),
    ({"recharge_reference": "RCH3"}, "reference_number", "RCH3"),
    ({"recharge_id": 5}, "recharge_id", 5),
    ({"recharge_id": "5"}, "recharge_id", 5),
    ({"currency": "inr"}, "currency", "INR"),
    ({"created_at": DROP, "timestamp": "2025-03-14T10:00:00+00:00"}, "created_at", WHEN),
    ({"created_at": "2025-03-14T15:30:00+05:30"}, "created_at", WHEN),
    ({"balance_after": "901.50"}, "balance_after", Decimal("901.50")),
    ({"balance_after": Decimal("7")}, "balance_after", Decimal("7")),
    ({}, "balance_after", None),
], ids=lambda v: repr(v)[:40])
def test_every_alias_is_read(record, field, expected):
    assert getattr(read(**record), field) == expected


def test_keys_are_case_insensitive():
    tx = map_transaction({"ID": "T9", "Amount": "5.00", "Transaction_Type": "refund", "CREATED_AT": "2025-03-14T10:00:00Z"})
    assert (tx.id, tx.amount, tx.type) == ("T9", Decimal("5.00"), "REFUND")


@pytest.mark.parametrize("amount, direction_key, direction, expected", [
    ("-98.00", None, None, Decimal("-98.00")),          # signed string
    (Decimal("-98.5"), None, None, Decimal("-98.5")),   # signed number (parsed with parse_float=Decimal)
    (-98, None, None, Decimal("-98")),                   # integer
    ("98.00", None, None, Decimal("98.00")),             # signed positive: a credit
    ("98.00", "direction", "DEBIT", Decimal("-98.00")),  # unsigned + direction
    (Decimal("98.00"), "direction", "credit", Decimal("98.00")),
    ("98.00", "entry_type", "DEBIT", Decimal("-98.00")),
    ("-98.00", "entry_type", "DEBIT", Decimal("-98.00")),  # signed and direction agree
    ("98.00", "entry_type", "CREDIT", Decimal("98.00")),
])
def test_amount_forms(amount, direction_key, direction, expected):
    record = {"amount": amount}
    if direction_key:
        record[direction_key] = direction
    tx = read(**record)
    assert tx.amount == expected
    assert tx.is_debit == (expected < 0)


@pytest.mark.parametrize("record, reason", [
    ({"id": DROP}, "no id"),
    ({"amount": DROP}, "no amount"),
    ({"amount": "12.345"}, "more than 2 decimal places"),
    ({"amount": "ten"}, "not an amount"),
    ({"amount": 1.5}, "float"),
    ({"amount": True}, "expected an amount"),
    ({"amount": "5.00", "direction": "SIDEWAYS"}, "DEBIT or CREDIT"),
    ({"amount": "-5.00", "direction": "CREDIT"}, "negative amount marked CREDIT"),
    ({"created_at": DROP}, "no created_at"),
    ({"created_at": "yesterday"}, "not an ISO 8601"),
    ({"order_id": "abc"}, "order_id is not an integer"),
    ({"recharge_id": 1.0}, "recharge_id is not an integer"),
    ({"recharge_id": 2 ** 63}, "recharge_id is out of range"),           # SQLite's INTEGER could not store it
    ({"order_id": -(2 ** 63) - 1}, "order_id is out of range"),
    ({"order_id": "1" * 25}, "order_id is not an integer"),
    ({"recharge_id": Decimal("1E+999999999")}, "recharge_id is not an integer"),  # never int() a billion digits
    ({"balance_after": "1.001"}, "more than 2 decimal places"),
    ({"id": "T1", "transaction_id": "T2"}, "disagree"),
], ids=lambda v: repr(v)[:40])
def test_unfit_records_are_quarantined_with_the_reason(record, reason):
    raw = {**BASE, **record}
    for key in [k for k, v in record.items() if v is DROP]:
        raw.pop(key)
    result = map_transaction(raw)
    assert isinstance(result, Quarantined)
    assert reason in result.reason
    assert result.raw == raw


@pytest.mark.parametrize("record, field, expected", [
    ({"amount": "98.00", "direction": "DEBIT", "entry_type": "debit"}, "amount", Decimal("-98.00")),
    ({"type": "Recharge", "transaction_type": "RECHARGE"}, "type", "RECHARGE"),
])
def test_aliases_that_differ_only_in_case_agree_on_fields_read_upper_cased(record, field, expected):
    # direction, type and currency are read upper-cased: "DEBIT" and "debit" say the same thing, and
    # quarantining the record as a disagreement left its recharge with a false missing_debit.
    assert getattr(read(**record), field) == expected
    assert page_row(record) is not None


def table_rows(page):
    """Every row of a mapped page as (the 9 column values, raw, shape), in page order."""
    return [(*row[:9], row[9] if with_raw else None, shape) for (shape, with_raw), rows in page.runs for row in rows]


def page_row(record):
    page = map_page([{**BASE, **record}])
    return table_rows(page)[0] if not page.bad else None


@pytest.mark.parametrize("raw", [None, "T1,-98.00", ["T1"], 7])
def test_a_record_that_is_not_an_object_is_quarantined_not_a_crash(raw):
    assert isinstance(map_transaction(raw), Quarantined)


def test_quarantine_key_is_stable_for_the_same_record():
    first = map_transaction({"foo": 1, "bar": Decimal("2.50")})
    again = map_transaction({"bar": Decimal("2.50"), "foo": 1})
    assert first.key == again.key and len(first.key) == 64


def test_store_row_is_integer_paise_and_utc_text():
    tx = read(amount="-98.05", balance_after="1.10", created_at="2025-03-14T15:30:00+05:30")
    row = to_row(tx, {"x": 1}, "2025-03-15T00:00:00Z")
    assert row[2] == -9805 and row[8] == 110
    assert row[7] == "2025-03-14T10:00:00Z"


@pytest.mark.parametrize("created_at, stored", [
    ("2025-03-14T00:00:00.000Z", "2025-03-14T00:00:00Z"),            # midnight opens its day
    ("2025-03-14T05:30:00+05:30", "2025-03-14T00:00:00Z"),           # midnight in UTC, written in India
    ("2025-03-14T05:29:59.999+05:30", "2025-03-13T23:59:59.999000Z"),
    ("2025-03-13T23:59:59.9999999Z", "2025-03-13T23:59:59.999999Z"),  # beyond microseconds: truncated, never rounded up
    ("2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999999Z"),          # a leap second ends its own day
])
def test_a_timestamp_at_midnight_is_stored_on_the_right_day(created_at, stored):
    page = map_page([{**BASE, "created_at": created_at}])
    assert not page.bad
    assert table_rows(page)[0][7] == stored
    assert map_transaction({**BASE, "created_at": created_at}).created_at.isoformat().startswith(stored[:19])


def test_a_page_keeps_good_rows_and_quarantines_the_rest():
    page = map_page([BASE, {"nothing": "here"}, {**BASE, "id": "T2"}])
    assert [r[0] for r in table_rows(page)] == ["T1", "T2"]
    assert [q.reason for q in page.bad] == ["no id (id | transaction_id)"]


def test_ids_at_the_ends_of_sqlites_integer_are_stored_and_one_past_them_quarantined(db):
    """Before the bound, an id past 2**63 - 1 passed the mapping and failed the whole page's insert."""
    from partnerkit.store.ledger import store_transactions

    page = map_page([{**BASE, "id": "A", "recharge_id": 2 ** 63 - 1}, {**BASE, "id": "B", "order_id": -(2 ** 63)},
                     {**BASE, "id": "C", "recharge_id": 2 ** 63}, {**BASE, "id": "D"}])
    assert [q.raw["id"] for q in page.bad] == ["C"]
    store_transactions(db, page.runs, page.shapes, "2025-01-16T00:00:00Z")
    assert db.execute("SELECT id, recharge_id, order_id FROM transactions ORDER BY id").fetchall() == [
        ("A", 2 ** 63 - 1, None), ("B", None, -(2 ** 63)), ("D", None, None)]
