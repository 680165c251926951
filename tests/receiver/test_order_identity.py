"""An order record whose id names a stored order it is not (session 19; the orders' twin of the recharges' check).

The order sync, the voucher fetch and the webhooks merge what they read into the order stored under its id
(`orders.apply`). A record under that id whose facts that never change differ (ref, product, denomination,
placed_at) is another order: a provider that gave an id twice, or a `--fixed-ids` sandbox started again
beside a kept database. It used to overwrite the stored order, and its fetch stored the other order's vouchers under
it. Now nothing of it is stored: the sync quarantines it, the fetch parks, the webhook is kept but not applied.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from partnerkit.client import PartnerClient, RetryPolicy
from partnerkit.ordering import place_order
from partnerkit.status import collect
from partnerkit.store import jobs, open_db, orders, quarantine
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.db import transaction
from partnerkit.vouchers import catch_up_orders, run_voucher_fetches
from receiver.app import create_app
from tests.receiver.conftest import TOKEN, envelope, post
from tests.receiver.test_vouchers import NOW, detail, order_item
from tests.sandbox_serving import serve_sandbox

SINCE = NOW - timedelta(hours=1)
PLACED = "2024-05-01T09:59:00Z"
REASON = ("order id given twice: order 101 (ref {ref}) is stored for another order (ref R101, placed "
          "2024-05-01T09:59:00.000000Z), this record differs: {differs}")


def listed(httpserver, *items) -> None:
    """The provider's order list is `items` from now on."""
    httpserver.clear_all_handlers()
    httpserver.expect_request("/api/v1/orders").respond_with_json(
        list(items), headers={"X-Page": "1", "X-Total-Pages": "1", "X-Total-Count": str(len(items))})


def first(**changes) -> dict:
    """Order 101 as the list shows it, PROCESSING; `changes` set fields."""
    return {**order_item(101, "processing", PLACED), **changes}


def stored(db) -> dict:
    return orders.get(db, 101)


def sync(api_config, store, api, at=NOW):
    return catch_up_orders(api_config, store, api, since=SINCE, now=at)


@pytest.mark.parametrize("changes, differs", [
    ({"reference_code": "R999"}, "reference_code"),
    ({"product_id": 8}, "product_id"),
    ({"denomination": "100.00", "amount": "200.00"}, "denomination_cents"),
    ({"placed_at": "2024-05-01T09:59:01Z"}, "placed_at"),
    # A fixed-ids sandbox started again: another order, placed later, of another ref and product, under the same id.
    ({"reference_code": "R999", "product_id": 8, "placed_at": "2024-05-01T09:59:30Z"},
     "reference_code, product_id, placed_at"),
])
def test_the_sync_quarantines_a_record_of_another_order_and_the_stored_order_keeps_what_it_held(
        api_config, store, api, httpserver, changes, differs):
    listed(httpserver, first())
    sync(api_config, store, api)
    before = stored(store)
    listed(httpserver, first(status="delivered", transaction_id=1, **changes))
    summary = sync(api_config, store, api, NOW + timedelta(minutes=15))
    assert summary.id_given_twice == 1 and summary.fetches_queued == 0
    assert stored(store) == before, "no field, status or time of the other order written"
    [held] = quarantine.held(store, "order")
    ref = changes.get("reference_code", "R101")
    assert (held["key"], held["reason"]) == ("order:101", REASON.format(ref=ref, differs=differs))
    assert json.loads(held["raw"])["status"] == "delivered"  # the record as received
    assert store.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,), "no fetch of the other order's vouchers"
    assert orders.given_twice(store) == [101]


def test_read_again_it_stays_one_entry_and_the_true_record_releases_it_and_updates_the_order(
        api_config, store, api, httpserver):
    listed(httpserver, first())
    sync(api_config, store, api)
    listed(httpserver, first(reference_code="R999", status="delivered"))
    for minutes in (15, 30):  # every scheduled sync lists it again
        assert sync(api_config, store, api, NOW + timedelta(minutes=minutes)).id_given_twice == 1
    [held] = quarantine.held(store, "order")
    assert (held["first_seen_at"], held["last_seen_at"]) == ("2024-05-01T10:15:00Z", "2024-05-01T10:30:00Z")
    assert stored(store)["status"] == "PROCESSING"

    # The order's own record again, delivered since, its placing time written to the millisecond.
    listed(httpserver, first(status="delivered", placed_at="2024-05-01T09:59:00.400Z"))
    summary = sync(api_config, store, api, NOW + timedelta(minutes=45))
    assert (summary.id_given_twice, summary.updated, summary.fetches_queued) == (0, 1, 1)
    assert stored(store)["status"] == "DELIVERED"
    assert quarantine.held(store, "order") == [] and orders.given_twice(store) == []


