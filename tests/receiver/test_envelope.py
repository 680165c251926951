"""receiver.envelope: the three envelope forms of the document ("Events > Envelope") become one Event."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from receiver.envelope import normalise
from tests.reliability.hostile_inputs import dumps

# Form 1: the envelope table, with every data field it lists.
FORM_1 = b"""{"event_id": "evt_01", "event_type": "order.partially_delivered", "created_at": "2024-05-01T10:00:00Z",
 "data": {"id": 4242, "reference_code": "ORD-4242", "status": "PARTIALLY_DELIVERED", "sub_status": "",
          "product_name": "Gift Card 500", "denomination": "500.00", "quantity": 4, "amount": "2000.00",
          "delivered_quantity": 2, "delivered_on": null, "created_at": "2024-05-01T09:59:00Z"}}"""
# Form 2: "an envelope keyed event ... with event_id, created_at and data holding order_id, status,
# total_amount, currency, fulfilled_from, and vouchers (product_id, expiry)".
FORM_2 = b"""{"event_id": "evt_02", "event": "order.delivered", "created_at": "2024-05-01T10:01:00+00:00",
 "data": {"order_id": 4242, "status": "DELIVERED", "total_amount": 2000.00, "currency": "INR",
          "fulfilled_from": "stock", "vouchers": [{"product_id": 7, "expiry": "2025-05-01"}]}}"""
# Form 3: "an envelope keyed event with timestamp and data holding order_id, ref, status,
# vouchers_ready, total_vouchers" (no event_id: the X-Event-ID header, else a body digest).
FORM_3 = b"""{"event": "order.delivered", "timestamp": "2024-05-01T10:02:00Z",
 "data": {"order_id": 4242, "ref": "ORD-4242", "status": "delivered", "vouchers_ready": 4, "total_vouchers": 4}}"""


@pytest.mark.parametrize("body, headers, expected", [
    (FORM_1, {}, dict(event_id="evt_01", event_type="order.partially_delivered", order_id=4242,
                      status="PARTIALLY_DELIVERED", amount=Decimal("2000.00"), delivered_quantity=2, quantity=4,
                      occurred_at=datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc))),
    (FORM_2, {}, dict(event_id="evt_02", event_type="order.delivered", order_id=4242, status="DELIVERED",
                      amount=Decimal("2000.00"), delivered_quantity=None, quantity=None,
                      occurred_at=datetime(2024, 5, 1, 10, 1, tzinfo=timezone.utc))),
    (FORM_3, {"X-Event-ID": "hdr-3"}, dict(event_id="hdr-3", event_type="order.delivered", order_id=4242,
                                            status="DELIVERED", amount=None, delivered_quantity=4, quantity=4,
                                            occurred_at=datetime(2024, 5, 1, 10, 2, tzinfo=timezone.utc))),
])
def test_three_forms_become_one_record(body, headers, expected):
    event = normalise(body, headers)
    assert event.quarantine is None
    for name, value in expected.items():
        assert getattr(event, name) == value, name
    assert event.raw == json.loads(body, parse_float=Decimal)


def test_money_is_decimal_never_float():
    assert isinstance(normalise(FORM_2, {}).amount, Decimal)


def test_dedup_key_order_body_then_header_then_digest():
    assert normalise(FORM_1, {"X-Event-ID": "other"}).event_id == "evt_01"
    assert normalise(FORM_3, {"X-Event-ID": "hdr"}).event_id == "hdr"
    assert normalise(FORM_3, {}).event_id == "sha256:" + hashlib.sha256(FORM_3).hexdigest()


def test_status_falls_back_to_event_type():
    body = json.dumps({"event_id": "e", "event_type": "order.processing", "data": {"id": 1}}).encode()
    assert normalise(body, {}).status == "PROCESSING"


def test_event_type_from_header_when_body_lacks_it():
    body = json.dumps({"event_id": "e", "data": {"id": 1, "status": "PENDING"}}).encode()
    assert normalise(body, {"X-Event-Type": "order.pending"}).event_type == "order.pending"


def test_unix_timestamp_accepted():
    body = json.dumps({"event": "order.failed", "timestamp": 1714557600, "data": {"order_id": 9}}).encode()
    assert normalise(body, {}).occurred_at == datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("body, reason", [
    (b"\xff\xfe not utf-8", "not UTF-8"),
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"event_id": "e", "data": {"id": 1}}', "no event type"),
    (b'{"event_id": "e", "event_type": "invoice.paid", "data": {}}', "unknown event type"),
    (b'{"event_id": "e", "event_type": "order.delivered", "data": []}', "data is not an object"),
    (b'{"event_id": "e", "event_type": "order.delivered", "data": {"id": "abc"}}', "order id is not an integer"),
    (b'{"event_id": "e", "event_type": "order.delivered", "data": {"id": true}}', "order id is not an integer"),
    (b'{"event_id": "e", "event_type": "order.delivered", "data": {"id": -1, "amount": "12.50"}}', "out of range"),
    (b'{"event_id": "e", "event": "order.delivered", "data": {"order_id": 1.5, "total_amount": 150.123}}',
     "order id is not an integer"),
    (b'{"event_id": "e", "event_type": "order.delivered", "data": {}}', "no order id"),
])
def test_unreadable_bodies_are_quarantined_with_a_reason(body, reason):
    event = normalise(body, {"X-Event-ID": "hdr"})
    assert event.quarantine is not None and reason in event.quarantine
    assert event.event_id in ("e", "hdr")


@pytest.mark.parametrize("data, key, why", [
    ({"order_id": 7, "total_amount": Decimal("150.123")}, "total_amount", "more than 2 decimal places"),
    ({"order_id": 7, "total_amount": -5}, "total_amount", "is negative"),
    ({"order_id": 7, "total_amount": "ten"}, "total_amount", "not an amount"),
    ({"id": 7, "amount": "1e400"}, "amount", "out of range"),
    ({"id": 7, "quantity": -1}, "quantity", "quantity is out of range"),
    ({"id": 7, "delivered_quantity": "two"}, "delivered_quantity", "delivered quantity is not an integer"),
    ({"order_id": 7, "total_vouchers": True}, "total_vouchers", "quantity is not an integer"),
    ({"order_id": 7, "vouchers_ready": 2 ** 40}, "vouchers_ready", "delivered quantity is out of range"),
])
def test_an_unreadable_figure_is_dropped_and_the_event_kept(data, key, why):
    # Figures are hints (orders.apply fills only NULL fields): one that cannot be read leaves the event usable.
    body = dumps({"event_id": "e", "event": "order.delivered", "data": data})  # a Decimal as a JSON number
    event = normalise(body, {})
    assert event.quarantine is None and event.order_id == 7 and event.status == "DELIVERED"
    assert [name for name, _ in event.dropped] == [key] and why in dict(event.dropped)[key]
    attribute = {"total_amount": "amount", "amount": "amount", "quantity": "quantity", "total_vouchers": "quantity",
                 "delivered_quantity": "delivered_quantity", "vouchers_ready": "delivered_quantity"}[key]
    assert getattr(event, attribute) is None


def test_only_the_unreadable_figure_is_dropped():
    body = b'{"event_id": "e", "event_type": "order.partially_delivered", "data": {"id": 7, "amount": 150.123, ' \
           b'"quantity": 4, "delivered_quantity": -2}}'
    event = normalise(body, {})
    assert (event.quantity, event.delivered_quantity, event.amount) == (4, None, None)
    assert [name for name, _ in event.dropped] == ["delivered_quantity", "amount"]


def test_a_huge_unreadable_figure_is_not_copied_whole_into_the_drop():
    event = normalise(json.dumps({"event_id": "e", "event_type": "order.delivered",
                                  "data": {"id": 7, "quantity": "x" * 100_000}}).encode(), {})
    assert event.quarantine is None and len(dict(event.dropped)["quantity"]) <= 200


def test_readable_figures_drop_nothing():
    event = normalise(b'{"event_id": "e", "event": "order.delivered", "data": {"order_id": 7, "total_amount": 150.12}}', {})
    assert event.dropped == () and event.amount == Decimal("150.12")


def test_test_event_is_recognised():
    event = normalise(b'{"event_id": "t1", "event_type": "webhook.test", "data": {}}', {})
    assert event.is_test and event.quarantine is None and event.order_id is None
