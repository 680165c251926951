"""Recharge preview and submit: every row of both error tables, pricing, outcomes, replay."""
from __future__ import annotations

from decimal import Decimal

import pytest

PREVIEW = "/api/v1/recharge/charges"
SUBMIT = "/api/v1/recharges"

# Errors: "Recharge charge preview" table.
PREVIEW_ERRORS = [
    ({"amount": 100}, "operator_id is required"),
    ({"operator_id": 0, "amount": 100}, "operator_id is required"),
    ({"operator_id": 1, "amount": 0}, "amount must be greater than zero"),
    ({"operator_id": 1, "amount": "-10"}, "amount must be greater than zero"),
    ({"operator_id": 1}, "amount must be greater than zero"),
    ({"operator_id": 1, "amount": 99.5}, "amount must be a whole rupee"),
    ({"operator_id": 1, "amount": "100.01"}, "amount must be a whole rupee"),
    ({"operator_id": 999, "amount": 100}, "unknown operator_id"),
    ({"operator_id": 5, "amount": 100}, "unknown operator_id"),          # inactive
]


@pytest.mark.parametrize("body,message", PREVIEW_ERRORS)
def test_preview_error_rows(alpha, body, message):
    r = alpha.post(PREVIEW, body)
    assert r.status_code == 400
    assert r.json() == {"error": {"message": message}}


def test_preview_of_an_amount_too_large_to_count_in_cents_is_refused_not_a_500(alpha):
    r = alpha.post(PREVIEW, {"operator_id": 1, "amount": "1E+30"})
    assert (r.status_code, r.json()) == (400, {"error": {"message": "invalid request body"}})


def test_preview_malformed_json(alpha):
    r = alpha.post(PREVIEW, raw=b'{"operator_id": 1,')
    assert (r.status_code, r.json()) == (400, {"error": {"message": "invalid request body"}})


def test_preview_pricing_fault_is_500(alpha, sb):
    sb.settings.faults = frozenset({"pricing"})
    r = alpha.post(PREVIEW, {"operator_id": 1, "amount": 100})
    assert r.status_code == 500
    assert "message" in r.json()["error"]


def test_preview_quote_two_decimals_half_up(alpha):
    # alpha: Airtel 2.50 %; 199 * 2.5 / 100 = 4.975 -> 4.98 (half up); payable 194.02
    r = alpha.post(PREVIEW, {"operator_id": 1, "amount": "199"})
    assert r.status_code == 200
    assert r.text == '{"face":199.00,"discount_pct":2.50,"discount":4.98,"payable":194.02}'
    assert r.headers["Cache-Control"] == "no-store"


def test_preview_string_and_number_are_equivalent_and_no_discount_means_zero(alpha, gamma):
    assert alpha.post(PREVIEW, {"operator_id": 2, "amount": 250}).text == \
        alpha.post(PREVIEW, {"operator_id": 2, "amount": "250"}).text
    q = gamma.post(PREVIEW, {"operator_id": 1, "amount": 100}).json(parse_float=Decimal)
    assert q == {"face": Decimal("100.00"), "discount_pct": Decimal("0.00"),
                 "discount": Decimal("0.00"), "payable": Decimal("100.00")}


def test_preview_places_nothing(alpha, sb):
    before = alpha.balance()
    alpha.post(PREVIEW, {"operator_id": 1, "amount": 100})
    assert alpha.balance() == before
    assert alpha.get(SUBMIT).json() == []