def test_a_fetch_that_reads_another_orders_detail_parks_with_the_reason_and_stores_no_voucher(
        api_config, store, api, httpserver):
    listed(httpserver, first(status="delivered"))
    sync(api_config, store, api)
    before = stored(store)
    other = {**detail(order_id=101), "reference_code": "R999", "placed_at": "2024-05-01T11:00:00Z"}
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(other)
    summary = run_voucher_fetches(api_config, store, api, now=NOW)
    assert (summary.dead, summary.vouchers_added) == (1, 0)
    assert voucher_store.count(store, 101) == 0 and stored(store) == before
    state, error = store.execute("SELECT state, last_error FROM jobs WHERE order_id = 101").fetchone()
    assert state == "dead" and error == (
        "gave up after 1 attempts: order id given twice: order 101 (ref R999) is stored for another order (ref R101, "
        "placed 2024-05-01T09:59:00.000000Z), this record differs: reference_code, placed_at")
    # Parked: not read again in a loop (the next runs claim nothing); `partnerkit status` names the order.
    for minutes in (1, 10, 30):
        assert run_voucher_fetches(api_config, store, api, now=NOW + timedelta(minutes=minutes)).claimed == 0
    assert len([r for r in httpserver.log if r[0].path == "/api/v1/orders/101"]) == 1
    status = collect(api_config, store)
    assert (status["orders_id_given_twice"], status["orders_id_given_twice_ids"]) == (1, [101])
    [line] = [a for a in status["attention"] if "whose id the provider gave to another order" in a]
    assert line.startswith("1 stored order(s) (101) whose id the provider gave to another order") and \
        line.endswith("start a fresh database (a new PARTNERKIT_DB) or run it without --fixed-ids")

    # The hourly revival reads it once more: the order's own detail now, its vouchers stored, the job done.
    httpserver.clear_all_handlers()
    httpserver.expect_request("/api/v1/orders").respond_with_json([])
    httpserver.expect_request("/api/v1/orders/101").respond_with_json({**detail(order_id=101), "reference_code": "R101"})
    catch_up_orders(api_config, store, api, now=NOW + timedelta(hours=2))  # revives fetches parked an hour
    done = run_voucher_fetches(api_config, store, api, now=NOW + timedelta(hours=2))
    assert (done.done, done.vouchers_added) == (1, 2) and voucher_store.count(store, 101) == 2
    assert orders.given_twice(store) == [] and collect(api_config, store)["orders_id_given_twice"] == 0


def test_a_webhook_of_another_order_is_kept_and_acknowledged_but_moves_nothing(config, app, client, db):
    with transaction(db) as conn:  # order 101 as the sync stored it
        orders.apply(conn, 101, "PROCESSING", now=NOW, source="sync", reference_code="REF-1", product_id=7,
                     denomination_cents=50000, quantity=2, placed_at="2024-05-01T10:00:00.000000Z")
    before = stored(db)
    other = json.loads(envelope("evt_other", created_at="2024-05-01T12:00:00Z"))
    other["data"]["reference_code"] = "REF-2"
    answer = post(client, json.dumps(other).encode())
    assert (answer.status_code, answer.get_json()) == (200, {"status": "ignored"})
    assert stored(db) == before and db.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
    state, reason = db.execute("SELECT state, reason FROM inbox WHERE dedup_key = 'evt_other'").fetchone()
    assert state == "quarantined" and reason == (
        "order id given twice: order 101 (ref REF-2) is stored for another order (ref REF-1, placed "
        "2024-05-01T10:00:00.000000Z), this record differs: reference_code")
    # Delivered again: a duplicate, as for any stored event.
    assert post(client, json.dumps(other).encode()).get_json() == {"status": "duplicate"}

    # The order's own event (its ref and denomination; data.created_at is not compared) is applied as before.
    own = envelope("evt_own", created_at="2024-05-01T11:30:00Z")  # not the stored placed_at: not an identity fact
    assert post(client, own).get_json() == {"status": "accepted"}
    assert stored(db)["status"] == "DELIVERED"
    assert db.execute("SELECT order_id, state FROM jobs").fetchall() == [(101, "pending")]


