"""One method per endpoint (Endpoints): each sends the document's method, path, query and body."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from partnerkit.client import DeliveryStats, PartnerClient, Webhook, WebhookCreated
from partnerkit.config import Config, ConfigError

from tests.client import client_payloads as p
from tests.client.client_payloads import API_SECRET

WEBHOOK = {"id": 3, "name": "orders", "url": "https://partner.example/hook", "events": ["order.delivered"],
           "is_active": True, "created_at": "2024-05-01T10:00:00Z"}

# (call, method, path, query, sent body, response)
TABLE = [
    (lambda c: c.preview_recharge(operator_id=1, amount="100"), "POST", "/api/v1/recharge/charges", {},
     {"operator_id": 1, "amount": "100"}, {"face": 100, "discount_pct": 2.5, "discount": 2.5, "payable": 97.5}),
    (lambda c: c.submit_recharge(mobile_number="9876543210", operator_id=3, amount=100, idempotency_key="abcdefgh",
                                 circle_id=2, is_postpaid=False, is_special=True, country_code="IN", nickname="mum",
                                 client_reference="cr-1", force=True),
     "POST", "/api/v1/recharges", {},
     {"mobile_number": "9876543210", "operator_id": 3, "amount": 100, "circle_id": 2, "is_postpaid": False,
      "is_special": True, "country_code": "IN", "nickname": "mum", "client_reference": "cr-1", "force": True},
     p.submit_response()),
    (lambda c: c.get_recharge(101), "GET", "/api/v1/recharges/101", {}, None, p.recharge()),
    (lambda c: c.list_recharges(), "GET", "/api/v1/recharges", {"page": "1", "limit": "50"}, None, []),
    (lambda c: c.list_operators(), "GET", "/api/v1/recharge/operators", {}, None, [{"id": 1, "name": "Airtel"}]),
    (lambda c: c.create_order(product_id=7, denomination=50, quantity=2, wallet_id=4, ref="r-1", email="a@b.c",
                              idempotency_key="order-key-1"),
     "POST", "/api/v1/orders", {}, {"product_id": 7, "denomination": 50, "quantity": 2, "wallet_id": 4, "ref": "r-1",
                                    "email": "a@b.c"}, p.order_created()),
    (lambda c: c.list_orders(page=2, limit=5, status="delivered", product_id=7), "GET", "/api/v1/orders",
     {"page": "2", "limit": "5", "status": "delivered", "product_id": "7"}, None, []),
    (lambda c: c.get_order(7001), "GET", "/api/v1/orders/7001", {}, None, p.order_detail()),
    (lambda c: c.list_categories(), "GET", "/api/v1/categories", {}, None, [{"id": 1}]),
    (lambda c: c.list_products(currency="INR", country="IN"), "GET", "/api/v1/products",
     {"currency": "INR", "country": "IN"}, None, [{"id": 7}]),
    (lambda c: c.get_product(7), "GET", "/api/v1/products/7", {}, None, {"id": 7}),
    (lambda c: c.list_wallets(), "GET", "/api/v1/wallets", {}, None, [{"currency": "INR"}]),
    (lambda c: c.list_transactions(from_date="2024-05-01", to_date="2024-05-02", order_id=7001, type="ORDER"),
     "GET", "/api/v1/transactions", {"page": "1", "limit": "50", "from_date": "2024-05-01", "to_date": "2024-05-02",
                                     "order_id": "7001", "type": "ORDER"}, None, [{"id": 1, "amount": "10.00"}]),
    (lambda c: c.list_webhooks(), "GET", "/api/v1/webhooks", {}, None, {"success": True, "data": [WEBHOOK]}),
    (lambda c: c.create_webhook(name="orders", url="https://partner.example/hook", events=["order.delivered"],
                                credential_id=101),
     "POST", "/api/v1/webhooks", {}, {"name": "orders", "url": "https://partner.example/hook",
                                      "events": ["order.delivered"], "credential_id": 101},
     {**WEBHOOK, "token": "whsec_x"}),
    (lambda c: c.get_webhook(3), "GET", "/api/v1/webhooks/3", {}, None, WEBHOOK),
    (lambda c: c.update_webhook(3, is_active=False), "PUT", "/api/v1/webhooks/3", {}, {"is_active": False}, WEBHOOK),
    (lambda c: c.delete_webhook(3), "DELETE", "/api/v1/webhooks/3", {}, None, {"success": True}),
    (lambda c: c.test_webhook(3), "POST", "/api/v1/webhooks/3/test", {}, {}, {"success": True}),
    (lambda c: c.list_deliveries(status="failed", event_type="order.delivered", order_id=7001, webhook_url_id=3),
     "GET", "/api/v1/webhooks/deliveries", {"page": "1", "limit": "20", "status": "failed",
                                            "event_type": "order.delivered", "order_id": "7001", "webhook_url_id": "3"},
     None, {"success": True, "data": {"deliveries": []}}),
    (lambda c: c.delivery_stats(), "GET", "/api/v1/webhooks/deliveries/stats", {}, None,
     {"success": True, "data": {"total_count": 3, "pending_count": 1, "delivered_count": 1, "failed_count": 1,
                                "last_24h_total": 3, "last_24h_delivered": 1, "last_24h_failed": 1}}),
    (lambda c: c.get_delivery(1), "GET", "/api/v1/webhooks/deliveries/1", {}, None, {"success": True, "data": p.delivery()}),
    (lambda c: c.retry_delivery(1), "POST", "/api/v1/webhooks/deliveries/1/retry", {}, {},
     {"success": True, "data": {"message": "queued", "delivery_id": 1}}),
]


@pytest.mark.parametrize("call, method, path, query, body, response", TABLE, ids=[row[2] + " " + row[1] for row in TABLE])
def test_endpoint(client, httpserver, call, method, path, query, body, response):
    httpserver.expect_request(path, method=method).respond_with_json(response)
    result = call(client)
    (request, _), = httpserver.log
    assert dict(request.args) == query
    sent = request.get_data()
    assert (json.loads(sent) if sent else None) == body
    assert ("X-Signature" in request.headers) is (method != "GET")
    assert result is not None or method == "DELETE"


def test_typed_results(client, httpserver):
    httpserver.expect_request("/api/v1/webhooks", method="POST").respond_with_json({**WEBHOOK, "token": "whsec_x"})
    httpserver.expect_request("/api/v1/webhooks/3").respond_with_json(WEBHOOK)
    httpserver.expect_request("/api/v1/webhooks/deliveries/stats").respond_with_json(
        {"success": True, "data": dict.fromkeys(["total_count", "pending_count", "delivered_count", "failed_count",
                                                 "last_24h_total", "last_24h_delivered", "last_24h_failed"], 2)})
    created = client.create_webhook(name="orders", url="https://partner.example/hook", events=["order.delivered"])
    assert isinstance(created, WebhookCreated) and created.token == "whsec_x" and created.events == ("order.delivered",)
    assert isinstance(client.get_webhook(3), Webhook)
    stats = client.delivery_stats()
    assert isinstance(stats, DeliveryStats) and stats.failed_count == 2


def test_delete_sends_no_body_but_is_signed_over_the_empty_body(client, httpserver):
    httpserver.expect_request("/api/v1/webhooks/3", method="DELETE").respond_with_data("", status=204)
    assert client.delete_webhook(3) is None
    (request, _), = httpserver.log
    assert request.get_data() == b"" and request.headers["X-Signature"].startswith("t=")


@pytest.mark.parametrize("missing, variable", [("api_base_url", "PARTNERKIT_API_BASE_URL"),
                                               ("api_key", "PARTNERKIT_API_KEY"), ("api_secret", "PARTNERKIT_API_SECRET")])
def test_construction_names_the_missing_setting(config, missing, variable):
    with pytest.raises(ConfigError, match=variable):
        PartnerClient(Config(**{**config.__dict__, missing: None}))


def test_secret_not_in_repr(client):
    assert API_SECRET not in repr(client) and API_SECRET not in repr(client._transport)


# Each list's status values as the document writes them: upper-case for recharges, lower-case for
# deliveries, either for orders ("case-insensitive"); a value outside the set is refused before sending.
@pytest.mark.parametrize("call, path, sent", [
    (lambda c: c.list_recharges(status="success"), "/api/v1/recharges", "SUCCESS"),
    (lambda c: c.list_recharges(status=" Processing "), "/api/v1/recharges", "PROCESSING"),
    (lambda c: c.list_deliveries(status="FAILED"), "/api/v1/webhooks/deliveries", "failed"),
    (lambda c: c.list_orders(status="partially_delivered"), "/api/v1/orders", "partially_delivered"),
    (lambda c: c.list_orders(status="DELIVERED"), "/api/v1/orders", "DELIVERED"),
])
def test_status_filters_are_sent_as_the_document_writes_them(client, httpserver, call, path, sent):
    body = {"success": True, "data": {"deliveries": []}} if "deliveries" in path else []
    httpserver.expect_request(path).respond_with_json(body)
    call(client)
    (request, _), = httpserver.log
    assert request.args["status"] == sent


@pytest.mark.parametrize("call", [lambda c: c.list_recharges(status="DONE"), lambda c: c.list_recharges(status="DELIVERED"),
                                  lambda c: c.list_orders(status="shipped"), lambda c: c.list_deliveries(status="retrying"),
                                  lambda c: c.list_deliveries(status=5)])
def test_status_outside_the_documented_values_is_refused_before_sending(client, httpserver, call):
    with pytest.raises(ValueError, match="status must be one of"):
        call(client)
    assert httpserver.log == []


@pytest.mark.parametrize("call", [lambda c: c.get_recharge(0), lambda c: c.get_order("7"), lambda c: c.get_recharge(True),
                                  lambda c: c.list_orders(limit=101), lambda c: c.list_deliveries(limit=101),
                                  lambda c: c.preview_recharge(operator_id=1, amount=10.5), lambda c: c.update_webhook(3),
                                  # the display name is not an operator_id (Resources, Recharge)
                                  lambda c: c.preview_recharge(operator_id="Airtel", amount=100),
                                  lambda c: c.submit_recharge(mobile_number="9876543210", operator_id="Airtel", amount=100),
                                  lambda c: c.submit_recharge(mobile_number="9876543210", operator_id=0, amount=100),
                                  lambda c: c.submit_recharge(mobile_number="9876543210", operator_id=3, amount=100,
                                                              circle_id="Mumbai"),
                                  # a string denomination is sent as the number it spells, so it must spell one
                                  lambda c: c.create_order(product_id=7, denomination="fifty", quantity=1),
                                  # Endpoints, POST /api/v1/orders: product_id and denomination greater than
                                  # 0, quantity minimum 1; ids are positive integers
                                  lambda c: c.create_order(product_id=0, denomination=50, quantity=1),
                                  lambda c: c.create_order(product_id="7", denomination=50, quantity=1),
                                  lambda c: c.create_order(product_id=7, denomination=0, quantity=1),
                                  lambda c: c.create_order(product_id=7, denomination="-50", quantity=1),
                                  lambda c: c.create_order(product_id=7, denomination=Decimal("NaN"), quantity=1),
                                  lambda c: c.create_order(product_id=7, denomination=50, quantity=0),
                                  lambda c: c.create_order(product_id=7, denomination=50, quantity="2"),
                                  lambda c: c.create_order(product_id=7, denomination=50, quantity=1, wallet_id=0),
                                  # filters by id: a non-id would be ignored or match nothing, silently
                                  lambda c: c.list_orders(product_id="seven"),
                                  lambda c: c.list_orders(product_id=0),
                                  lambda c: c.list_deliveries(order_id=-1),
                                  lambda c: c.list_deliveries(webhook_url_id="3a"),
                                  lambda c: c.list_transactions(order_id=0)])
def test_bad_arguments_are_refused_before_sending(client, httpserver, call):
    with pytest.raises((ValueError, TypeError)):
        call(client)
    assert httpserver.log == []


def test_with_budget_shares_the_budget_under_another_purpose(client, httpserver):
    httpserver.expect_request("/api/v1/wallets").respond_with_json([])
    client.list_wallets()
    client.with_budget("poller", wait=False).list_wallets()
    assert client.budget.usage()["general"]["by_purpose"] == {"default": 1, "poller": 1}


def test_order_create_spends_its_own_class_and_the_hour(client, httpserver):
    httpserver.expect_request("/api/v1/orders", method="POST").respond_with_json(p.order_created())
    client.create_order(product_id=7, denomination=50, quantity=2)
    usage = client.budget.usage()
    assert usage["order_create"]["used"] == 1 and usage["general"]["used"] == 1  # the safe reading of Limits


@pytest.mark.parametrize("answer", [WEBHOOK, {**WEBHOOK, "token": None}, {"success": True, "data": {**WEBHOOK, "token": ""}}])
def test_a_create_answer_without_a_token_says_what_it_may_be_and_what_to_do(client, httpserver, answer):
    """POST /webhooks is "also described as register or update", and the token is "returned only at creation":
    an answer without one names the webhook and the way to its token, not just a missing field."""
    from partnerkit.errors import MalformedResponse

    httpserver.expect_request("/api/v1/webhooks", method="POST").respond_with_json(answer)
    with pytest.raises(MalformedResponse, match=r"answered without a token \(webhook 3\): .* may have updated an "
                                                r"existing one .*`partnerkit webhooks token set ID`") as info:
        client.create_webhook(name="orders", url="https://partner.example/hook", events=["order.delivered"])
    assert info.value.field == "token" and "\n" not in str(info.value)