# Errors: "Recharge submit" table, rows answered before anything is created.
SUBMIT_ERRORS = [
    ({"mobile_number": "98765 43210"}, 400, "invalid mobile number: digits only"),
    ({"mobile_number": "+919876543210"}, 400, "invalid mobile number: digits only"),
    ({"mobile_number": "987654321"}, 400, "invalid mobile number: expected 10 digits"),
    ({"amount": "100.50"}, 400, "amount must be a whole rupee greater than zero"),
    ({"amount": 0}, 400, "amount must be a whole rupee greater than zero"),
    ({"amount": -5}, 400, "amount must be a whole rupee greater than zero"),
    ({"amount": "1E+30"}, 400, "amount must be a whole rupee greater than zero"),  # no cent countable: not a 500
    ({"operator_id": 0}, 400, "operator_id is required"),
    ({"operator_id": None}, 400, "operator_id is required"),
    ({"operator_id": 77}, 400, "unknown operator"),
    ({"operator_id": 3, "circle_id": 99}, 400, "unknown circle"),
    ({"operator_id": 3}, 400, "circle_id is required for this operator"),
    ({"operator_id": 4, "circle_id": 1, "is_postpaid": True}, 400,
     "operator does not support postpaid recharge"),
    ({"operator_id": 2, "is_special": True}, 400, "operator does not support special recharge"),
    ({"operator_id": 6}, 400, "operator is not mapped to the recharge vendor"),
    ({"nickname": "my phone"}, 400, "nickname must be alphanumeric, max 40 characters"),
    ({"nickname": "a" * 41}, 400, "nickname must be alphanumeric, max 40 characters"),
]


@pytest.mark.parametrize("override,status,message", SUBMIT_ERRORS)
def test_submit_validation_rows(alpha, override, status, message):
    body = {"mobile_number": "9876543210", "operator_id": 1, "amount": 100, **override}
    r = alpha.post(SUBMIT, body, headers={"Idempotency-Key": "key-12345678"})
    assert r.status_code == status
    assert r.json()["error"]["message"].startswith(message)
    assert alpha.get(SUBMIT).json() == []          # nothing was created


def test_operator_that_supports_no_prepaid(alpha, sb):
    sb.operators[2].supports_prepaid = False
    r = alpha.recharge(operator_id=2)
    assert r.json() == {"error": {"message": "operator does not support prepaid recharge"}}


@pytest.mark.parametrize("headers,message", [
    ({}, "IDEMPOTENCY_KEY_REQUIRED"),
    ({"Idempotency-Key": "short"}, "IDEMPOTENCY_KEY_TOO_SHORT"),
])
def test_idempotency_key_rows(alpha, headers, message):
    r = alpha.post(SUBMIT, {"mobile_number": "9876543210", "operator_id": 1, "amount": 10},
                   headers=headers)
    assert (r.status_code, r.json()) == (400, {"error": {"message": message}})


def test_idempotency_key_of_8_and_256_characters_is_accepted(alpha):
    assert alpha.recharge(mobile="9000000001", key="k" * 8).status_code == 200
    assert alpha.recharge(mobile="9000000002", key="k" * 256).status_code == 200


@pytest.mark.parametrize("patch,status,message", [
    ({"recharge_enabled": False}, 403, "recharge is not enabled for this client"),
    ({"api_enabled": False}, 403, "recharge over the API is not enabled for this client"),
    ({"prepaid_enabled": False}, 403, "this recharge type is not enabled for this client"),
    ({"blocked_operators": [1]}, 403, "this operator is not enabled for this client"),
    ({"paused": True}, 503, "recharge is temporarily paused for this client"),
])
def test_client_enablement_rows(alpha, patch, status, message):
    assert alpha.control("PATCH", "/clients/alpha", patch).status_code == 200
    r = alpha.recharge()
    assert (r.status_code, r.json()) == (status, {"error": {"message": message}})


def test_seeded_beta_has_postpaid_off_and_bsnl_blocked(beta):
    r = beta.recharge(is_postpaid=True)
    assert r.json()["error"]["message"] == "this recharge type is not enabled for this client"
    r = beta.recharge(operator_id=4, circle_id=1)
    assert r.json()["error"]["message"] == "this operator is not enabled for this client"


def test_kill_switch_is_503(alpha):
    alpha.control("PATCH", "/settings", {"recharge_enabled": False})
    r = alpha.recharge()
    assert (r.status_code, r.json()) == (503, {"error": {"message":
                                                         "recharge is temporarily unavailable"}})


def test_no_inr_wallet_is_404(gamma):
    r = gamma.recharge()
    assert (r.status_code, r.json()) == (404, {"error": {"message":
                                                         "no INR wallet found for this client"}})


def test_insufficient_balance(beta, sb):
    r = beta.recharge(amount=600000)
    assert (r.status_code, r.json()) == (400, {"error": {"message": "insufficient wallet balance"}})


