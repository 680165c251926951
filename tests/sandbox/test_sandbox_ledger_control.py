"""Wallets, transactions, catalog, control endpoints, and the pure money/clock helpers."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from sandbox import SandboxClock
from sandbox.money import dumps, loads, parse_amount

TXNS = "/api/v1/transactions"


def test_wallets_shape(alpha, beta):
    wallets = alpha.get("/api/v1/wallets").json()
    assert [(w["currency"], w["balance"]) for w in wallets] == [("INR", "1000000.00"),
                                                                ("USD", "5000.00")]
    assert set(wallets[0]) == {"id", "currency", "balance", "updated_at"}
    assert [w["currency"] for w in beta.get("/api/v1/wallets").json()] == ["INR"]


def test_balance_after_is_consistent_through_debits_and_refunds(alpha, server):
    alpha.recharge(mobile="9000000000")
    alpha.recharge(mobile="9000000014")
    alpha.recharge(mobile="9000000026")
    alpha.order(ref="fail-z", quantity=2)
    server.advance(30)
    txns = sorted((t for t in alpha.get(TXNS, {"limit": 100}).json() if t["currency"] == "INR"),
                  key=lambda t: t["id"])
    balance = Decimal(0)
    for t in txns:
        balance += Decimal(t["amount"]) * (1 if t["direction"] == "CREDIT" else -1)
        assert Decimal(t["balance_after"]) == balance, t
    assert balance == alpha.balance()
    assert {t["type"] for t in txns} == {"TOPUP", "RECHARGE", "RECHARGE_REFUND", "ORDER",
                                         "ORDER_REFUND"}


def test_transactions_paging_filters_and_headers(alpha, server):
    for _ in range(3):
        alpha.order(product_id=7, denomination=10)
    server.advance(86400)
    alpha.recharge(mobile="9000000000")
    r = alpha.get(TXNS, {"limit": 2})
    assert (r.headers["X-Page"], r.headers["X-Per-Page"], r.headers["X-Total-Count"],
            r.headers["X-Total-Pages"], r.headers["X-Has-More"]) == ("1", "2", "6", "3", "true")
    ids = [t["id"] for t in alpha.get(TXNS, {"limit": 100}).json()]
    assert ids == sorted(ids, reverse=True)
    assert [t["type"] for t in alpha.get(TXNS, {"type": "order"}).json()] == ["ORDER"] * 3
    assert len(alpha.get(TXNS, {"from_date": "2025-03-11"}).json()) == 1
    assert len(alpha.get(TXNS, {"to_date": "2025-03-10"}).json()) == 5
    assert alpha.get(TXNS, {"from_date": "bad"}).status_code == 400
    assert alpha.get(TXNS, {"limit": 2, "page": 3}).headers["X-Has-More"] == "false"


def test_catalog(alpha):
    assert [c["id"] for c in alpha.get("/api/v1/categories").json()] == [1, 2, 3]
    products = alpha.get("/api/v1/products").json()
    assert 5 not in [p["id"] for p in products]                    # inactive
    assert [p["id"] for p in alpha.get("/api/v1/products", {"currency": "usd"}).json()] == [4]
    assert [p["id"] for p in alpha.get("/api/v1/products", {"country": "US"}).json()] == [4]
    p7 = alpha.get("/api/v1/products/7").json()
    assert p7["realtime"] is True and p7["is_test_product"] is True
    assert p7["denominations"] == ["10.00", "50.00", "100.00"]
    assert p7["availability"] == "in_stock"
    r = alpha.get("/api/v1/products/5")
    assert r.status_code == 404 and r.json()["error"]["code"] == "PRODUCT_NOT_FOUND"


def test_control_clock_and_settings(alpha, server):
    before = datetime.fromisoformat(alpha.control("GET", "/clock").json()["now"])
    after = alpha.control("POST", "/clock/advance", {"seconds": 90}).json()
    assert datetime.fromisoformat(after["now"]) - before == timedelta(seconds=90)
    r = alpha.control("PATCH", "/settings", {"hourly_limit": 5, "faults": ["pricing"]})
    assert r.json()["hourly_limit"] == 5
    assert r.json()["faults"] == {"pricing": {"scope": ["all"], "rate": 1.0}}
    assert alpha.control("PATCH", "/settings", {"nope": 1}).status_code == 400
    alpha.control("PATCH", "/settings", {"clients": {"beta": {"paused": True}}})
    assert server.sandbox.clients["pk_sandbox_beta"].paused is True
    keys = [c["key"] for c in alpha.control("GET", "/clients").json()]
    assert keys == ["pk_sandbox_alpha", "pk_sandbox_beta", "pk_sandbox_gamma"]


def test_control_settle_without_refund_plants_missing_refund(alpha):
    rid = alpha.recharge(mobile="9000000008").json()["id"]
    before = alpha.balance()
    r = alpha.control("POST", f"/recharges/{rid}/settle", {"status": "FAILED", "refund": False})
    assert r.json()["status"] == "FAILED"
    assert alpha.balance() == before
    assert [t["type"] for t in alpha.get(TXNS, {"recharge_id": rid}).json()] == ["RECHARGE"]
    again = alpha.control("POST", f"/recharges/{rid}/settle", {"status": "SUCCESS"})
    assert again.status_code == 409


def test_control_settle_with_refund(alpha):
    rid = alpha.recharge(mobile="9000000008").json()["id"]
    alpha.control("POST", f"/recharges/{rid}/settle", {"status": "REVERSED"})
    assert [t["type"] for t in alpha.get(TXNS, {"recharge_id": rid}).json()] == [
        "RECHARGE_REFUND", "RECHARGE"]


def test_control_forget_recharge(alpha):
    rid = alpha.recharge().json()["id"]
    assert alpha.control("DELETE", f"/recharges/{rid}").status_code == 200
    assert alpha.get(f"/api/v1/recharges/{rid}").status_code == 404
    assert len(alpha.get(TXNS, {"recharge_id": rid}).json()) == 1     # debit remains


def test_control_transactions_inject_alter_delete(alpha, beta):
    planted = alpha.control("POST", "/transactions", {
        "client": "beta", "type": "RECHARGE", "direction": "DEBIT", "amount": "12.34",
        "reference_number": "RCH-GHOST", "created_at": "2025-03-09T08:00:00Z"}).json()
    assert planted["created_at"].startswith("2025-03-09T08:00:00")
    listed = beta.get(TXNS, {"type": "RECHARGE"}).json()
    assert [t["reference_number"] for t in listed] == ["RCH-GHOST"]
    assert beta.balance() == Decimal("500000.00") - Decimal("12.34")
    altered = alpha.control("PATCH", f"/transactions/{planted['id']}", {"amount": "99.99"}).json()
    assert altered["amount"] == "99.99" and altered["balance_after"] == planted["balance_after"]
    restamped = alpha.control("PATCH", f"/transactions/{planted['id']}", {"created_at": "2025-03-08T23:59:59.950+05:30"})
    assert restamped.json()["created_at"] == "2025-03-08T18:29:59.950Z" and restamped.json()["amount"] == "99.99"
    assert beta.get(TXNS, {"from_date": "2025-03-08", "to_date": "2025-03-08"}).json()[0]["id"] == planted["id"]
    for bad in ({}, {"created_at": "yesterday"}, {"amount": "-1"}):
        assert alpha.control("PATCH", f"/transactions/{planted['id']}", bad).status_code == 400
    assert alpha.control("DELETE", f"/transactions/{planted['id']}").status_code == 200
    assert beta.get(TXNS, {"type": "RECHARGE"}).json() == []


def test_control_order_state(alpha, receiver, server):
    alpha.post("/api/v1/webhooks", {"name": "h", "url": receiver.url,
                                    "events": ["order.partially_delivered", "order.cancelled"]})
    oid = alpha.order(ref="stuck-9", quantity=20).json()["id"]
    r = alpha.control("POST", f"/orders/{oid}/state",
                      {"status": "PARTIALLY_DELIVERED", "delivered_quantity": 7})
    assert r.json()["status"] == "PARTIALLY_DELIVERED" and len(r.json()["vouchers"]) == 7
    before = alpha.balance()
    r = alpha.control("POST", f"/orders/{oid}/state", {"status": "CANCELLED", "refund": False})
    assert r.json()["vouchers"] == [] and alpha.balance() == before
    server.run_due()
    assert [x["headers"]["X-Event-Type"] for x in receiver.requests] == [
        "order.partially_delivered", "order.cancelled"]


def test_control_topup(alpha, gamma):
    alpha.control("POST", "/wallets/topup", {"client": "gamma", "currency": "INR", "amount": 500})
    assert gamma.balance("INR") == Decimal("500.00")
    assert gamma.recharge().status_code == 200                # now has an INR wallet


@pytest.mark.parametrize("value,expected", [(100, Decimal(100)), ("100", Decimal(100)),
                                            (Decimal("99.50"), Decimal("99.50")),
                                            (" 7 ", Decimal(7)), (True, None), ("abc", None),
                                            ("NaN", None), (None, None), ([1], None)])
def test_parse_amount(value, expected):
    assert parse_amount(value) == expected


def test_dumps_renders_decimals_as_two_decimal_numbers():
    assert dumps({"a": Decimal("99.5"), "b": [Decimal("-1"), "x"], "c": 3}) == \
        '{"a":99.50,"b":[-1.00,"x"],"c":3}'
    assert loads('{"x": 0.1}') == {"x": Decimal("0.1")}


def test_clock_speed_advance_and_freeze():
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    frozen = SandboxClock(speed=0, start=start)
    assert frozen.now() == start
    assert frozen.advance(61) == start + timedelta(seconds=61)
    fast = SandboxClock(speed=1000, start=start)
    import time
    time.sleep(0.01)
    assert fast.now() - start >= timedelta(seconds=10)
    with pytest.raises(ValueError, match="only moves forward"):
        frozen.advance(-1)
    with pytest.raises(ValueError, match="aware"):
        SandboxClock(start=datetime(2025, 1, 1))


def test_serve_prints_credentials_and_new_webhook_tokens(monkeypatch):
    import threading
    import requests
    import sandbox
    from sandbox import testing
    lines, started = [], threading.Event()
    servers = []
    real_init = testing.SandboxServer.__init__

    def capture(self, *a, **kw):
        real_init(self, *a, **kw)
        servers.append(self)
        started.set()
    monkeypatch.setattr(testing.SandboxServer, "__init__", capture)
    thread = threading.Thread(target=sandbox.serve, kwargs={"port": 0, "echo": lines.append},
                              daemon=True)
    thread.start()
    assert started.wait(30)
    srv = servers[0]
    import time
    deadline = time.monotonic() + 30  # the banner is printed by a thread of a busy machine
    while not any("Ctrl-C" in x for x in lines):
        assert time.monotonic() < deadline, lines
        time.sleep(0.02)
    assert any(srv.base_url in x for x in lines)
    assert any("pk_sandbox_alpha" in x and "sk_sandbox_alpha_" in x for x in lines)
    srv.sandbox.settings.require_signatures = False
    r = requests.post(srv.base_url + "/api/v1/webhooks",
                      json={"name": "n", "url": "http://127.0.0.1:9/x",
                            "events": ["order.created"]},
                      headers={"X-API-Key": srv.clients[0].key,
                               "X-API-Secret": srv.clients[0].secret})
    assert r.status_code == 201
    assert any(r.json()["token"] in x for x in lines)
    srv.stop()
    thread.join(30)
    assert not thread.is_alive()
