"""`partnerkit orders close`: an order intent whose outcome stays unknown, checked with the provider, closed by hand.

The lost answer is the sandbox's `order_create` fault (its 500 "Failed to create order" to the send and its replay:
nothing placed, the intent UNKNOWN) or `malformed_json` (placed, both answers cut). Closing reads the order list
(the order sync's walk, linking by ref), never a send of the key; it keeps the intent with who, when and why, and
takes it out of `partnerkit status` and the hold of a new order.
"""

from __future__ import annotations

import json

from partnerkit import status as status_mod
from partnerkit.store import order_intents
from partnerkit.vouchers import catch_up_orders
from tests.receiver.test_order_intents import (  # noqa: F401 (fixtures)
    CREATE, ORDER, config, db, env, fault, provider_orders, run, server,
)

LIST = "GET /api/v1/orders"
NOTE = "support: never received (ticket 81)"


def lost(server, env, db, name: str = "order_create") -> dict:
    """An `orders create` whose answer and its replay's were lost (exit 3): its intent, UNKNOWN."""
    fault(server, name)
    printed = json.loads(run(env, *ORDER, "--format", "json", code=3).stdout)
    server.sandbox.settings.faults = {}
    intent = order_intents.by_key(db, printed["idempotency_key"])
    assert intent["state"] == "UNKNOWN" and intent["order_id"] is None
    return intent


def order_lines(config, db) -> list[str]:
    return [line for line in status_mod.collect(config, db)["attention"] if "order creation(s)" in line]


def test_a_lost_order_is_closed_after_the_search_and_leaves_status_and_the_hold(server, config, env, db):
    intent = lost(server, env, db)
    assert provider_orders(server) == []
    assert [line.split()[0] for line in status_mod.collect(config, db)["order_intents_unknown"]] == [f"#{intent['id']}"]
    assert len(order_lines(config, db)) == 1
    assert run(env, "status", "--check", code=1)
    held = run(env, *ORDER, code=1)  # the hold names it
    assert f"order intent #{intent['id']} is UNKNOWN" in held.output
    creates, lists = server.sandbox.calls[CREATE], server.sandbox.calls.get(LIST, 0)
    closed = run(env, "orders", "close", str(intent["id"]), "--note", NOTE, "--by", "asha", "--format", "json")
    assert server.sandbox.calls[CREATE] == creates and server.sandbox.calls[LIST] > lists  # searched, key not sent
    body = json.loads(closed.stdout)
    assert (body["id"], body["state"], body["order_id"], body["ref"]) == (intent["id"], "UNKNOWN", None, intent["ref"])
    assert body["denomination"] == "100.00" and body["closed_by"] == "asha" and body["closed_note"] == NOTE
    assert body["closed_state"] == "closed" and body["closed_search"].startswith(
        f"the order list showed no order with ref {intent['ref']}")
    assert f"Order intent #{intent['id']} (product 8, 1 x 100.00, ref {intent['ref']}) is closed" in closed.stderr
    # Kept, open, with its closure; status no longer names it.
    assert order_intents.get(db, intent["id"])["state"] == "UNKNOWN"
    seen = status_mod.collect(config, db)
    assert seen["order_intents_unknown"] == [] and order_lines(config, db) == []
    assert seen["attention"] == []  # nothing else on this fresh database: --check passes now
    run(env, "status", "--check")
    # Closing again changes nothing.
    again = run(env, "orders", "close", str(intent["id"]), "--note", "other", "--format", "json")
    assert json.loads(again.stdout)["closed_note"] == NOTE and "nothing changed" in again.stderr
    # Its key is never sent again (it would place the order now)...
    replay = run(env, *ORDER, "--ref", intent["ref"], "--idempotency-key", intent["idempotency_key"], code=1)
    assert "sending its key now would place the order" in replay.output and "closed by asha" in replay.output
    assert server.sandbox.calls[CREATE] == creates and provider_orders(server) == []
    # ...and a new order of the same fields is no longer held back.
    placed = json.loads(run(env, *ORDER, "--format", "json").stdout)
    assert placed["status"] == "DELIVERED" and len(provider_orders(server)) == 1


