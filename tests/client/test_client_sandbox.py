"""End to end against the sandbox (sandbox.testing.SandboxServer): the client and an independent
implementation of the document must agree on signing, money, status codes and pagination."""

from __future__ import annotations

from decimal import Decimal

import pytest

from partnerkit import errors
from sandbox.settings import SandboxSettings

from tests.client.conftest import alpha_client
from tests.sandbox_serving import serve_sandbox


@pytest.fixture(scope="module")
def server():
    with serve_sandbox(SandboxSettings(processing_delay_s=20), background=False) as running:
        yield running


@pytest.fixture
def sandbox_client(server, tmp_path):
    with alpha_client(server, tmp_path) as client:
        yield client


def _number(suffix: str, seed: int) -> str:
    return f"98{seed:07d}{suffix}"


def test_preview_quotes_decimal_money(sandbox_client):
    quote = sandbox_client.preview_recharge(operator_id=1, amount=100)
    assert (quote.face, quote.discount_pct, quote.discount, quote.payable) == (
        Decimal("100.00"), Decimal("2.50"), Decimal("2.50"), Decimal("97.50"))
    assert type(quote.payable) is Decimal


def test_submit_200_then_get(sandbox_client):
    result = sandbox_client.submit_recharge(mobile_number=_number("0", 1), operator_id=1, amount=100, client_reference="e2e-200")
    assert result.http_status == 200 and result.recharge.status == "SUCCESS" and not result.accepted
    assert result.recharge.operator_id == 1 and result.recharge.payable == Decimal("97.50")
    read = sandbox_client.get_recharge(result.recharge.id)
    assert read.reference_number == result.recharge.reference_number and read.client_reference == "e2e-200"
    assert read.operator == "Airtel" and read.circle is not None


def test_submit_202_settles_by_reading(sandbox_client, server):
    result = sandbox_client.submit_recharge(mobile_number=_number("5", 2), operator_id=2, amount=50)
    assert result.http_status == 202 and result.accepted and result.recharge.status == "PROCESSING"
    server.advance(25)
    settled = sandbox_client.get_recharge(result.recharge.id)
    assert settled.status == "SUCCESS" and settled.is_final and settled.operator_txn_id


def test_same_key_replays_and_duplicate_guard_is_named(sandbox_client):
    first = sandbox_client.submit_recharge(mobile_number=_number("1", 3), operator_id=1, amount=20, idempotency_key="e2e-replay-1")
    again = sandbox_client.submit_recharge(mobile_number=_number("1", 3), operator_id=1, amount=20, idempotency_key="e2e-replay-1")
    assert again.recharge.id == first.recharge.id
    with pytest.raises(errors.DuplicateRecharge) as info:
        sandbox_client.submit_recharge(mobile_number=_number("1", 3), operator_id=1, amount=20, idempotency_key="e2e-replay-2")
    assert info.value.status == 409 and info.value.idempotency_key == "e2e-replay-2"


def test_refusals_map_to_named_errors(sandbox_client):
    with pytest.raises(errors.InvalidRecharge, match="invalid mobile number"):
        sandbox_client.submit_recharge(mobile_number="12345", operator_id=1, amount=100)
    with pytest.raises(errors.InvalidRecharge):
        sandbox_client.preview_recharge(operator_id=999, amount=100)
    with pytest.raises(errors.NotFound):
        sandbox_client.get_recharge(999999)


def test_list_walks_every_page_to_the_last(sandbox_client):
    for i in range(5):
        sandbox_client.submit_recharge(mobile_number=_number("2", 100 + i), operator_id=1, amount=10 + i)
    everything = [r.id for r in sandbox_client.list_recharges(limit=1000)]
    walked = [r.id for r in sandbox_client.iter_recharges(limit=2)]
    assert walked == everything and len(walked) >= 5
    last_page = (len(everything) + 1) // 2
    last = sandbox_client.list_recharges(page=last_page, page_size=2)
    assert last.has_more is False and last.total_count == len(everything) and last.page == last_page
    assert sandbox_client.list_recharges(status="SUCCESS", search=_number("2", 100)).items[0].mobile_number == _number("2", 100)


def test_order_create_list_detail(sandbox_client):
    created = sandbox_client.create_order(product_id=8, denomination=Decimal("50"), quantity=2)
    assert created.status == "DELIVERED" and len(created.vouchers) == 2 and len(created.idempotency_key) == 32
    assert created.vouchers[0].pin_code and "'***" in repr(created.vouchers[0])
    assert type(created.amount) is Decimal
    summaries = list(sandbox_client.iter_orders(limit=1))
    mine = next(o for o in summaries if o.id == created.id)
    assert mine.status == "DELIVERED" and mine.raw["status"] == "delivered" and mine.amount == created.amount
    detail = sandbox_client.get_order(created.id)
    assert [v.card_number for v in detail.vouchers] == [v.card_number for v in created.vouchers]
    assert detail.amount == created.amount and detail.status == "DELIVERED"


def test_webhooks_deliveries_and_transactions(sandbox_client):
    created = sandbox_client.create_webhook(name="e2e", url="https://partner.example/hook", events=["order.delivered"])
    assert created.token and created.token not in repr(created)
    assert created.id in [w.id for w in sandbox_client.list_webhooks()]
    assert sandbox_client.update_webhook(created.id, is_active=False)["is_active"] is False
    sandbox_client.test_webhook(created.id)
    deliveries = list(sandbox_client.iter_deliveries(limit=1, webhook_url_id=created.id))
    assert deliveries and sandbox_client.get_delivery(deliveries[0].id).id == deliveries[0].id
    assert sandbox_client.delivery_stats().total_count >= 1
    sandbox_client.delete_webhook(created.id)
    with pytest.raises(errors.NotFound):
        sandbox_client.get_webhook(created.id)
    transactions = list(sandbox_client.iter_transactions(limit=2))
    assert len({t["id"] for t in transactions}) == len(transactions) >= 2


@pytest.mark.parametrize("denomination", ["50", "50.00", Decimal("50.00"), 50])
def test_order_denomination_is_sent_as_a_json_number(sandbox_client, denomination):
    # Endpoints, POST /api/v1/orders: denomination is a number (unlike a recharge amount, which
    # may be a string); the sandbox refuses a string as the provider may.
    created = sandbox_client.create_order(product_id=7, denomination=denomination, quantity=1)
    assert created.denomination == Decimal("50.00") and created.status == "DELIVERED"
