"""Idempotency-Key (Limits: 8 to 256 characters) on order create and recharge submit."""

from __future__ import annotations

import pytest

from partnerkit import errors

from tests.client import client_payloads as p


def test_generated_when_not_given_and_returned(client, httpserver):
    httpserver.expect_request("/api/v1/orders", method="POST").respond_with_json(p.order_created())
    order = client.create_order(product_id=7, denomination=50, quantity=2)
    (request, _), = httpserver.log
    assert len(order.idempotency_key) == 32 and int(order.idempotency_key, 16) >= 0
    assert request.headers["Idempotency-Key"] == order.idempotency_key


def test_given_key_is_sent_unchanged(client, httpserver):
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_json(p.submit_response(status="SUCCESS"))
    result = client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="k" * 256)
    assert result.idempotency_key == "k" * 256 and httpserver.log[0][0].headers["Idempotency-Key"] == "k" * 256
    assert result.http_status == 200 and not result.accepted


@pytest.mark.parametrize("key", ["short7c", "k" * 257, "has space!", "", "abcdefgh\n", "abcdefgh\r\n", "\nabcdefgh"])
def test_invalid_key_is_refused_before_anything_is_sent(client, httpserver, key):
    with pytest.raises(ValueError, match="Idempotency-Key"):
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key=key)
    with pytest.raises(ValueError, match="Idempotency-Key"):
        client.create_order(product_id=7, denomination=50, quantity=1, idempotency_key=key)
    assert httpserver.log == []
    assert client.budget.usage()["general"]["used"] == 0


def test_key_attached_to_status_errors(client, httpserver):
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_json(
        {"error": {"message": "a matching recharge was submitted recently; resend with force=true if the repeat is intended"}},
        status=409)
    with pytest.raises(errors.DuplicateRecharge) as info:
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="dup-key-01")
    assert info.value.idempotency_key == "dup-key-01"
    # The duplicate guard is answered by a person (--force), never by the client: sent once, no force.
    (request, _), = httpserver.log
    assert info.value.retryable is False and "force" not in request.get_json()


def test_key_attached_to_a_malformed_answer(client, httpserver):
    httpserver.expect_request("/api/v1/orders", method="POST").respond_with_json(p.order_created(amount="ninety"))
    with pytest.raises(errors.MalformedResponse) as info:
        client.create_order(product_id=7, denomination=50, quantity=2, idempotency_key="order-key-77")
    assert info.value.idempotency_key == "order-key-77" and info.value.field == "amount"


def test_key_reused_on_429_retry(client, httpserver, sleeps):
    httpserver.expect_ordered_request("/api/v1/orders", method="POST").respond_with_json(
        {"error": "rate_limit_exceeded", "message": "slow down"}, status=429, headers={"Retry-After": "0"})
    httpserver.expect_ordered_request("/api/v1/orders", method="POST").respond_with_json(p.order_created())
    order = client.create_order(product_id=7, denomination=50, quantity=2)
    keys = [r.headers["Idempotency-Key"] for r, _ in httpserver.log]
    assert keys == [order.idempotency_key] * 2
    assert [r.headers["X-Signature"] is not None for r, _ in httpserver.log] == [True, True]
