"""Request signing (Authentication 4): timestamp + METHOD + path + body, over the exact bytes sent."""

from __future__ import annotations

import hashlib
import hmac
from decimal import Decimal

import pytest
from freezegun import freeze_time

from partnerkit.client import canonical_request, encode_body, sign_request, signature_headers

from tests.client import client_payloads as p
from tests.client.client_payloads import API_KEY, API_SECRET

BODY = b'{"operator_id":1,"amount":100}'
# Computed once by hand from the document's rule; pins the wire format against refactors.
PINNED = "458d20377f1cf2052ae562f89499ca23927688cc72445da29df29a9d1840b207"


def test_signature_is_pinned():
    assert sign_request(API_SECRET, 1700000000, "POST", "/api/v1/recharge/charges", BODY) == PINNED


def test_signature_equals_an_hmac_computed_by_hand():
    message = b"1700000000" + b"POST" + b"/api/v1/recharge/charges" + BODY
    expected = hmac.new(API_SECRET.encode(), message, hashlib.sha256).hexdigest()
    assert sign_request(API_SECRET, 1700000000, "post", "/api/v1/recharge/charges", BODY) == expected


def test_canonical_request_refuses_a_query_string():
    with pytest.raises(ValueError, match="query string"):
        canonical_request(1, "POST", "/api/v1/recharges?x=1", b"")


@freeze_time("2024-05-01 10:00:00")
def test_headers_carry_timestamp_and_t_v1_form():
    headers = signature_headers(API_SECRET, "DELETE", "/api/v1/webhooks/3", b"")
    assert headers["X-Timestamp"] == "1714557600"
    assert headers["X-Signature"] == f"t=1714557600,v1={sign_request(API_SECRET, 1714557600, 'DELETE', '/api/v1/webhooks/3', b'')}"


def test_body_encoding_keeps_decimal_digits_and_refuses_float():
    assert encode_body({"amount": Decimal("10.50"), "q": 1}) == b'{"amount":10.50,"q":1}'
    with pytest.raises(TypeError, match="float"):
        encode_body({"amount": 10.5})


def test_write_on_the_wire_is_signed_over_the_bytes_received(client, httpserver):
    httpserver.expect_request("/api/v1/recharge/charges", method="POST").respond_with_json(
        {"face": 100, "discount_pct": 2.5, "discount": 2.5, "payable": 97.5})
    client.preview_recharge(operator_id=1, amount=Decimal("100"))
    (request, _), = httpserver.log
    ts = request.headers["X-Timestamp"]
    sent = request.get_data()
    expected = hmac.new(API_SECRET.encode(), ts.encode() + b"POST" + request.path.encode() + sent, hashlib.sha256).hexdigest()
    assert request.headers["X-Signature"] == f"t={ts},v1={expected}"
    assert request.path == "/api/v1/recharge/charges"
    assert sent == b'{"operator_id":1,"amount":100}'
    assert request.headers["X-API-Key"] == API_KEY and request.headers["X-API-Secret"] == API_SECRET


def test_reads_carry_credentials_but_no_signature(client, httpserver):
    httpserver.expect_request("/api/v1/recharges/101", method="GET").respond_with_json(p.recharge())
    client.get_recharge(101)
    (request, _), = httpserver.log
    assert request.headers["X-API-Key"] == API_KEY
    assert "X-Signature" not in request.headers and "X-Timestamp" not in request.headers


def test_a_write_with_params_is_refused_before_sending(client, httpserver):
    with pytest.raises(ValueError, match="query string"):
        client._transport.request("POST", "/api/v1/webhooks", spend=client._spend, params={"a": 1})
    assert httpserver.log == []
