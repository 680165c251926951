"""A webhook never overwrites a fact the provider's API gave (session 20).

The order list, the order detail and the create answer carry the order's amount ("Total") and quantity
("Units"); a webhook carries an `amount` (main form), a `total_amount` (`order_id` form) or a `total_vouchers`
(`timestamp` form), which the document never ties to them. An event delivered late or again after the order sync
used to write its figures over the list's, and the matcher then held the ORDER debit against the event's amount.
Now a webhook only fills a field the row lacks; the API's sources overwrite as before; the status still moves
forward on any event.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from partnerkit.store import orders
from partnerkit.vouchers import catch_up_orders, run_voucher_fetches
from tests.receiver.conftest import post
from tests.receiver.test_order_identity import PLACED, listed
from tests.receiver.test_vouchers import NOW, detail, order_item, queue

LISTED = order_item(101, "processing", PLACED)  # ref R101, 2 x 500.00, amount 1000.00


def event(form: str, event_id: str, *, status: str = "DELIVERED", amount: str | None = None,
          quantity: int | None = None) -> bytes:
    """An event of order 101 in one of the document's three envelope forms (its ref and denomination are the
    listed order's, so it is that order's event)."""
    at = "2024-05-01T10:05:00Z"
    kind = f"order.{status.lower()}"
    if form == "order_id":
        data = {"order_id": 101, "status": status, "total_amount": amount, "currency": "INR"}
        return json.dumps({"event": kind, "event_id": event_id, "created_at": at, "data": data}).encode()
    if form == "timestamp":
        data = {"order_id": 101, "ref": "R101", "status": status, "vouchers_ready": 0, "total_vouchers": quantity}
        return json.dumps({"event": kind, "timestamp": at, "data": data}).encode()
    data = {"id": 101, "reference_code": "R101", "status": status, "sub_status": "", "product_name": "Gift Card",
            "denomination": "500.00", "quantity": quantity, "amount": amount, "delivered_quantity": 0,
            "delivered_on": None, "created_at": at}
    return json.dumps({"event_id": event_id, "event_type": kind, "created_at": at, "data": data}).encode()


# What each form says of the order's figures, none of them the list's: the main form's amount and quantity, the
# `order_id` form's total_amount, the `timestamp` form's total_vouchers.
LATE_EVENTS = [("standard", {"amount": "1200.00", "quantity": 3}), ("order_id", {"amount": "1300.00"}),
               ("timestamp", {"quantity": 5})]


def figures(db) -> tuple:
    row = orders.get(db, 101)
    return row["amount_cents"], row["quantity"]


def deliver(client, form: str, event_id: str, **facts) -> None:
    answer = post(client, event(form, event_id, **facts))
    assert (answer.status_code, answer.get_json()) == (200, {"status": "accepted"})


@pytest.mark.parametrize("known_from", ["sync", "detail"])
def test_an_event_after_the_api_never_changes_the_orders_amount_or_quantity(
        known_from, api_config, store, api, httpserver, client):
    if known_from == "sync":
        listed(httpserver, LISTED)
        catch_up_orders(api_config, store, api, since=NOW - timedelta(hours=1), now=NOW)
    else:
        httpserver.expect_request("/api/v1/orders/101").respond_with_json({**detail(), "reference_code": "R101"})
        queue(store)
        assert run_voucher_fetches(api_config, store, api, now=NOW).done == 1
    assert figures(store) == (100000, 2)
    for n, (form, facts) in enumerate(LATE_EVENTS):
        deliver(client, form, f"evt_late_{n}", **facts)
        assert figures(store) == (100000, 2), f"the {form} form's {facts} written over the API's"
    assert orders.get(store, 101)["status"] == "DELIVERED"  # the events still move the order forward


def test_an_order_first_heard_of_by_webhook_takes_the_syncs_figures_and_keeps_them(
        api_config, store, api, httpserver, client):
    deliver(client, "standard", "evt_first", status="PROCESSING", amount="1200.00", quantity=3)
    assert figures(store) == (120000, 3)
    deliver(client, "order_id", "evt_second", status="PROCESSING", amount="1300.00")
    assert figures(store) == (120000, 3), "a webhook fills what the row lacks, never what an earlier event gave"

    listed(httpserver, LISTED)
    catch_up_orders(api_config, store, api, since=NOW - timedelta(hours=1), now=NOW)
    assert figures(store) == (100000, 2), "the order list's figures replace the events'"
    deliver(client, "standard", "evt_redelivered", amount="1200.00", quantity=3)
    assert figures(store) == (100000, 2)


def test_an_order_known_only_from_webhooks_keeps_what_its_events_gave(client, store):
    deliver(client, "timestamp", "evt_ts", status="PROCESSING", quantity=2)  # a quantity, no amount
    assert figures(store) == (None, 2)
    deliver(client, "standard", "evt_main", amount="1000.00", quantity=2)  # the amount it lacked
    assert figures(store) == (100000, 2)
    deliver(client, "order_id", "evt_oid", amount=None)  # shows no figure: blanks none
    assert figures(store) == (100000, 2) and orders.get(store, 101)["status"] == "DELIVERED"
