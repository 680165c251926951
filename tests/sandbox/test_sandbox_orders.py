"""Orders: creation error table, immediate vs asynchronous fulfilment, list and detail."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest
import requests

ORDERS = "/api/v1/orders"

# Errors: "Order creation" table (400 and 404 rows; 401 is in test_sandbox_auth).
CREATE_ERRORS = [
    ({"product_id": "one"}, 400, "BadRequest", "Invalid request body format"),
    ({"product_id": 0}, 400, "BadRequest", "Invalid request body format"),
    ({"denomination": None}, 400, "BadRequest", "Invalid request body format"),
    ({"email": "not-an-email"}, 400, "BadRequest", "Invalid request body format"),
    ({"quantity": 0}, 400, "BadRequest", "Invalid Quantity: min"),
    ({"product_id": 3, "quantity": 51}, 400, "BadRequest",
     "Invalid quantity, allowed max quantity: 50"),
    ({"quantity": 1001}, 400, "BadRequest", "Invalid quantity, allowed max quantity: 1000"),
    ({"denomination": 150}, 400, "BadRequest", "Denomination not available for this product"),
    ({"product_id": 99}, 404, "NotFound", "Product not found"),
    ({"product_id": 5}, 404, "NotFound", "Product not found"),        # inactive
    ({"wallet_id": 3}, 404, "NotFound", "Wallet not found"),          # beta's wallet
    ({"denomination": 2000, "quantity": 1000}, 400, "BadRequest",
     "Insufficient funds in your wallet"),
]


@pytest.mark.parametrize("override,status,name,message", CREATE_ERRORS)
def test_create_error_rows(alpha, override, status, name, message):
    body = {"product_id": 1, "denomination": 100, "quantity": 1, **override}
    r = alpha.post(ORDERS, body, headers={"Idempotency-Key": "order-key-1"})
    assert (r.status_code, r.json()) == (status, {"error": name, "message": message})


def test_malformed_body_and_missing_key(alpha):
    r = alpha.post(ORDERS, raw=b"[1,2", headers={"Idempotency-Key": "order-key-1"})
    assert r.json() == {"error": "BadRequest", "message": "Invalid request body format"}
    r = alpha.post(ORDERS, {"product_id": 1, "denomination": 100, "quantity": 1})
    assert r.status_code == 400 and r.json()["error"] == "BadRequest"
    r = alpha.order(key="short")
    assert r.status_code == 400 and "8" in r.json()["message"]


def test_duplicate_reference_code(alpha):
    assert alpha.order(ref="my-ref-1").status_code == 200
    r = alpha.order(ref="my-ref-1")
    assert r.json() == {"error": "BadRequest", "message": "Duplicate reference code"}


def test_create_fault_is_500_and_rolls_back(alpha, sb):
    before = alpha.balance()
    sb.settings.faults = frozenset({"order_create"})
    r = alpha.order()
    assert r.json() == {"error": "InternalServerError", "message": "Failed to create order"}
    assert alpha.balance() == before


def test_immediate_order_shape_money_numbers_and_transaction(alpha):
    before = alpha.balance()
    r = alpha.order(product_id=1, denomination=500, quantity=3, email="a@b.co")
    assert r.status_code == 200
    body = r.json(parse_float=Decimal)
    # 3 x 500 = 1500, 2 % discount = 30.00, amount 1470.00
    assert '"amount":1470.00' in r.text and '"discount":30.00' in r.text
    assert body["status"] == "DELIVERED" and len(body["vouchers"]) == 3
    v = body["vouchers"][0]
    assert set(v) == {"card_number", "claim_url", "voucher_reference_number", "expires_at"}
    assert v["claim_url"].endswith(v["card_number"])
    assert alpha.balance() == before - Decimal("1470.00")
    txns = alpha.get("/api/v1/transactions", {"order_id": body["id"]}).json()
    assert [(t["id"], t["type"], t["amount"]) for t in txns] == [
        (body["transaction_id"], "ORDER", "1470.00")]


def test_code_with_pin_vouchers_have_pins(alpha):
    v = alpha.order(product_id=2, denomination=500).json()["vouchers"][0]
    assert v["pin_code"].isdigit() and len(v["pin_code"]) == 6


def test_ref_is_uuid_when_omitted(alpha):
    import uuid
    ref = alpha.order().json()["ref"]
    assert str(uuid.UUID(ref)) == ref


def test_same_key_replays_the_order(alpha):
    first = alpha.order(key="order-replay-1")
    again = alpha.order(key="order-replay-1", quantity=2)
    assert (again.status_code, again.text) == (200, first.text)
    assert len(alpha.get(ORDERS).json()) == 1


@pytest.mark.parametrize("product_id,quantity", [(7, 50), (8, 11)])
def test_test_products_are_always_realtime(alpha, product_id, quantity):
    body = alpha.order(product_id=product_id, denomination=10, quantity=quantity).json()
    assert body["status"] == "DELIVERED" and len(body["vouchers"]) == quantity


def _detail(api, oid):
    return api.get(f"{ORDERS}/{oid}").json()


def test_large_order_pending_processing_delivered(alpha, server):
    r = alpha.order(quantity=11)
    body = r.json()
    assert body["status"] == "PENDING" and body["vouchers"] == []
    oid = body["id"]
    assert _detail(alpha, oid)["status"] == "PENDING"
    server.advance(15)
    assert _detail(alpha, oid)["status"] == "PROCESSING"
    assert _detail(alpha, oid)["vouchers"] == []
    server.advance(15)
    detail = _detail(alpha, oid)
    assert detail["status"] == "DELIVERED" and len(detail["vouchers"]) == 11


def test_non_realtime_product_is_asynchronous_even_for_one(alpha):
    assert alpha.order(product_id=6, denomination=250).json()["status"] == "PENDING"


def test_partial_then_delivered(alpha, server):
    oid = alpha.order(ref="partial-1", quantity=4).json()["id"]
    server.advance(30)
    detail = _detail(alpha, oid)
    assert detail["status"] == "PARTIALLY_DELIVERED" and len(detail["vouchers"]) == 2
    server.advance(30)
    detail = _detail(alpha, oid)
    assert detail["status"] == "DELIVERED" and len(detail["vouchers"]) == 4


@pytest.mark.parametrize("ref,final", [("fail-1", "FAILED"), ("cancel-1", "CANCELLED")])
def test_failed_and_cancelled_are_refunded(alpha, server, ref, final):
    before = alpha.balance()
    body = alpha.order(ref=ref, quantity=2).json()
    assert body["status"] == "PENDING"
    assert alpha.balance() == before - Decimal(str(body["amount"]))
    server.advance(15)
    detail = _detail(alpha, body["id"])
    assert detail["status"] == final and detail["vouchers"] == []
    assert alpha.balance() == before
    types = [t["type"] for t in alpha.get("/api/v1/transactions", {"order_id": body["id"]}).json()]
    assert types == ["ORDER_REFUND", "ORDER"]


def test_stuck_order_stays_pending(alpha, server):
    oid = alpha.order(ref="stuck-1", quantity=20).json()["id"]
    server.advance(3600)
    assert _detail(alpha, oid)["status"] == "PENDING"


def test_conversion_from_another_currency_wallet(gamma):
    # gamma holds only USD; an INR product is paid at the configured USD->INR rate.
    before = gamma.balance("USD")
    body = gamma.order(product_id=7, denomination=100, quantity=1).json()
    txn = gamma.get("/api/v1/transactions", {"order_id": body["id"]}).json()[0]
    expected = (Decimal("100.00") / Decimal("83.25")).quantize(Decimal("0.01"))
    assert txn["currency"] == "USD" and Decimal(txn["amount"]) == expected
    assert (txn["original_amount"], txn["original_currency"]) == ("100.00", "INR")
    assert Decimal(txn["fx_rate"]) > 0
    assert gamma.balance("USD") == before - expected


def test_a_conversion_charge_is_its_own_fx_fee_debit_when_configured(gamma, server):
    response = requests.patch(f"{server.base_url}/sandbox/settings", json={"conversion_charge_pct": "1.5"}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["conversion_charge_pct"] == "1.5"
    before = gamma.balance("USD")
    body = gamma.order(product_id=7, denomination=100, quantity=1).json()
    txns = {t["type"]: t for t in gamma.get("/api/v1/transactions", {"order_id": body["id"]}).json()}
    assert set(txns) == {"ORDER", "FX_FEE"}
    debit = Decimal(txns["ORDER"]["amount"])
    charge = (debit * Decimal("1.5") / 100).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert (Decimal(txns["FX_FEE"]["amount"]), txns["FX_FEE"]["direction"]) == (charge, "DEBIT")
    assert txns["FX_FEE"]["order_id"] == body["id"] and txns["FX_FEE"]["currency"] == "USD"
    assert gamma.balance("USD") == before - debit - charge


def test_a_conversion_charge_setting_must_be_a_number_of_zero_or_more(server):
    for bad in ("-1", "lots"):
        response = requests.patch(f"{server.base_url}/sandbox/settings", json={"conversion_charge_pct": bad},
                                  timeout=10)
        assert response.status_code == 400 and "conversion_charge_pct" in response.text


def test_a_wallet_with_no_rate_to_the_product_is_never_charged(alpha, server):
    usd = next(w for w in alpha.get("/api/v1/wallets").json() if w["currency"] == "USD")
    for change in ({"conversion_charge_pct": "1"}, {"fx_rates": {}}):
        assert requests.patch(f"{server.base_url}/sandbox/settings", json=change, timeout=10).status_code == 200
    response = alpha.order(product_id=7, denomination=10, wallet_id=usd["id"])
    assert response.status_code == 400 and "Insufficient funds" in response.text


def test_usd_product_prefers_usd_wallet_then_converts(alpha, beta):
    a = alpha.order(product_id=4, denomination=50).json()
    assert alpha.get("/api/v1/transactions", {"order_id": a["id"]}).json()[0]["currency"] == "USD"
    b = beta.order(product_id=4, denomination=50).json()   # beta: INR only; 50 less 1 %
    txn = beta.get("/api/v1/transactions", {"order_id": b["id"]}).json()[0]
    # 49.50 x 83.25 = 4120.875 -> 4120.88 (half up)
    assert (txn["currency"], txn["amount"], txn["fx_rate"]) == ("INR", "4120.88", "83.25")


def test_explicit_wallet_id(alpha):
    usd = next(w for w in alpha.get("/api/v1/wallets").json() if w["currency"] == "USD")
    body = alpha.order(product_id=7, denomination=10, wallet_id=usd["id"]).json()
    txn = alpha.get("/api/v1/transactions", {"order_id": body["id"]}).json()[0]
    assert txn["wallet_id"] == usd["id"] and txn["original_currency"] == "INR"


def test_list_shape_lowercase_status_money_strings_and_headers(alpha):
    ids = [alpha.order(product_id=7, denomination=10).json()["id"] for _ in range(3)]
    pending = alpha.order(quantity=12).json()["id"]
    r = alpha.get(ORDERS, {"limit": 2})
    items = r.json()
    assert [o["id"] for o in items] == [pending, ids[2]]
    assert items[0]["status"] == "pending" and items[1]["status"] == "delivered"
    assert items[1]["amount"] == "10.00" and items[1]["denomination"] == "10.00"
    assert set(items[0]) == {"id", "product_name", "currency", "reference_code",
                             "transaction_id", "product_id", "denomination", "quantity",
                             "amount", "status", "email", "mobile", "placed_at"}
    assert (r.headers["X-Page"], r.headers["X-Per-Page"], r.headers["X-Total-Count"],
            r.headers["X-Total-Pages"]) == ("1", "2", "4", "2")
    assert [o["id"] for o in alpha.get(ORDERS, {"status": "DELIVERED"}).json()] == ids[::-1]
    assert len(alpha.get(ORDERS, {"status": "pending"}).json()) == 1
    assert len(alpha.get(ORDERS, {"product_id": 1}).json()) == 1
    assert alpha.get(ORDERS, {"limit": 500}).headers["X-Per-Page"] == "100"
    assert alpha.get(ORDERS).headers["X-Per-Page"] == "10"


def test_detail_shape_money_strings_and_404(alpha, beta):
    body = alpha.order(product_id=8, denomination=100, quantity=2).json()
    detail = _detail(alpha, body["id"])
    assert detail["amount"] == "190.00" and detail["discount"] == "10.00"
    assert detail["status"] == "DELIVERED" and detail["reference_code"] == body["ref"]
    assert [v["card_number"] for v in detail["vouchers"]] == \
        [v["card_number"] for v in body["vouchers"]]
    for path in (f"{ORDERS}/{body['id']}", f"{ORDERS}/424242", f"{ORDERS}/0", f"{ORDERS}/x"):
        r = beta.get(path)
        assert (r.status_code, r.json()) == (404, {"error": "not_found",
                                                   "message": "No Matching Result Found!"})
    assert beta.get(ORDERS).json() == []


def test_detail_fault_is_internal_error(alpha, sb):
    oid = alpha.order().json()["id"]
    sb.settings.faults = frozenset({"order_detail"})
    r = alpha.get(f"{ORDERS}/{oid}")
    assert (r.status_code, r.json()) == (500, {"error": "internal_error",
                                               "message": "Failed to retrieve order"})