def test_a_placed_order_found_by_the_search_is_linked_not_closed(server, config, env, db):
    intent = lost(server, env, db, "malformed_json")  # placed, both answers cut
    [order] = provider_orders(server)
    creates = server.sandbox.calls[CREATE]
    result = run(env, "orders", "close", str(intent["id"]), "--note", NOTE, "--format", "json", code=1)
    assert server.sandbox.calls[CREATE] == creates
    assert f"Order intent #{intent['id']} is not closed: the provider lists its order {order.id}" in result.output
    body = json.loads(result.stdout)
    assert (body["state"], body["order_id"], body["closed_at"]) == ("PLACED", order.id, None)
    assert order_intents.closure(db, order_intents.get(db, intent["id"])) is None
    assert status_mod.collect(config, db)["order_intents_unknown"] == []


def test_refusals_write_nothing(server, config, env, db):
    assert "no order intent #424242" in run(env, "orders", "close", "424242", "--note", "n", code=1).output
    placed = json.loads(run(env, *ORDER, "--format", "json").stdout)
    done = order_intents.by_key(db, placed["idempotency_key"])
    refused = run(env, "orders", "close", str(done["id"]), "--note", "n", code=1)
    assert f"order intent #{done['id']} is PLACED (order {placed['id']}, its outcome is known)" in refused.output
    assert "Traceback" not in refused.output
    assert run(env, "orders", "close", str(done["id"]), "--note", "  ", code=2)  # a blank note: usage error
    # The provider cannot be read: nothing written, still named by status.
    intent = lost(server, env, db)
    fault(server, "http_500", scope=LIST)
    down = run(env, "orders", "close", str(intent["id"]), "--note", NOTE, code=1)
    server.sandbox.settings.faults = {}
    assert f"order intent #{intent['id']} is not closed: the provider's order list could not be read" in down.output
    assert "nothing was written" in down.output
    assert order_intents.closure(db, order_intents.get(db, intent["id"])) is None
    assert [line.split()[0] for line in status_mod.collect(config, db)["order_intents_unknown"]] == [f"#{intent['id']}"]
    # --without-search closes it without reading the provider.
    lists = server.sandbox.calls.get(LIST, 0)
    closed = run(env, "orders", "close", str(intent["id"]), "--note", NOTE, "--without-search", "--format", "json")
    assert json.loads(closed.stdout)["closed_search"] == "not searched (--without-search)"
    assert server.sandbox.calls.get(LIST, 0) == lists


def test_an_intent_still_being_sent_is_not_closed(server, config, env, db):
    intent = lost(server, env, db)
    # As a running `orders create` leaves it: INTENT, just sent, its sender's lock not known.
    db.execute("UPDATE order_intents SET state = 'INTENT', sender_lock = NULL WHERE id = ?", (intent["id"],))
    db.conn.commit()
    result = run(env, "orders", "close", str(intent["id"]), "--note", NOTE, code=1)
    assert f"order intent #{intent['id']} is not closed" in result.output and "nothing was written" in result.output
    assert order_intents.closure(db, order_intents.get(db, intent["id"])) is None


def test_an_order_listed_after_the_close_is_linked_and_the_closure_overtaken(server, config, env, db):
    intent = lost(server, env, db, "malformed_json")  # placed, but closed without searching
    [order] = provider_orders(server)
    run(env, "orders", "close", str(intent["id"]), "--note", NOTE, "--without-search")
    assert status_mod.collect(config, db)["order_intents_unknown"] == []
    from partnerkit.client import PartnerClient

    summary = catch_up_orders(config, db, PartnerClient(config, db, purpose="test"))
    assert summary.intents_linked == 1
    linked = order_intents.get(db, intent["id"])
    assert (linked["state"], linked["order_id"]) == ("PLACED", order.id)
    from partnerkit.cli.orders import intent_view

    view = intent_view(linked, order_intents.closure(db, linked))
    assert view["closed_state"] == "overtaken" and view["closed_note"] == NOTE
    # Closing it now is refused: the provider's record is known.
    refused = run(env, "orders", "close", str(intent["id"]), "--note", NOTE, code=1)
    assert "is PLACED" in refused.output
