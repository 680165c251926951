"""Records: Decimal money, aware times, omitted vs null, unknown fields kept, bad fields named."""

from __future__ import annotations

from datetime import timezone
from decimal import Decimal

import pytest
from werkzeug import Response

from partnerkit.client import MISSING, OrderDetail, Recharge, Voucher, WebhookCreated
from partnerkit.errors import MalformedResponse

from tests.client import client_payloads as p


def _raw(httpserver, path, text, status=200):
    httpserver.expect_request(path).respond_with_response(Response(text, status=status, content_type="application/json"))


def test_money_from_json_numbers_stays_exact_decimal(client, httpserver):
    _raw(httpserver, "/api/v1/recharges/101", p.as_json(p.recharge()).replace('"payable": 98', '"payable": 99.10'))
    recharge = client.get_recharge(101)
    assert type(recharge.payable) is Decimal and str(recharge.payable) == "99.10"
    assert recharge.payable == Decimal("99.10")
    assert type(recharge.face) is Decimal and recharge.face == Decimal("100")


def test_money_from_two_decimal_strings(client, httpserver):
    httpserver.expect_request("/api/v1/orders/7001").respond_with_json(p.order_detail())
    order = client.get_order(7001)
    assert type(order.amount) is Decimal and str(order.amount) == "99.10"
    assert order.discount == Decimal("0.90") and order.denomination == Decimal("50.00")


def test_order_create_money_numbers(client, httpserver):
    _raw(httpserver, "/api/v1/orders", '{"id":1,"ref":"r","transaction_id":2,"amount":99.10,"product_id":7,'
         '"denomination":50,"quantity":2,"discount":0.90,"vouchers":[],"status":"PENDING","placed_at":"2024-05-01T10:00:00+05:30"}')
    order = client.create_order(product_id=7, denomination=Decimal("50.00"), quantity=2)
    assert str(order.amount) == "99.10" and type(order.denomination) is Decimal and order.vouchers == ()
    assert order.placed_at.tzinfo is timezone.utc and order.placed_at.hour == 4 and order.placed_at.minute == 30


def test_float_never_reaches_money():
    with pytest.raises(MalformedResponse, match="float"):
        Recharge.from_payload(p.recharge(payable=97.5))  # noqa  # built without parse_float=Decimal


def test_omitted_is_missing_and_null_is_none():
    omitted = Recharge.from_payload(p.recharge())
    nulled = Recharge.from_payload(p.recharge(circle=None))
    assert omitted.circle is MISSING and not omitted.circle
    assert nulled.circle is None
    assert omitted.operator == "Airtel" and omitted.failure_reason is MISSING
    assert "circle" not in omitted.raw and "circle" in nulled.raw


def test_unknown_fields_are_kept_in_raw():
    recharge = Recharge.from_payload(p.recharge(brand_new_field={"x": 1}))
    assert recharge.raw["brand_new_field"] == {"x": 1} and recharge.id == 101


@pytest.mark.parametrize("field, value", [("payable", "lots"), ("id", "abc"), ("created_at", "yesterday"),
                                          ("status", 5), ("is_prepaid", "yes"), ("face", "1.005")])
def test_bad_field_is_named(field, value):
    with pytest.raises(MalformedResponse, match=f"Recharge.{field}:") as info:
        Recharge.from_payload({**p.recharge(), field: value})
    assert info.value.field == field and info.value.body[field] == value


def test_required_field_missing_is_named():
    payload = p.recharge()
    del payload["reference_number"]
    with pytest.raises(MalformedResponse, match="reference_number: missing"):
        Recharge.from_payload(payload)


def test_legacy_success_values():
    legacy = Recharge.from_payload(p.recharge(status="RECHARGED"))
    assert legacy.normalized_status == "SUCCESS" and legacy.is_final
    assert not Recharge.from_payload(p.recharge(status="PROCESSING")).is_final


def test_submit_response_carries_operator_id_not_operator():
    r = Recharge.from_payload(p.submit_response())
    assert r.operator_id == 1 and r.operator is MISSING and r.status == "PROCESSING"


def test_voucher_repr_masks_codes_and_pins():
    order = OrderDetail.from_payload(p.order_detail())
    text = repr(order) + str(order.vouchers[0]) + repr(order.vouchers)
    assert "CARD-SECRET-1234" not in text and "PIN-9876" not in text and "CARD-SECRET-5678" not in text
    assert order.vouchers[0].card_number == "CARD-SECRET-1234" and order.vouchers[0].pin_code == "PIN-9876"
    assert order.vouchers[0].claim_url is None and order.vouchers[1].pin_code is MISSING
    assert "'***34'" in repr(order.vouchers[0])


def test_webhook_token_masked():
    created = WebhookCreated.from_payload({"id": 3, "name": "n", "url": "https://x", "token": "whsec_very_secret",
                                           "events": ["order.delivered"], "is_active": True, "created_at": "2024-05-01T10:00:00Z"})
    assert created.token == "whsec_very_secret"
    assert "whsec_very_secret" not in repr(created) and "whsec_very_secret" not in str(created)


def test_order_summary_upper_cases_status_and_reads_mobile(client, httpserver):
    httpserver.expect_request("/api/v1/orders").respond_with_json([p.order_summary()])
    order, = client.list_orders().items
    assert order.status == "DELIVERED" and order.raw["status"] == "delivered"
    assert order.mobile.mobile_country_code == "+91" and order.email is None and order.amount == Decimal("99.10")


def test_one_bad_record_does_not_hide_the_page(client, httpserver):
    httpserver.expect_request("/api/v1/recharges").respond_with_json([p.recharge(id=2), p.recharge(id=1, payable="x")])
    page = client.list_recharges()
    assert [r.id for r in page] == [2]
    bad, = page.malformed
    assert bad.field == "payable" and bad.body["id"] == 1


def test_voucher_expiry_is_aware():
    voucher = Voucher.from_payload({"card_number": None, "expires_at": "2025-01-01T00:00:00"})
    assert voucher.expires_at.tzinfo is timezone.utc and voucher.card_number is None