def test_an_event_that_shows_no_identity_fact_is_applied_as_before(config, app, client, db):
    """The `order_id` envelope form shows none of the facts: it cannot be told apart (its status only moves forward;
    the fetch it queues is where the check bites)."""
    with transaction(db) as conn:
        orders.apply(conn, 101, "PENDING", now=NOW, source="sync", reference_code="REF-1", product_id=7,
                     denomination_cents=50000, quantity=2, placed_at="2024-05-01T10:00:00.000000Z")
    body = json.dumps({"event": "order.processing", "event_id": "evt_2", "created_at": "2024-05-01T12:00:00Z",
                       "data": {"order_id": 101, "status": "PROCESSING", "total_amount": "1000.00"}}).encode()
    assert post(client, body).get_json() == {"status": "accepted"}
    assert stored(db)["status"] == "PROCESSING"


FIXED_START = datetime(2026, 3, 10, 10, 0, tzinfo=timezone.utc)


def _sandbox():
    from sandbox import SandboxSettings

    return serve_sandbox(SandboxSettings(speed=0, processing_delay_s=600, hourly_limit=100_000), background=False)


def _config(server, tmp_path):
    from tests.worker.worker_helpers import config_for

    account = server.clients[0]
    return replace(config_for(server.base_url, account.key, account.secret, tmp_path, http_timeout_s="2",
                              webhook_tokens=TOKEN), log_level="ERROR")


def _delivered(server, order_id: int, form: str, event_id: str) -> bytes:
    """The sandbox's own order.delivered body of `order_id`, in one envelope form."""
    from sandbox.envelopes import order_payload

    order = server.sandbox.orders[order_id]
    product = server.sandbox.products[order.product_id]
    return json.dumps(order_payload(form, "order.delivered", event_id, order.placed_at, order, product)).encode()


def test_a_fixed_ids_sandbox_started_again_beside_a_kept_database_leaves_the_first_order_and_its_vouchers(tmp_path):
    """The reproduction: order 5001 placed and stored with its vouchers; the sandbox started again numbers from order
    5001 again, and its order 5001 (another ref, product and time, placed outside partnerkit) is delivered by webhook
    by webhook, listed by the order sync, and its detail read by a fetch of 5001."""
    with freeze_time(FIXED_START) as clock:
        with _sandbox() as server:
            config = _config(server, tmp_path)
            db = open_db(config.db_path)
            with PartnerClient(config, db, retry=RetryPolicy(max_attempts=1)) as client:
                placed = place_order(config, db, client, product_id=7, denomination=10, quantity=2)
        assert (placed.order_id, placed.status, placed.vouchers_stored) == (5001, "DELIVERED", 2)
        before, codes = orders.get(db, 5001), voucher_store.for_order(db, 5001)
        clock.tick(3600)
        with _sandbox() as again:
            config = _config(again, tmp_path)
            with PartnerClient(config, db, retry=RetryPolicy(max_attempts=1)) as fresh:
                other = fresh.create_order(product_id=8, denomination=50, quantity=3, idempotency_key="elsewhere-1")
                assert (other.id, other.status) == (5001, "DELIVERED")  # the same id, another order
                app = create_app(config)
                try:
                    web = app.test_client()
                    for form in ("standard", "timestamp"):  # both show its ref: kept, not applied
                        assert post(web, _delivered(again, 5001, form, f"e-{form}")).get_json() == {"status": "ignored"}
                finally:
                    app.extensions["partnerkit_receiver"].close()
                # A fetch of 5001 queued anyway: by the `order_id` form, which shows no fact of the order to compare.
                with transaction(db) as conn:
                    jobs.queue(conn, 5001, now=FIXED_START, expected_status="DELIVERED", expected_count=3)
                for minutes in (0, 15):
                    synced = catch_up_orders(config, db, fresh, now=FIXED_START + timedelta(hours=1, minutes=minutes))
                    assert synced.id_given_twice == 1
                fetched = run_voucher_fetches(config, db, fresh)
        assert (fetched.dead, fetched.vouchers_added) == (1, 0)
        after = orders.get(db, 5001)
        assert {k: v for k, v in after.items() if k != "updated_at"} == \
            {k: v for k, v in before.items() if k != "updated_at"}
        assert voucher_store.for_order(db, 5001) == codes, "no voucher of the other order added"
        [held] = quarantine.held(db, "order")
        assert held["key"] == "order:5001" and held["reason"].startswith(
            f"order id given twice: order 5001 (ref {other.ref}) is stored for another order (ref {placed.ref}, placed ")
        assert held["reason"].endswith("this record differs: reference_code, product_id, denomination_cents, "
                                       "placed_at")
        assert collect(config, db)["orders_id_given_twice_ids"] == [5001]
        db.conn.close()


