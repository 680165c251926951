"""Hostile inputs shared by the property tests and the HTTP fuzz: bodies, header values, mutations.

Everything here is data or a hypothesis strategy; nothing talks to a server.
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from datetime import datetime
from typing import Any
from decimal import Decimal

from hypothesis import strategies as st

from partnerkit.money import MONEY_LIMIT
from receiver.envelope import MAX_ID, MAX_QUANTITY, MAX_REASON, ORDER_STATUSES, Event

# The three envelope forms of the document ("Events > Envelope"), as Python values.
FORM_1 = {"event_id": "evt_h1", "event_type": "order.delivered", "created_at": "2024-05-01T10:00:00Z",
          "data": {"id": 4242, "reference_code": "ORD-4242", "status": "DELIVERED", "sub_status": "",
                   "product_name": "Gift Card 500", "denomination": "500.00", "quantity": 4, "amount": "2000.00",
                   "delivered_quantity": 4, "delivered_on": None, "created_at": "2024-05-01T09:59:00Z"}}
FORM_2 = {"event_id": "evt_h2", "event": "order.delivered", "created_at": "2024-05-01T10:01:00+00:00",
          "data": {"order_id": 4242, "status": "DELIVERED", "total_amount": Decimal("2000.00"), "currency": "INR",
                   "fulfilled_from": "stock", "vouchers": [{"product_id": 7, "expiry": "2025-05-01"}]}}
FORM_3 = {"event": "order.delivered", "timestamp": "2024-05-01T10:02:00Z",
          "data": {"order_id": 4242, "ref": "ORD-4242", "status": "delivered", "vouchers_ready": 4,
                   "total_vouchers": 4}}
FORMS = {"form1": FORM_1, "form2": FORM_2, "form3": FORM_3}

# Fields the normaliser reads, and the words its quarantine reason uses for each.
READ_DATA_FIELDS = {"id": "order id", "order_id": "order id", "quantity": "quantity",
                    "total_vouchers": "quantity", "delivered_quantity": "delivered quantity",
                    "vouchers_ready": "delivered quantity", "amount": "amount", "total_amount": "amount"}


class _Raw:
    """A JSON fragment written verbatim (NaN, 10**5000, 5000-deep nesting, invalid escapes)."""

    def __init__(self, text: str) -> None:
        self.text = text


def dumps(value) -> bytes:
    """JSON text of `value`; Decimal as a number, _Raw fragments verbatim, lone surrogates escaped."""
    raws: dict[str, str] = {}
    nonce = uuid.uuid4().hex  # no generated string can collide with a marker

    def default(o):
        if isinstance(o, (Decimal, _Raw)):
            marker = f"__raw_{nonce}_{len(raws)}__"
            raws[marker] = str(o) if isinstance(o, Decimal) else o.text
            return marker
        raise TypeError(type(o).__name__)

    text = json.dumps(value, default=default)  # ensure_ascii: a lone surrogate becomes \udxxx
    for marker, raw in raws.items():
        text = text.replace(f'"{marker}"', raw)
    return text.encode("utf-8")


def deep(depth: int) -> _Raw:
    return _Raw("[" * depth + "]" * depth)


# Values of every JSON type and then some: what "wrong type" means for any field.
WRONG_VALUES = [
    None, True, False, 0, -1, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, Decimal("1.5"), Decimal("1E+400"),
    Decimal("-0.001"), _Raw("NaN"), _Raw("Infinity"), _Raw("-Infinity"), _Raw("1" * 5000), _Raw("1e999999999"),
    "", " ", "abc", "١٢", "²", "12.5", "1_000", "NaN", "1E+30", "\ud800", "\udfff\ud800", "x" * 70_000,
    "\x00", "2024-13-45T99:99:99Z", "9999-12-31T23:59:59-23:59", [], [1, 2], {}, {"a": {"b": None}},
    deep(50), deep(100_000),
]

# Any character, lone surrogates included (hypothesis leaves category Cs out unless asked).
any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]))


def any_text(min_size: int = 0, max_size: int = 30) -> st.SearchStrategy[str]:
    return st.text(any_char, min_size=min_size, max_size=max_size)


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.decimals(allow_nan=False, allow_infinity=False), any_text(),
    st.sampled_from(["order.delivered", "order.created", "order.partially_delivered", "order.failed",
                     "DELIVERED", "delivered", "2024-05-01T10:00:00Z", "1714557600", "\ud800", "١٢", "1e5"]))
json_values = st.recursive(json_scalars, lambda children: st.one_of(
    st.lists(children, max_size=4),
    st.dictionaries(st.sampled_from(["event_id", "event_type", "event", "created_at", "timestamp", "data", "id",
                                     "order_id", "status", "amount", "total_amount", "quantity",
                                     "total_vouchers", "delivered_quantity", "vouchers_ready", "x"])
                    | any_text(max_size=8), children, max_size=6)), max_leaves=20)


def mutate(form_and_changes: tuple[str, list[tuple[str, str, Any, bool]]]) -> dict:
    """FORMS[name] with each change (where: "top" or "data", key, replacement, drop) applied, on a copy."""
    name, changes = form_and_changes
    value = json.loads(dumps(FORMS[name]), parse_float=Decimal)
    for where, key, replacement, drop in changes:
        target = value if where == "top" or not isinstance(value.get("data"), dict) else value["data"]
        if drop:
            target.pop(key, None)
        else:
            # A copy: WRONG_VALUES' lists and dicts are shared by every example and test, and a later change
            # of this example may land inside this one ("data" replaced by {}, then a key set in data),
            # which made {} of WRONG_VALUES contain itself for the rest of the process.
            target[key] = copy.deepcopy(replacement)
    return value


def envelope_variants() -> st.SearchStrategy[dict]:
    """One of the three forms with any of its fields (top level or in data) replaced or dropped."""
    keys = st.sampled_from(sorted({k for form in FORMS.values() for k in form} |
                                  {k for form in FORMS.values() for k in form["data"]}))
    change = st.tuples(st.sampled_from(["top", "data"]), keys,
                       st.one_of(st.sampled_from(WRONG_VALUES[:-1]), json_values), st.booleans())
    return st.tuples(st.sampled_from(sorted(FORMS)), st.lists(change, min_size=1, max_size=4)).map(mutate)


def assert_storable(event: Event) -> None:
    """What the inbox relies on: every field of the Event fits SQLite and the logs, or is absent."""
    assert isinstance(event, Event)
    assert isinstance(event.event_id, str) and event.event_id
    event.event_id.encode("utf-8")  # no lone surrogate reaches SQLite or a log line
    if event.event_type is not None:
        event.event_type.encode("utf-8")
    if event.order_id is not None:
        assert type(event.order_id) is int and 1 <= event.order_id <= MAX_ID
    for count in (event.quantity, event.delivered_quantity):
        assert count is None or (type(count) is int and 0 <= count <= MAX_QUANTITY)
    if event.amount is not None:
        assert isinstance(event.amount, Decimal) and event.amount.is_finite()
        assert abs(event.amount) < MONEY_LIMIT and event.amount == event.amount.quantize(Decimal("0.01"))
    assert event.occurred_at is None or (isinstance(event.occurred_at, datetime) and event.occurred_at.tzinfo)
    if event.quarantine is not None:
        assert isinstance(event.quarantine, str) and 0 < len(event.quarantine) <= MAX_REASON
        event.quarantine.encode("utf-8")
        assert event.order_id is None and not event.is_test
    elif not event.is_test:
        assert event.order_id is not None and event.status in ORDER_STATUSES


def flip_bit(data: bytes, bit: int) -> bytes:
    """`data` with bit number `bit` (0 = lowest bit of the first byte) inverted."""
    index, offset = divmod(bit, 8)
    mutated = bytearray(data)
    mutated[index] ^= 1 << offset
    return bytes(mutated)


def random_mutation(rng: random.Random, body: bytes) -> bytes:
    """A cheap mutation of `body`: flip, insert, delete, duplicate or truncate."""
    if not body:
        return bytes([rng.randrange(256)])
    choice = rng.randrange(5)
    at = rng.randrange(len(body))
    if choice == 0:
        return flip_bit(body, rng.randrange(len(body) * 8))
    if choice == 1:
        return body[:at] + bytes([rng.randrange(256)]) * rng.randint(1, 4) + body[at:]
    if choice == 2:
        return body[:at] + body[at + rng.randint(1, 8):]
    if choice == 3:
        return body[:at] + body[at:at + 16] * 3 + body[at:]
    return body[:at]