def test_fractional_amount_is_never_rounded(alpha):
    r = alpha.recharge(amount=99.99)
    assert r.status_code == 400
    assert alpha.get(SUBMIT).json() == []


def test_success_shape_and_wallet_debited_by_payable(alpha):
    before = alpha.balance()
    r = alpha.recharge(mobile="9876543210", amount="199", client_reference="ord-42",
                       nickname="Mom")
    assert r.status_code == 200
    body = r.json(parse_float=Decimal)
    assert body["status"] == "SUCCESS" and body["operator_id"] == 1
    assert (body["face"], body["discount"], body["payable"]) == (
        Decimal("199.00"), Decimal("4.98"), Decimal("194.02"))
    assert body["client_reference"] == "ord-42" and body["operator_txn_id"]
    assert "failure_reason" not in body and "operator" not in body
    assert '"payable":194.02' in r.text
    assert alpha.balance() == before - Decimal("194.02")
    txns = alpha.get("/api/v1/transactions", {"recharge_id": body["id"]}).json()
    assert [(t["type"], t["direction"], t["amount"], t["reference_number"]) for t in txns] == [
        ("RECHARGE", "DEBIT", "194.02", body["reference_number"])]


def test_immediate_failure_is_200_and_credited_back(alpha):
    before = alpha.balance()
    r = alpha.recharge(mobile="9876543214")
    body = r.json()
    assert r.status_code == 200 and body["status"] == "FAILED"
    assert body["failure_reason"] and "operator_txn_id" not in body
    assert alpha.balance() == before
    types = [t["type"] for t in alpha.get("/api/v1/transactions",
                                          {"recharge_id": body["id"]}).json()]
    assert types == ["RECHARGE_REFUND", "RECHARGE"]


@pytest.mark.parametrize("digit,final,refunded", [("5", "SUCCESS", False), ("6", "FAILED", True),
                                                  ("7", "REVERSED", True)])
def test_processing_settles_after_the_delay(alpha, server, digit, final, refunded):
    before = alpha.balance()
    r = alpha.recharge(mobile="987654321" + digit)
    assert r.status_code == 202 and r.json()["status"] == "PROCESSING"
    rid = r.json()["id"]
    detail = alpha.get(f"{SUBMIT}/{rid}").json()
    assert "updated_at" not in detail and "operator_txn_id" not in detail
    server.advance(19)
    assert alpha.get(f"{SUBMIT}/{rid}").json()["status"] == "PROCESSING"
    server.advance(1)
    detail = alpha.get(f"{SUBMIT}/{rid}").json()
    assert detail["status"] == final and "updated_at" in detail
    assert ("operator_txn_id" in detail) == (final == "SUCCESS")
    assert ("failure_reason" in detail) == (final != "SUCCESS")
    payable = Decimal(str(r.json()["payable"]))
    assert alpha.balance() == (before if refunded else before - payable)


def test_digit_8_never_settles_and_has_no_vendor_id(alpha, server):
    r = alpha.recharge(mobile="9876543218")
    assert r.status_code == 202 and "vendor_recharge_id" not in r.json()
    server.advance(86400)
    assert alpha.get(f"{SUBMIT}/{r.json()['id']}").json()["status"] == "PROCESSING"


def test_same_key_replays_original_status_and_body(alpha, server):
    first = alpha.recharge(mobile="9876543215", key="replay-key-1")
    server.advance(30)                                   # settled meanwhile
    again = alpha.recharge(mobile="9876543215", key="replay-key-1")
    assert (again.status_code, again.text) == (202, first.text)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(alpha.get(SUBMIT).json()) == 1


def test_replay_expires_after_24_hours(alpha, server):
    alpha.recharge(mobile="9876543210", key="replay-key-2")
    server.advance(86401)
    again = alpha.recharge(mobile="9876543210", key="replay-key-2")
    assert again.status_code == 200
    assert len(alpha.get(SUBMIT).json()) == 2


def test_idempotency_keys_are_per_client(alpha, beta):
    a = alpha.recharge(mobile="9876543210", key="shared-key-1")
    b = beta.recharge(mobile="9876543210", key="shared-key-1")
    assert a.json()["id"] != b.json()["id"]