def test_a_quantity_an_event_gave_never_makes_the_orders_own_record_another_order(api_config, store, api, httpserver):
    """The quantity is no identity fact: a row known only from webhooks holds the one an event gave (form 3's
    total_vouchers), and the order's own list record must still be merged, not quarantined."""
    with transaction(store) as conn:  # what a `timestamp`-form event leaves: no fact but the quantity
        orders.apply(conn, 101, "PROCESSING", now=NOW, source="webhook", quantity=3)
    listed(httpserver, first(status="delivered", transaction_id=1))
    summary = sync(api_config, store, api)
    assert summary.id_given_twice == 0 and quarantine.held(store, "order") == []
    assert stored(store)["status"] == "DELIVERED" and stored(store)["reference_code"] is not None


def test_orders_show_says_why_records_of_the_order_are_held(api_config, store, api, httpserver, client):
    """`orders show` lists what is kept but not applied to the order (`held`): the order sync's quarantined record
    under its id and the receiver's events of another order under it, each with its reason and when first and last
    seen. Before, the order showed nothing of it: only `partnerkit status` named the id."""
    from click.testing import CliRunner

    from partnerkit.cli import cli
    from partnerkit.config import config_as_env

    env = config_as_env(api_config)

    def show(fmt: str):
        result = CliRunner().invoke(cli, ["orders", "show", "101", "--format", fmt], env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout) if fmt == "json" else result.stdout

    listed(httpserver, first())
    sync(api_config, store, api)
    assert show("json")["held"] == []
    listed(httpserver, first(reference_code="R999", status="delivered"))
    for minutes in (15, 30):
        sync(api_config, store, api, NOW + timedelta(minutes=minutes))
    other = json.loads(envelope("evt_other"))
    other["data"].update(id=101, reference_code="REF-2")
    for answer in ("ignored", "duplicate"):  # the same event delivered again: seen again, not a second event
        assert post(client, json.dumps(other).encode()).get_json() == {"status": answer}
    other.update(event_id="evt_other_2")
    assert post(client, json.dumps(other).encode()).get_json() == {"status": "ignored"}

    synced, heard = show("json")["held"]
    # `events` is a number in every entry (it was null for the sync's, which keeps no event), `records` what each
    # entry keeps whatever its source: the sync's one record (its latest copy), the webhook's events.
    assert synced == {"source": "order_sync", "reason": REASON.format(ref="R999", differs="reference_code"),
                      "events": 0, "records": 1, "first_seen_at": "2024-05-01T10:15:00Z",
                      "last_seen_at": "2024-05-01T10:30:00Z"}
    assert (heard["source"], heard["events"], heard["records"]) == ("webhook", 2, 2)
    assert heard["reason"] == ("order id given twice: order 101 (ref REF-2) is stored for another order (ref R101, "
                               "placed 2024-05-01T09:59:00.000000Z), this record differs: reference_code")
    received = store.execute("SELECT min(received_at), max(last_seen_at) FROM inbox WHERE order_id = 101").fetchone()
    assert (heard["first_seen_at"], heard["last_seen_at"]) == received
    table = [line[len("held"):].strip() for line in show("table").splitlines() if line.startswith("held ")]
    assert table == [
        f"order_sync: {synced['reason']} (first seen 2024-05-01T10:15:00Z, last seen 2024-05-01T10:30:00Z)",
        f"webhook: {heard['reason']} (first seen {received[0]}, last seen {received[1]}, 2 event(s))"]

    # The order's own record listed again releases the sync's entry; the events stay as they were kept.
    listed(httpserver, first(status="delivered"))
    sync(api_config, store, api, NOW + timedelta(minutes=45))
    assert [entry["source"] for entry in show("json")["held"]] == ["webhook"]
