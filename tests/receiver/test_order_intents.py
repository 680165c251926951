"""`partnerkit orders create` as safe as a recharge submit: the intent (Idempotency-Key and ref) is
committed before the request, a lost answer is replayed under the same key, and the provider holds
exactly one order for one intended purchase in every case (its own count, `sandbox.orders`).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit import errors
from partnerkit import status as status_mod
from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env, load_config
from partnerkit.ordering import HOLD_WINDOW, UnresolvedOrder, place_order, replay_command
from partnerkit.store import open_db, order_intents, transaction
from partnerkit.store import orders as order_store
from partnerkit.timeutil import utcnow
from partnerkit.vouchers import catch_up_orders

pytest.importorskip("sandbox.testing")
from sandbox.settings import SandboxSettings  # noqa: E402
from tests.sandbox_serving import serve_sandbox  # noqa: E402

CREATE = "POST /api/v1/orders"
# Under this seed a fault on POST /api/v1/orders at rate 0.5 hits the first request and spares the
# second (the sandbox draws request faults from an RNG seeded by `seed`): the answer is lost once and
# its replay is answered. Each test checks `faults_injected` to prove the draw it relies on.
SEED_FIRST_ONLY = 20240105
ORDER = ["orders", "create", "--product-id", "8", "--denomination", "100", "--quantity", "1"]  # realtime: DELIVERED


@pytest.fixture
def server():
    with serve_sandbox(SandboxSettings(seed=SEED_FIRST_ONLY, speed=0, hourly_limit=100_000), background=False) as running:
        yield running


@pytest.fixture
def config(server, tmp_path):
    client = server.clients[0]
    return load_config(environ={
        "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
        "PARTNERKIT_API_KEY": client.key, "PARTNERKIT_API_SECRET": client.secret,
        "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"), "PARTNERKIT_HTTP_TIMEOUT_S": "0.5",
        "PARTNERKIT_VOUCHER_KEY": "a-test-voucher-key-of-32-bytes-!!"})


@pytest.fixture
def env(config):
    return config_as_env(config)


@pytest.fixture
def db(config, migrated_file):
    database = open_db(migrated_file(config.db_path))
    yield database
    database.conn.close()


def run(env, *args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def provider_orders(server) -> list:
    with server.sandbox.lock:
        return sorted(server.sandbox.orders.values(), key=lambda o: o.id)


def fault(server, name: str, **spec) -> None:
    server.sandbox.settings.faults = {name: {"scope": CREATE, **spec}}


@pytest.mark.parametrize("name", ["slow", "malformed_json", "http_500"])
def test_a_lost_answer_is_replayed_under_the_same_key_and_one_order_is_placed(server, env, db, name):
    """A timeout (the order placed, its answer late), a 200 cut on the way (placed), a 500 (nothing done):
    the same key once more gives the original answer, or places the order then: one order either way."""
    fault(server, name, rate=0.5, **({"seconds": 1.5} if name == "slow" else {}))
    result = run(env, *ORDER, "--format", "json")
    assert server.sandbox.faults_injected[name] == 1, "the seed hits the first request only"
    printed = json.loads(result.stdout)
    [order] = provider_orders(server)
    assert printed["id"] == order.id and printed["status"] == "DELIVERED" and printed["vouchers_stored"] == 1
    assert server.sandbox.calls[CREATE] == 2  # the original and its replay, under one key
    intent = order_intents.by_key(db, printed["idempotency_key"])
    assert (intent["state"], intent["order_id"], intent["ref"]) == ("PLACED", order.id, order.ref)
    assert order_store.get(db, order.id)["reference_code"] == order.ref


@pytest.mark.parametrize("name", ["malformed_json", "order_create"])
def test_an_answer_lost_twice_is_unknown_names_its_replay_and_that_replay_orders_once(server, config, env, db, name):
    """malformed_json: placed, both answers cut. order_create: the provider's 500 "Failed to create order"
    both times (nothing placed). Exit 3 with the key, the ref and the command; running it places one order."""
    fault(server, name)
    result = run(env, *ORDER, "--format", "json", code=3)
    printed = json.loads(result.stdout)
    intent = order_intents.by_key(db, printed["idempotency_key"])
    assert printed["status"] == "UNKNOWN" and printed["ref"] == intent["ref"] and intent["state"] == "UNKNOWN"
    command = (f"partnerkit orders create --product-id 8 --denomination 100.00 --quantity 1 --ref {intent['ref']} "
               f"--idempotency-key {intent['idempotency_key']}")
    assert f"`{command}`" in result.stderr and "Do NOT order it again without its key" in result.stderr
    assert len(provider_orders(server)) == (1 if name == "malformed_json" else 0)
    # `status` names it until it is resolved.
    seen = status_mod.collect(config, db)
    assert [line.split()[:3] for line in seen["order_intents_unknown"]] == [
        [f"#{intent['id']}", "key", intent["idempotency_key"]]]
    assert any(intent["idempotency_key"] in line for line in seen["attention"])
    server.sandbox.settings.faults = {}
    replayed = json.loads(run(env, *shlex.split(command)[1:], "--format", "json").stdout)
    [order] = provider_orders(server)
    assert replayed["id"] == order.id and replayed["vouchers_stored"] == 1  # stored in all, not "new this run"
    assert order_intents.get(db, intent["id"])["state"] == "PLACED"
    assert status_mod.collect(config, db)["order_intents_unknown"] == []


def test_a_500_while_creating_is_not_read_as_a_refusal(server, env, db):
    """The document's 500 row of order creation: the client's error, with the key it carried, is kept."""
    fault(server, "order_create")
    run(env, *ORDER, code=3)
    [intent] = db.execute("SELECT state, error FROM order_intents").fetchall()
    assert intent[0] == "UNKNOWN" and "Failed to create order" in intent[1]


def test_a_definite_refusal_places_nothing_and_is_one_line(server, env, db):
    result = run(env, "orders", "create", "--product-id", "999", "--denomination", "100", "--quantity", "1", code=1)
    assert result.output.startswith("Error: HTTP 404 [NotFound]: Product not found")
    assert len(result.output.strip().splitlines()) == 1
    assert db.execute("SELECT state FROM order_intents").fetchall() == [("REFUSED",)]
    assert provider_orders(server) == []


def test_the_key_of_a_placed_intent_with_the_same_fields_answers_from_the_store(server, env, db):
    first = json.loads(run(env, *ORDER, "--idempotency-key", "orderkey-h12-0001", "--format", "json").stdout)
    again = run(env, *ORDER, "--idempotency-key", "orderkey-h12-0001", "--format", "json")
    assert json.loads(again.stdout) == first | {"vouchers_stored": 1}
    assert "already placed order" in again.stderr and "nothing ordered twice" in again.stderr
    assert server.sandbox.calls[CREATE] == 1 and len(provider_orders(server)) == 1


def test_the_key_of_an_intent_with_other_fields_is_refused_before_anything_is_sent(server, env, db):
    """F7: another product, denomination or quantity under a known key is one line, exit 1, nothing sent."""
    run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1",
        "--idempotency-key", "orderkey-h12-0001")
    [order] = provider_orders(server)
    other = run(env, "orders", "create", "--product-id", "8", "--denomination", "50", "--quantity", "3",
                "--idempotency-key", "orderkey-h12-0001", code=1)
    assert len(other.output.strip().splitlines()) == 1
    assert "Idempotency-Key orderkey-h12-0001 is order intent #1 (product 7, 1 x 10.00" in other.output
    assert f"order {order.id})" in other.output and "product_id, denomination, quantity differ" in other.output
    assert server.sandbox.calls[CREATE] == 1 and len(provider_orders(server)) == 1


def test_a_key_partnerkit_never_recorded_that_replays_another_order_is_an_error(server, config, env, db):
    """F7 for keys from elsewhere: the provider replays the key's order; it is not this request's."""
    with PartnerClient(config, db) as client:
        elsewhere = client.create_order(product_id=7, denomination=10, quantity=1, idempotency_key="theirs-0000001")
    mismatch = run(env, "orders", "create", "--product-id", "8", "--denomination", "50", "--quantity", "3",
                   "--idempotency-key", "theirs-0000001", code=1)
    assert (f"Idempotency-Key theirs-0000001 belongs to order {elsewhere.id} (product 7, 1 x 10.00), not to this "
            "request (product 8, 3 x 50.00") in mismatch.output
    assert len(provider_orders(server)) == 1
    assert order_intents.by_key(db, "theirs-0000001")["state"] == "REFUSED"
    # The same request under such a key is its order's replay: linked, exit 0, nothing ordered twice.
    with PartnerClient(config, db) as client:
        second = client.create_order(product_id=7, denomination=10, quantity=1, idempotency_key="theirs-0000002")
    same = json.loads(run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1",
                          "--idempotency-key", "theirs-0000002", "--format", "json").stdout)
    assert same["id"] == second.id and len(provider_orders(server)) == 2
    assert order_intents.by_key(db, "theirs-0000002")["order_id"] == second.id


def test_the_order_sync_links_an_unknown_intent_to_the_order_carrying_its_ref(server, config, env, db):
    fault(server, "malformed_json")
    printed = json.loads(run(env, *ORDER, "--format", "json", code=3).stdout)
    server.sandbox.settings.faults = {}
    [order] = provider_orders(server)
    with PartnerClient(config, db) as client:
        summary = catch_up_orders(config, db, client)
    assert summary.intents_linked == 1
    intent = order_intents.by_key(db, printed["idempotency_key"])
    assert (intent["state"], intent["order_id"]) == ("PLACED", order.id)
    with PartnerClient(config, db) as client:
        assert catch_up_orders(config, db, client).intents_linked == 0  # linked once
    assert len(provider_orders(server)) == 1


def test_past_the_keys_24_hours_a_replay_meets_its_ref_and_says_the_order_sync_brings_it(server, config, env, db):
    fault(server, "malformed_json")
    printed = json.loads(run(env, *ORDER, "--format", "json", code=3).stdout)
    server.sandbox.settings.faults = {}
    server.advance(25 * 3600)  # the provider has forgotten the key; the ref still guards the order
    intent = order_intents.by_key(db, printed["idempotency_key"])
    replay = run(env, *ORDER, "--idempotency-key", intent["idempotency_key"], code=3)
    assert "Duplicate reference code" in replay.stderr and "`partnerkit orders sync`" in replay.stderr
    assert len(provider_orders(server)) == 1
    run(env, "orders", "sync")
    [order] = provider_orders(server)
    assert order_intents.get(db, intent["id"])["order_id"] == order.id
    again = json.loads(run(env, *ORDER, "--idempotency-key", intent["idempotency_key"], "--format", "json").stdout)
    assert again["id"] == order.id and len(provider_orders(server)) == 1


class Hold:
    """Holds the first POST /api/v1/orders at the sandbox until released; `drop` then answers it with a 503
    before the view runs (as if it never arrived), else the sandbox places the order into a dead connection."""

    def __init__(self, app) -> None:
        self.held, self.release, self.drop = threading.Event(), threading.Event(), False
        app.before_request(self._before)

    def _before(self):
        from flask import request

        if request.method == "POST" and request.path == "/api/v1/orders" and not self.held.is_set():
            self.held.set()
            self.release.wait(30)
            if self.drop:
                return "", 503
        return None


@pytest.mark.parametrize("arrived", [True, False])
def test_a_process_killed_while_sending_leaves_an_intent_whose_key_places_one_order(server, config, env, db, arrived):
    hold = Hold(server.app)
    child = subprocess.Popen([sys.executable, "-m", "partnerkit", *ORDER], env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert hold.held.wait(30), "the create never reached the sandbox"
        child.kill()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    [intent] = [dict(zip(("id", "state", "key", "sender"), row)) for row in
                db.execute("SELECT id, state, idempotency_key, sender FROM order_intents").fetchall()]
    assert intent["state"] == "INTENT"  # committed before the request existed; nobody answered it
    gone = f"the `orders create` that recorded it (pid {child.pid} on {socket.gethostname()}) is no longer running"
    assert intent["sender"] == f"pid {child.pid} on {socket.gethostname()}"
    # Run again without its key, the same order is refused before anything is sent: it may be placed.
    rerun = run(env, *ORDER, code=1)
    assert f"order intent #{intent['id']} is INTENT" in rerun.output and intent["key"] in rerun.output
    assert f"{gone}; any answer it got was not stored" in rerun.output
    assert server.sandbox.calls[CREATE] == 1 and db.execute("SELECT count(*) FROM order_intents").fetchone() == (1,)
    hold.drop = not arrived
    hold.release.set()
    # `status` names it at once: the process that held its sender's lock is gone (partnerkit.senders).
    [named] = status_mod.collect(config, db)["order_intents_unknown"]
    assert named.split()[:3] == [f"#{intent['id']}", "key", intent["key"]] and named.endswith(f"; {gone})")
    replayed = json.loads(run(env, *ORDER, "--idempotency-key", intent["key"], "--format", "json").stdout)
    [order] = provider_orders(server)
    assert replayed["id"] == order.id and order_intents.get(db, intent["id"])["state"] == "PLACED"


def test_an_answer_naming_an_order_id_held_for_another_intent_stores_nothing_and_says_why(server, env, db, config):
    """The kill -9 review's suspicion, confirmed: a sandbox started again gives its first order id again, which
    this store holds for the first order's intent. The UNIQUE error of `order_intents.order_id` was reported as a
    database fault ("placed order N but it could not be stored", "once the database takes writes"). Now: nothing
    of the answer is stored, the order held under the id is untouched, the intent stays open, and the message
    names the intent that holds the id; its replay meets the same id and says the same."""
    first = json.loads(run(env, *ORDER, "--format", "json").stdout)
    holder = order_intents.by_key(db, first["idempotency_key"])
    held = order_store.get(db, first["id"])
    vouchers = db.execute("SELECT count(*) FROM vouchers WHERE order_id = ?", (first["id"],)).fetchone()
    with serve_sandbox(SandboxSettings(seed=SEED_FIRST_ONLY, speed=0, hourly_limit=100_000),
                       background=False) as again:
        restarted = {**env, "PARTNERKIT_API_BASE_URL": again.base_url}
        other = ORDER[:-1] + ["2"]  # another order: two vouchers
        answered = run(restarted, *other, "--format", "json", code=3)
        [order] = provider_orders(again)
        printed = json.loads(answered.stdout)
        intent = order_intents.by_key(db, printed["idempotency_key"])
        replayed = run(restarted, *shlex.split(replay_command(intent))[1:], code=3)
        assert again.sandbox.calls[CREATE] == 2 and len(provider_orders(again)) == 1  # the replay placed nothing
    assert order.id == first["id"] and order.ref == intent["ref"] != holder["ref"]  # one id, two orders
    for message in (answered.stderr, replayed.stderr):
        assert (f"Order intent #{intent['id']} stays open (UNKNOWN): the provider answered with order {order.id} "
                f"(DELIVERED, 190.00, ref {order.ref}), but this store already holds order {order.id} for order "
                f"intent #{holder['id']} (product 8, 1 x 100.00, ref {holder['ref']}, PLACED, order {order.id}). "
                "Two orders under one id is not a database fault: nothing of this answer was stored") in message
        assert "start a fresh database (a new PARTNERKIT_DB) or run it without --fixed-ids" in message
        assert "UNIQUE" not in message and "could not be stored" not in message and "takes writes" not in message
    intent = order_intents.get(db, intent["id"])
    assert (intent["state"], intent["order_id"]) == ("UNKNOWN", None)
    assert intent["error"].startswith(f"the provider answered order {order.id} (ref {order.ref}), which this store "
                                      f"already holds for order intent #{holder['id']} ")
    assert order_store.get(db, first["id"]) == held and order_intents.get(db, holder["id"]) == holder
    assert db.execute("SELECT count(*) FROM vouchers WHERE order_id = ?", (first["id"],)).fetchone() == vouchers
    # `status` names it without advising the replay that answers the same id.
    seen = status_mod.collect(config, db)
    [named] = seen["order_intents_unknown"]
    assert named.startswith(f"#{intent['id']} key {intent['idempotency_key']}") and "; do not replay it: " in named
    [line] = [a for a in seen["attention"] if a.startswith("1 order creation(s) with an unknown outcome")]
    assert line.endswith('or let the order sync link it; not those marked "do not replay it"; once the provider (or '
                         'its support) confirms one was never placed, `partnerkit orders close N --note TEXT` searches '
                         'the order list once more and closes it: kept, no longer named here, holding no new order '
                         'back')


# An order the order sync stored under id 5001 (the sandbox's first order id), placed elsewhere long before.
STORED_5001 = dict(reference_code="same-ref-0001", product_id=7, denomination_cents=1000, quantity=1,
                   amount_cents=1000, transaction_id=700009, placed_at="2024-01-02T03:04:05.000000Z")


def test_an_answer_whose_id_is_stored_for_another_order_of_the_same_ref_stores_nothing(server, env, db):
    """The create path checks the whole identity, as the order sync, the voucher fetch and the receiver do
    (`orders.another_order`: ref, product, denomination, placed_at). The order stored under the answer's id carries
    the answer's ref, but another product, denomination and placing time: another order (a provider that gave the id
    twice). Only the ref was compared, so the answer was written over it and the intent marked PLACED."""
    with transaction(db) as conn:
        order_store.apply(conn, 5001, "DELIVERED", now=utcnow(), source="sync", **STORED_5001)
    held = order_store.get(db, 5001)
    answered = run(env, *ORDER, "--ref", "same-ref-0001", "--format", "json", code=3)
    [order] = provider_orders(server)
    assert (order.id, order.ref, order.product_id) == (5001, "same-ref-0001", 8)
    intent = order_intents.by_key(db, json.loads(answered.stdout)["idempotency_key"])
    holder = ("the order stored from the provider's records (ref same-ref-0001, product 7, denomination 10.00, placed "
              "2024-01-02T03:04:05.000000Z), from which this answer differs in product_id, denomination_cents, "
              "placed_at")
    assert (intent["state"], intent["order_id"]) == ("UNKNOWN", None)
    assert intent["error"] == (f"the provider answered order 5001 (ref same-ref-0001), which this store already "
                               f"holds for {holder}: not stored")
    assert (f"the provider answered with order 5001 (DELIVERED, 95.00, ref same-ref-0001), but this store already "
            f"holds order 5001 for {holder}. Two orders under one id is not a database fault") in answered.stderr
    assert order_store.get(db, 5001) == held, "nothing of the answer written over the stored order"
    assert db.execute("SELECT count(*) FROM vouchers WHERE order_id = 5001").fetchone() == (0,)


def test_an_answer_whose_id_is_stored_from_webhooks_only_is_that_order(server, env, db):
    """An order known only from its events holds no fact to compare (a webhook stores none of them): the answer
    naming its id is that order, stored over it, the intent PLACED."""
    with transaction(db) as conn:
        order_store.apply(conn, 5001, "PROCESSING", now=utcnow(), source="webhook", quantity=1)
    placed = json.loads(run(env, *ORDER, "--format", "json").stdout)
    stored = order_store.get(db, 5001)
    assert placed["id"] == 5001 and order_intents.by_key(db, placed["idempotency_key"])["state"] == "PLACED"
    assert (stored["reference_code"], stored["product_id"], stored["status"]) == (placed["ref"], 8, "DELIVERED")


def test_an_intent_without_its_senders_lock_keeps_the_quarter_hour_rule(config, db):
    """A row of an older release (or of a sender that could not take a lock) says nothing of its sender: `status`
    names it only once a send could not last that long, as before."""
    start = utcnow()
    with transaction(db) as conn:
        intent_id = order_intents.record(conn, idempotency_key="older-release-0001", ref="older-ref", product_id=8,
                                         denomination=Decimal("100"), quantity=1, wallet_id=None, email=None, now=start)
        order_intents.mark_sending(conn, intent_id, start)  # sent: marked, with no lock to ask
    assert status_mod.collect(config, db, now=start + timedelta(minutes=14))["order_intents_unknown"] == []
    [named] = status_mod.collect(config, db, now=start + timedelta(minutes=16))["order_intents_unknown"]
    assert named.startswith(f"#{intent_id} key older-release-0001 ref older-ref") and "no longer running" not in named


def test_a_replay_refused_before_it_was_read_leaves_the_intent_open(server, env, db):
    """The earlier send may have placed the order: a 401 (or 429, or no budget) to its replay proves nothing."""
    fault(server, "malformed_json")
    printed = json.loads(run(env, *ORDER, "--format", "json", code=3).stdout)
    server.sandbox.settings.faults = {}
    key = printed["idempotency_key"]
    refused = run({**env, "PARTNERKIT_API_SECRET": "not-the-secret-at-all"}, *ORDER, "--idempotency-key", key, code=3)
    assert "its replay was refused before the provider read it (HTTP 401" in refused.stderr
    assert order_intents.by_key(db, key)["state"] == "UNKNOWN" and len(provider_orders(server)) == 1
    placed = json.loads(run(env, *ORDER, "--idempotency-key", key, "--format", "json").stdout)
    [order] = provider_orders(server)
    assert placed["id"] == order.id and order_intents.by_key(db, key)["state"] == "PLACED"


# ---- the guard: the same order is not placed again while an earlier one's outcome is unknown ------------------


def test_a_rerun_after_exit_3_without_the_key_is_refused_and_sends_nothing(server, env, db):
    """The defect: exit 3, then the same command without --idempotency-key placed a second, paid, order."""
    fault(server, "malformed_json")  # placed, both answers cut: exit 3
    printed = json.loads(run(env, *ORDER, "--format", "json", code=3).stdout)
    server.sandbox.settings.faults = {}
    [first] = provider_orders(server)
    sent = server.sandbox.calls[CREATE]
    intent = order_intents.by_key(db, printed["idempotency_key"])
    rerun = run(env, *ORDER, "--format", "json", code=1)
    assert rerun.stdout == "" and len(rerun.stderr.strip().splitlines()) == 1
    assert rerun.stderr.startswith("Error: not sent: an order of product 8, 1 x 100.00 may already be placed: "
                                   f"order intent #{intent['id']} is UNKNOWN, sent ")
    assert (f"(Idempotency-Key {intent['idempotency_key']}, ref {intent['ref']}); replay it with "
            f"`{replay_command(intent)}`") in rerun.stderr
    assert rerun.stderr.rstrip().endswith("If this is deliberately another order, add --force (force=True)")
    assert server.sandbox.calls[CREATE] == sent and len(provider_orders(server)) == 1  # nothing sent
    assert db.execute("SELECT count(*) FROM order_intents").fetchone() == (1,)  # nothing recorded
    # --force: deliberately a second order (a new key and ref); the first intent stays open, still named.
    forced = json.loads(run(env, *ORDER, "--force", "--format", "json").stdout)
    second = [o for o in provider_orders(server) if o.id != first.id]
    assert [o.id for o in second] == [forced["id"]] and forced["idempotency_key"] != intent["idempotency_key"]
    assert order_intents.get(db, intent["id"])["state"] == "UNKNOWN"
    run(env, *ORDER, code=1)
    # The held key resumes its intent as before: the first order, linked, nothing ordered again.
    replayed = json.loads(run(env, *shlex.split(replay_command(intent))[1:], "--format", "json").stdout)
    assert replayed["id"] == first.id and order_intents.get(db, intent["id"])["state"] == "PLACED"
    assert len(provider_orders(server)) == 2


def test_place_order_raises_unresolved_order_naming_each_held_intent(server, config, db):
    """The Python API: a fork calling place_order again after an UNKNOWN outcome, with or without its own new key."""
    fault(server, "order_create")  # 500 "Failed to create order" to the send and its replay: UNKNOWN
    with PartnerClient(config, db) as client:
        lost = place_order(config, db, client, product_id=8, denomination=Decimal("100"), quantity=1)
        assert lost.state == "UNKNOWN"
        server.sandbox.settings.faults = {}
        sent = server.sandbox.calls[CREATE]
        for key in (None, "a-new-key-of-the-fork"):
            with pytest.raises(UnresolvedOrder, match=r"^not sent: an order of product 8, 1 x 100\.00 may already "
                                                      rf"be placed: order intent #{lost.intent_id} is UNKNOWN") as info:
                place_order(config, db, client, product_id=8, denomination="100.00", quantity=1, idempotency_key=key,
                            email="someone@example.com", ref="another-ref")  # e-mail and ref are not the order
            [held] = info.value.held
            intent = order_intents.get(db, lost.intent_id)
            assert (held.intent_id, held.idempotency_key, held.ref, held.state, held.replay_command) == (
                lost.intent_id, lost.idempotency_key, lost.ref, "UNKNOWN", replay_command(intent))
            assert timedelta(0) <= held.age < timedelta(minutes=1)
            assert info.value.request.describe() == "product 8, 1 x 100.00"
        assert server.sandbox.calls[CREATE] == sent and order_intents.by_key(db, "a-new-key-of-the-fork") is None
        # The key of a REFUSED intent (nothing placed for it) sent again is a new order: held back too.
        product = server.sandbox.products[8]
        product.max_quantity = 0
        with pytest.raises(errors.BadRequest, match="Invalid quantity"):
            place_order(config, db, client, product_id=8, denomination=100, quantity=1, force=True,
                        idempotency_key="refused-key-0001")
        product.max_quantity = 1000
        assert order_intents.by_key(db, "refused-key-0001")["state"] == "REFUSED"
        sent = server.sandbox.calls[CREATE]
        with pytest.raises(UnresolvedOrder, match=f"order intent #{lost.intent_id} is UNKNOWN"):
            place_order(config, db, client, product_id=8, denomination=100, quantity=1,
                        idempotency_key="refused-key-0001")
        assert server.sandbox.calls[CREATE] == sent
        # Another order (other quantity) is not held; the held key resumes and places the one order.
        assert place_order(config, db, client, product_id=8, denomination=100, quantity=2).state == "PLACED"
        resumed = place_order(config, db, client, product_id=8, denomination=100, quantity=1,
                              idempotency_key=lost.idempotency_key)
        assert resumed.state == "PLACED" and resumed.resumed and resumed.intent_id == lost.intent_id
        again = place_order(config, db, client, product_id=8, denomination=100, quantity=1,
                            idempotency_key="refused-key-0001")
        assert again.state == "PLACED" and again.resumed
    assert sorted(o.quantity for o in provider_orders(server)) == [1, 1, 2]


def test_an_intent_still_being_sent_holds_back_the_same_order(server, config, env, db):
    """Two `orders create` of one purchase at once (a double click, two terminals): the second sends nothing."""
    hold = Hold(server.app)
    done: list = []

    def first() -> None:
        own = open_db(config.db_path)
        try:
            patient = replace(config, http_timeout_s=30.0)  # waits for the held answer: no replay under way
            with PartnerClient(patient, own) as client:
                done.append(place_order(patient, own, client, product_id=8, denomination=100, quantity=1))
        finally:
            own.conn.close()

    sender = threading.Thread(target=first, daemon=True)
    sender.start()
    try:
        assert hold.held.wait(30), "the create never reached the sandbox"
        [intent] = db.execute("SELECT id, state FROM order_intents").fetchall()
        assert intent[1] == "INTENT"
        second = run(env, *ORDER, code=1)
        assert f"order intent #{intent[0]} is INTENT, sent " in second.output
        # The first holds its sender's lock (partnerkit.senders): named as running, even from this process.
        assert (f"its `orders create` (pid {os.getpid()} on {socket.gethostname()}) is still running, waiting for "
                "the provider's answer") in second.output
        assert "once that command has ended, if it is still open, replay it with `partnerkit orders create" \
            in second.output
        assert status_mod.collect(config, db)["order_intents_unknown"] == []  # its answer may still come
    finally:
        hold.release.set()
        sender.join(30)
    [outcome] = done
    [order] = provider_orders(server)
    assert outcome.state == "PLACED" and outcome.order_id == order.id and server.sandbox.calls[CREATE] == 1


def test_an_intent_past_the_window_no_longer_holds_the_same_order(server, env, db):
    """24 hours after its last send an open intent lets the same order through (`status` still names it)."""
    start = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    with freeze_time(start) as clock:
        fault(server, "order_create")  # nothing placed, the outcome UNKNOWN
        run(env, *ORDER, code=3)
        server.sandbox.settings.faults = {}
        clock.move_to(start + HOLD_WINDOW - timedelta(minutes=1))
        assert "is UNKNOWN, sent 23 h 59 min ago" in run(env, *ORDER, code=1).output
        clock.move_to(start + HOLD_WINDOW + timedelta(seconds=1))
        placed = json.loads(run(env, *ORDER, "--format", "json").stdout)
    [order] = provider_orders(server)
    assert placed["id"] == order.id and placed["status"] == "DELIVERED"
    assert [state for (state,) in db.execute("SELECT state FROM order_intents ORDER BY id")] == ["UNKNOWN", "PLACED"]


@pytest.mark.parametrize("settled_by", ["order sync", "refusal"])
def test_a_settled_intent_no_longer_holds_the_same_order(server, config, env, db, settled_by):
    """Linked by the order catch-up (PLACED), or refused when its key was replayed (REFUSED): the guard lets go."""
    if settled_by == "order sync":
        fault(server, "malformed_json")  # placed, its answers lost
        run(env, *ORDER, code=3)
        server.sandbox.settings.faults = {}
        run(env, *ORDER, code=1)
        run(env, "orders", "sync")
    else:
        fault(server, "order_create")  # nothing placed, its answers lost
        printed = json.loads(run(env, *ORDER, "--format", "json", code=3).stdout)
        server.sandbox.settings.faults = {}
        run(env, *ORDER, code=1)
        product = server.sandbox.products[8]
        product.max_quantity = 0  # the provider now refuses the request outright: nothing was placed
        refused = run(env, *ORDER, "--idempotency-key", printed["idempotency_key"], code=1)
        assert "Invalid quantity, allowed max quantity: 0" in refused.output
        product.max_quantity = 1000
    assert db.execute("SELECT count(*) FROM order_intents WHERE state IN ('INTENT', 'UNKNOWN')").fetchone() == (0,)
    before = len(provider_orders(server))
    placed = json.loads(run(env, *ORDER, "--format", "json").stdout)
    assert len(provider_orders(server)) == before + 1 and placed["status"] == "DELIVERED"


def _intent(conn, key: str, *, wallet_id=None, denomination="100", quantity=1, state="UNKNOWN", sent_at=None):
    now = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    intent_id = order_intents.record(conn, idempotency_key=key, ref=f"ref-{key}", product_id=8,
                                     denomination=Decimal(denomination), quantity=quantity, wallet_id=wallet_id,
                                     email=None, now=now)
    conn.execute("UPDATE order_intents SET state = ?, sent_at = ? WHERE id = ?", (state, sent_at, intent_id))
    return intent_id


def test_held_matches_product_denomination_quantity_and_wallet_within_the_window(db):
    """The store's query, row by row: which open intents hold back product 8, 1 x 100.00 (wallet 1 or any)."""
    with transaction(db) as conn:
        ids = {name: _intent(conn, name, **fields) for name, fields in {
            "auto-wallet": {}, "wallet-1": {"wallet_id": 1}, "wallet-2": {"wallet_id": 2},
            "sending": {"state": "INTENT"}, "placed": {"state": "PLACED"}, "refused": {"state": "REFUSED"},
            "other-amount": {"denomination": "50"}, "other-quantity": {"quantity": 2},
            "resent-lately": {"sent_at": "2026-11-23T09:00:00.000000Z"},
            "sent-long-ago": {"sent_at": "2026-11-21T09:59:59.000000Z"},
        }.items()}
    since = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
    names = {v: k for k, v in ids.items()}

    def held(wallet_id):
        return [names[i["id"]] for i in order_intents.held(db.conn, product_id=8, denomination=Decimal("100.00"),
                                                           quantity=1, wallet_id=wallet_id, since=since)]

    assert held(None) == ["auto-wallet", "wallet-1", "wallet-2", "sending", "resent-lately"]
    assert held(1) == ["auto-wallet", "wallet-1", "sending", "resent-lately"]


def test_the_open_intent_queries_find_open_intents_through_the_state_index(db_path):
    """`OPEN_SQL` is the one spelling of an open intent: the order sync's probe (asked on every page) and `held`
    (asked before every order) search the `state` index, never every intent ever recorded."""
    store = open_db(db_path)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        with transaction(store) as conn:
            order_intents.link_by_ref(conn, [], datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc))
            order_intents.held(conn, product_id=8, denomination=Decimal("100.00"), quantity=1, wallet_id=None,
                               since=datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc))
        store.conn.set_trace_callback(None)
        plans = {sql: " / ".join(row[3] for row in store.execute(f"EXPLAIN QUERY PLAN {sql}"))
                 for sql in statements if "FROM order_intents" in sql}
    finally:
        store.conn.close()
    assert len(plans) == 2, statements
    assert all("INDEX order_intents_state (state=?)" in plan for plan in plans.values()), plans