def test_digit_9_commits_then_answers_500_and_replay_gives_the_202(alpha, server):
    r = alpha.recharge(mobile="9876543219", key="fault-key-1", client_reference="c-9")
    assert r.status_code == 500 and r.content == b""
    listed = alpha.get(SUBMIT, {"search": "9876543219"}).json()
    assert len(listed) == 1 and listed[0]["client_reference"] == "c-9"
    again = alpha.recharge(mobile="9876543219", key="fault-key-1")
    assert again.status_code == 202 and again.json()["id"] == listed[0]["id"]


def test_duplicate_guard_and_force(alpha, server):
    assert alpha.recharge(mobile="9876543210", amount=100).status_code == 200
    dup = alpha.recharge(mobile="9876543210", amount="100")
    assert dup.status_code == 409
    assert dup.json() == {"error": {"message": "a matching recharge was submitted recently; "
                                               "resend with force=true if the repeat is intended"}}
    assert alpha.recharge(mobile="9876543210", amount=101).status_code == 200
    assert alpha.recharge(mobile="9876543210", amount=100, force=True).status_code == 200
    server.advance(121)
    assert alpha.recharge(mobile="9876543210", amount=100).status_code == 200


def test_duplicate_guard_is_per_client(alpha, beta):
    assert alpha.recharge(mobile="9876543210").status_code == 200
    assert beta.recharge(mobile="9876543210").status_code == 200


def test_slow_response_control(alpha, sb):
    import time
    # Another number than those named answers without the delay: a minute's delay that only a delayed answer
    # can reach, against a bound of half of it (an undelayed answer takes milliseconds, a loaded machine's too).
    sb.settings.update({"response_delay_s": 60, "response_delay_numbers": ["9876543215"]})
    started = time.monotonic()
    assert alpha.recharge(mobile="9876543211").status_code == 200
    assert time.monotonic() - started < 30, "the delay is for the numbers named only"
    # A named number's answer comes after the delay: the sandbox sleeps it after the request arrived, so all of
    # it lies between the two readings of the clock, however busy the machine.
    sb.settings.update({"response_delay_s": 1.5})
    started = time.monotonic()
    assert alpha.recharge(mobile="9876543215").status_code == 202
    assert time.monotonic() - started >= 1.5


def test_operators_endpoint(alpha):
    ops = {o["id"]: o for o in alpha.get("/api/v1/recharge/operators").json()}
    assert ops[3]["requires_circle"] is True and ops[5]["is_active"] is False
    assert ops[1] == {"id": 1, "name": "Airtel", "country_code": "IN", "is_active": True,
                      "supports_prepaid": True, "supports_postpaid": True,
                      "supports_special": True, "requires_circle": False}


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_without_content_type_application_json_is_refused(alpha, content_type):
    # Recharge submit: "Content-Type application/json (required)"; Endpoints: JSON bodies use it.
    headers = {"Idempotency-Key": "ctype-key-1", "Content-Type": content_type}
    body = {"mobile_number": "9876543210", "operator_id": 1, "amount": 100}
    r = alpha.post(SUBMIT, body, headers=headers)
    assert (r.status_code, r.json()) == (400, {"error": {"message": "invalid request body"}})
    assert "Content-Type" in r.headers["X-Sandbox-Reason"]
    assert alpha.get(SUBMIT).json() == []                        # nothing was created
    preview = alpha.post(PREVIEW, {"operator_id": 1, "amount": 100}, headers={"Content-Type": content_type})
    assert (preview.status_code, preview.json()) == (400, {"error": {"message": "invalid request body"}})
    order = alpha.post("/api/v1/orders", {"product_id": 7, "denomination": 10, "quantity": 1},
                       headers={"Idempotency-Key": "ctype-order-1", "Content-Type": content_type})
    assert (order.status_code, order.json()) == (400, {"error": "BadRequest", "message": "Invalid request body format"})


def test_content_type_with_a_charset_is_accepted(alpha):
    r = alpha.post(PREVIEW, {"operator_id": 1, "amount": 100},
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200
