"""Payloads shaped like the document's tables (Resources and their fields), for the client tests."""

from __future__ import annotations

import json

from partnerkit.client import RetryPolicy

API_KEY = "pk_test_key_0001"
API_SECRET = "sk_test_secret_0001"

# Fast backoff so retry tests take milliseconds; Retry-After still wins over it.
FAST = RetryPolicy(max_attempts=4, base=0.01, cap=0.05, jitter=0.5)


# Money here is int: json.dumps would turn 97.5 into a float on the Python side. The exact
# 2-decimal cases (99.10) are written as raw JSON text in the tests that check them.


def recharge(**overrides) -> dict:
    payload = {
        "id": 101,
        "reference_number": "RCH-101",
        "status": "SUCCESS",
        "sub_status": "OPERATOR_CONFIRMED",
        "mobile_number": "9876543210",
        "country_code": "IN",
        "operator": "Airtel",
        "is_prepaid": True,
        "face": 100,
        "discount": 2,
        "payable": 98,
        "currency": "INR",
        "operator_txn_id": "OTX-1",
        "created_at": "2024-05-01T10:00:00Z",
    }
    payload.update(overrides)
    return payload


def submit_response(**overrides) -> dict:
    payload = {
        "id": 101,
        "reference_number": "RCH-101",
        "status": "PROCESSING",
        "sub_status": "SENT_TO_VENDOR",
        "mobile_number": "9876543210",
        "operator_id": 1,
        "face": 100,
        "discount": 2,
        "payable": 98,
        "created_at": "2024-05-01T10:00:00Z",
    }
    payload.update(overrides)
    return payload


def order_created(**overrides) -> dict:
    payload = {
        "id": 7001, "ref": "my-ref-1", "transaction_id": 9001, "amount": 99, "product_id": 7,
        "denomination": 50, "quantity": 2, "discount": 1, "status": "DELIVERED",
        "placed_at": "2024-05-01T10:00:00Z",
        "vouchers": [
            {"card_number": "CARD-SECRET-1234", "pin_code": "PIN-9876", "claim_url": None,
             "voucher_reference_number": "VR-1", "expires_at": "2025-05-01T00:00:00Z"},
            {"card_number": "CARD-SECRET-5678", "expires_at": "2025-05-01T00:00:00Z"},
        ],
    }
    payload.update(overrides)
    return payload


def order_summary(**overrides) -> dict:
    payload = {
        "id": 7001, "product_name": "Gift Card", "currency": "INR", "reference_code": "ORD-7001",
        "transaction_id": 9001, "product_id": 7, "denomination": "50.00", "quantity": 2,
        "amount": "99.10", "status": "delivered", "email": None,
        "mobile": {"mobile_country_code": "+91", "mobile_number": "9876543210"},
        "placed_at": "2024-05-01T10:00:00Z",
    }
    payload.update(overrides)
    return payload


def order_detail(**overrides) -> dict:
    payload = {
        "id": 7001, "reference_code": "ORD-7001", "transaction_id": 9001, "amount": "99.10",
        "product_id": 7, "denomination": "50.00", "quantity": 2, "discount": "0.90",
        "status": "DELIVERED", "placed_at": "2024-05-01T10:00:00Z",
        "vouchers": order_created()["vouchers"],
    }
    payload.update(overrides)
    return payload


def delivery(**overrides) -> dict:
    payload = {
        "id": 1, "webhook_url_id": 3, "order_id": 7001, "event_type": "order.delivered",
        "event_id": "evt_1", "payload": {"event_id": "evt_1"}, "status": "delivered",
        "attempt_count": 1, "max_attempts": 5, "response_status": 200, "response_time_ms": 12,
        "delivered_at": "2024-05-01T10:00:01Z", "created_at": "2024-05-01T10:00:00Z",
    }
    payload.update(overrides)
    return payload


def as_json(value) -> str:
    return json.dumps(value)
