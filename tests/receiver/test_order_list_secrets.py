"""A list record the order sync quarantines is kept as received, less what redeems a voucher.

The order list shows no vouchers (Orders, "List"); the quarantine keeps records in a plain table, where vouchers
are sealed at rest. A provider that added them to list records must not have their codes, PINs or claim URLs
stored in clear: `vouchers`, `card_number`, `pin_code` and `claim_url` are dropped, at any depth, before a record
is held. A real sync against a loopback provider (pytest-httpserver); the whole database is searched after.
"""

from __future__ import annotations

import json
from datetime import timedelta

from partnerkit.store import quarantine
from partnerkit.vouchers import catch_up_orders
from tests.receiver.test_order_identity import SINCE, first, listed
from tests.receiver.test_vouchers import NOW

CODE, PIN, URL = "GIFT-SECRET-9999", "PIN-SECRET-4242", "https://claim.example/SECRET-7777"
VOUCHERS = {"vouchers": [{"card_number": CODE, "pin_code": PIN, "claim_url": URL,
                          "voucher_reference_number": "VR-9999", "expires_at": "2025-05-01T00:00:00Z"}]}


def everything_stored(db) -> str:
    return "\n".join(db.conn.iterdump())


def sync(api_config, store, api, at=NOW):
    return catch_up_orders(api_config, store, api, since=SINCE, now=at)


def test_a_record_of_another_order_is_held_without_its_vouchers(api_config, store, api, httpserver):
    listed(httpserver, first())
    sync(api_config, store, api)
    other = first(reference_code="R999", status="delivered", **VOUCHERS,
                  extra={"Card_Number": CODE, "items": [{"pin_code": PIN}]})
    listed(httpserver, other)
    assert sync(api_config, store, api, NOW + timedelta(minutes=15)).id_given_twice == 1
    [held] = quarantine.held(store, "order")
    kept = json.loads(held["raw"])
    expected = {k: v for k, v in other.items() if k != "vouchers"}
    expected["extra"] = {"items": [{}]}
    assert kept == expected  # everything else as received
    stored = everything_stored(store)
    assert CODE not in stored and PIN not in stored and URL not in stored


def test_an_unreadable_record_is_held_without_its_vouchers(api_config, store, api, httpserver):
    listed(httpserver, first(quantity="many", **VOUCHERS))
    summary = sync(api_config, store, api)
    assert summary.quarantined == 1
    [held] = quarantine.held(store, "order")
    assert held["reason"].startswith("order record unreadable: ") and "quantity" in held["reason"]
    kept = json.loads(held["raw"])
    assert kept["quantity"] == "many" and "vouchers" not in kept
    stored = everything_stored(store)
    assert CODE not in stored and PIN not in stored and URL not in stored
