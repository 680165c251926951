"""Voucher fetch jobs and the order sync against a real HTTP server (pytest-httpserver)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from partnerkit.crypto import load_cipher
from partnerkit.store import inbox, jobs, open_db
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.db import transaction
from partnerkit.vouchers import FetchPolicy, catch_up_orders, run_voucher_fetches, unseal

NOW = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
CODES = ["GIFT-AAAA-1111", "GIFT-BBBB-2222", "GIFT-CCCC-3333"]


def detail(status="DELIVERED", codes=CODES[:2], quantity=2, order_id=101):
    return {"id": order_id, "reference_code": "REF-1", "transaction_id": 9001, "amount": "1000.00",
            "product_id": 7, "denomination": "500.00", "quantity": quantity, "discount": "0.00", "status": status,
            "placed_at": "2024-05-01T09:59:00Z",
            "vouchers": [{"card_number": c, "pin_code": f"PIN-{i}", "claim_url": None,
                          "voucher_reference_number": f"VR-{c[-4:]}", "expires_at": "2025-05-01T00:00:00Z"}
                         for i, c in enumerate(codes)]}


@pytest.fixture
def client(api):  # the provider's client here (tests/receiver/conftest.py's `api`), not the receiver's test client
    return api


def queue(db, order_id=101, status="DELIVERED", count=2):
    with transaction(db) as conn:
        jobs.queue(conn, order_id, now=NOW, expected_status=status, expected_count=count)


def job_row(db, order_id=101):
    return db.execute("SELECT state, attempts, last_error, next_run_at FROM jobs WHERE order_id = ? ORDER BY id DESC",
                      (order_id,)).fetchone()


def test_delivered_vouchers_stored_encrypted_once(api_config, store, client, httpserver):
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(detail())
    queue(store)
    summary = run_voucher_fetches(api_config, store, client, now=NOW)
    assert (summary.claimed, summary.done, summary.vouchers_added) == (1, 1, 2)
    assert job_row(store)[0] == "done"
    rows = voucher_store.for_order(store, 101)
    cipher = load_cipher(api_config)
    assert [unseal(cipher, r)["card_number"] for r in rows] == CODES[:2]
    assert [unseal(cipher, r)["pin_code"] for r in rows] == ["PIN-0", "PIN-1"]
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = api_config.db_path.read_bytes()
    for secret in (CODES[0], CODES[1], "PIN-0"):
        assert secret.encode() not in raw
    assert store.execute("SELECT status FROM orders WHERE id = 101").fetchone() == ("DELIVERED",)
    assert run_voucher_fetches(api_config, store, client, now=NOW + timedelta(hours=1)).claimed == 0


def test_429_obeys_retry_after(api_config, store, client, httpserver):
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(
        {"error": "rate_limit_exceeded", "message": "Too many requests. Please try again later."}, status=429,
        headers={"Retry-After": "120"})
    queue(store)
    assert run_voucher_fetches(api_config, store, client, now=NOW).retried == 1
    state, attempts, error, next_run = job_row(store)
    assert (state, attempts) == ("pending", 1) and "429" in error
    assert next_run >= jobs.stamp(NOW + timedelta(seconds=120))
    assert run_voucher_fetches(api_config, store, client, now=NOW + timedelta(seconds=60)).claimed == 0


def test_500_backs_off_then_succeeds(api_config, store, client, httpserver):
    httpserver.expect_ordered_request("/api/v1/orders/101").respond_with_json(
        {"error": "internal_error", "message": "Failed to retrieve order"}, status=500)
    httpserver.expect_ordered_request("/api/v1/orders/101").respond_with_json(detail())
    queue(store)
    assert run_voucher_fetches(api_config, store, client, now=NOW).retried == 1
    assert job_row(store)[3] == jobs.stamp(NOW + timedelta(seconds=10))
    assert run_voucher_fetches(api_config, store, client, now=NOW + timedelta(seconds=5)).claimed == 0
    assert run_voucher_fetches(api_config, store, client, now=NOW + timedelta(seconds=10)).done == 1
    assert voucher_store.count(store, 101) == 2


def test_404_retried_then_parked_with_reason_in_events_list(api_config, store, client, httpserver):
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(
        {"error": "not_found", "message": "No Matching Result Found!"}, status=404)
    with transaction(store) as conn:
        conn.execute("INSERT INTO inbox (dedup_key, event_type, order_id, status, state, received_at, last_seen_at, body)"
                     " VALUES ('e1', 'order.delivered', 101, 'DELIVERED', 'processed', 'x', 'x', x'')")
    queue(store)
    moment = NOW
    for _ in range(3):
        run_voucher_fetches(api_config, store, client, now=moment)
        moment += timedelta(hours=1)
    state, attempts, error, _ = job_row(store)
    assert (state, attempts) == ("dead", 3)
    assert error.startswith("gave up after 3 attempts: HTTP 404")
    event, = inbox.listing(store)
    assert event["job_state"] == "dead" and "404" in event["job_reason"]


def test_not_yet_delivered_then_partial_then_complete(api_config, store, client, httpserver):
    httpserver.expect_ordered_request("/api/v1/orders/101").respond_with_json(detail("PROCESSING", [], quantity=3))
    httpserver.expect_ordered_request("/api/v1/orders/101").respond_with_json(detail("PARTIALLY_DELIVERED", CODES[:1], 3))
    httpserver.expect_ordered_request("/api/v1/orders/101").respond_with_json(detail("DELIVERED", CODES, 3))
    queue(store, count=3)
    moment = NOW
    results = []
    for _ in range(3):
        results.append(run_voucher_fetches(api_config, store, client, now=moment))
        moment += timedelta(hours=1)
    assert [r.outcomes for r in results] == [{"retried": 1}, {"retried": 1}, {"done": 1}]
    assert [r.vouchers_added for r in results] == [0, 1, 2]  # the re-read adds only the new ones
    assert voucher_store.count(store, 101) == 3
    assert job_row(store)[0] == "done"


def test_gives_up_after_max_attempts(api_config, store, client, httpserver):
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(detail("PROCESSING", []))
    queue(store)
    policy = FetchPolicy(max_attempts=3)
    moment = NOW
    for _ in range(4):
        run_voucher_fetches(api_config, store, client, now=moment, policy=policy)
        moment += timedelta(hours=1)
    state, attempts, error, _ = job_row(store)
    assert (state, attempts) == ("dead", 3) and "detail shows PROCESSING, event announced DELIVERED" in error
    assert jobs.counters(store, "voucher_fetch.") == {"voucher_fetch.not_ready": 3}


def test_a_new_event_while_running_rearms_the_job(api_config, store, client, httpserver):
    """A DELIVERED event arriving while a partial fetch runs must not be lost when that fetch ends."""
    queue(store, status="PARTIALLY_DELIVERED", count=1)

    def respond(request):
        queue(store, status="DELIVERED", count=2)  # arrives mid-fetch
        from werkzeug import Response
        import json
        return Response(json.dumps(detail("PARTIALLY_DELIVERED", CODES[:1])), content_type="application/json")

    httpserver.expect_request("/api/v1/orders/101").respond_with_handler(respond)
    run_voucher_fetches(api_config, store, client, now=NOW)
    state, _, _, next_run = job_row(store)
    assert state == "pending" and next_run == jobs.stamp(NOW)


def test_two_workers_never_claim_the_same_job(api_config):
    dbs = [open_db(api_config.db_path) for _ in range(4)]
    for order_id in range(1, 41):
        queue(dbs[0], order_id=order_id)
    claimed: list[list[int]] = []
    barrier = threading.Barrier(4)

    def worker(db):
        barrier.wait()
        claimed.append([j.id for j in jobs.claim(db, owner=str(id(db)), now=NOW, lease_until=NOW + timedelta(minutes=2),
                                                 limit=15)])

    threads = [threading.Thread(target=worker, args=(db,)) for db in dbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [j for ids in claimed for j in ids]
    assert len(every) == len(set(every)) == 40
    # An expired lease (crashed worker) makes the job claimable again.
    later = jobs.claim(dbs[0], owner="other", now=NOW + timedelta(minutes=3), lease_until=NOW + timedelta(minutes=5), limit=100)
    assert len(later) == 40


def order_item(order_id, status, placed_at, quantity=2):
    return {"id": order_id, "product_name": "Gift Card", "currency": "INR", "reference_code": f"R{order_id}",
            "transaction_id": 5000 + order_id, "product_id": 7, "denomination": "500.00", "quantity": quantity,
            "amount": "1000.00", "status": status, "email": None,
            "mobile": {"mobile_country_code": "91", "mobile_number": "9876543210"}, "placed_at": placed_at}


def test_catch_up_repairs_a_missed_webhook(api_config, store, client, httpserver):
    items = [order_item(3, "delivered", "2024-05-01T09:50:00Z"), order_item(2, "processing", "2024-05-01T09:40:00Z"),
             order_item(1, "delivered", "2024-04-29T09:00:00Z")]
    httpserver.expect_request("/api/v1/orders").respond_with_json(
        {"orders": items}, headers={"X-Page": "1", "X-Total-Pages": "1", "X-Total-Count": "3", "X-Page-Size": "100"})
    summary = catch_up_orders(api_config, store, client, since=NOW - timedelta(hours=1), now=NOW)
    assert (summary.seen, summary.updated, summary.fetches_queued, summary.stopped) == (2, 2, 1, "reached since")
    assert store.execute("SELECT id, status FROM orders ORDER BY id").fetchall() == [(2, "PROCESSING"), (3, "DELIVERED")]
    assert store.execute("SELECT order_id, state, expected_count FROM jobs").fetchall() == [(3, "pending", 2)]
    # The watermark is the oldest order that may still change.
    again = catch_up_orders(api_config, store, client, now=NOW)
    assert again.since == "2024-05-01T09:40:00Z" and again.updated == 0 and again.fetches_queued == 0


def test_a_refused_api_key_parks_nothing_and_spends_one_call(api_config, store, client, httpserver):
    """A 401 is the key's, not the order's: every fetch claimed in that run used to be parked (one 401
    each), and a parked fetch is revived only hourly, so vouchers came an hour after the key was fixed."""
    httpserver.expect_ordered_request("/api/v1/orders/101").respond_with_json(
        {"error": "unauthorized", "message": "Invalid or expired access token"}, status=401)
    queue(store, 101)
    queue(store, 102)
    summary = run_voucher_fetches(api_config, store, client, now=NOW)
    assert (summary.dead, summary.deferred, len(httpserver.log)) == (0, 2, 1)
    state, attempts, error, next_run = job_row(store, 101)
    assert (state, attempts) == ("pending", 0) and "waiting for the provider to accept the API key" in error
    assert next_run == "2024-05-01T10:01:00.000000Z"
    assert job_row(store, 102)[:2] == ("pending", 0)
    assert store.execute("SELECT COUNT(*) FROM provider_refusals").fetchone()[0] == 1

    httpserver.clear()  # the key is put right
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(detail())
    httpserver.expect_request("/api/v1/orders/102").respond_with_json(detail(order_id=102))
    later = run_voucher_fetches(api_config, store, client, now=NOW + timedelta(minutes=1))
    assert (later.done, later.vouchers_added) == (2, 4)
    assert store.execute("SELECT COUNT(*) FROM provider_refusals").fetchone()[0] == 0


def test_a_key_rotated_and_retired_while_the_detail_is_read_seals_with_the_new_key(api_config, store, client,
                                                                                     httpserver):
    # `keys rotate`, `keys rewrap`, `keys retire` run while a fetch waits for a slow provider: vouchers sealed
    # with the key the run began with would be unreadable for good once retire dropped it.
    from partnerkit.rotation import retire_key_file, rotate_key_file
    from werkzeug.wrappers import Response

    api_config = replace(api_config, voucher_key=None, voucher_key_previous=())  # the generated key file's case
    load_cipher(api_config)  # the key file the run begins with
    first_key = api_config.key_file.read_text().split()[0]

    def rotate_then_answer(request):
        rotate_key_file(api_config.key_file)
        other = open_db(api_config.db_path)
        try:
            assert retire_key_file(api_config.key_file, other)[1] == 1  # nothing stored needs the old key yet
        finally:
            other.conn.close()
        return Response(json.dumps(detail()), content_type="application/json")

    httpserver.expect_request("/api/v1/orders/101").respond_with_handler(rotate_then_answer)
    queue(store)
    assert run_voucher_fetches(api_config, store, client, now=NOW).vouchers_added == 2
    assert first_key not in api_config.key_file.read_text()  # retired: only the new key is left
    cipher = load_cipher(api_config)
    assert [unseal(cipher, r)["card_number"] for r in voucher_store.for_order(store, 101)] == CODES[:2]


def test_a_fetch_that_waits_for_the_write_lock_seals_with_the_key_it_finds_once_it_has_the_lock(api_config, store,
                                                                                               client, httpserver):
    # The worker waits up to WORKER_BUSY_TIMEOUT_MS (15 s) for another process's write lock, longer than the
    # KEY_PICKUP_S that `keys rewrap` and `keys retire` wait: vouchers sealed before that wait, with a key that
    # `keys rotate; keys retire` dropped during it, were stored unreadable.
    from werkzeug.wrappers import Response

    from tests.key_rotation import rotate_and_retire_behind_the_lock

    api_config = replace(api_config, voucher_key=None, voucher_key_previous=())  # the generated key file's case
    load_cipher(api_config)
    first_key = api_config.key_file.read_text().split()[0]
    rotated = threading.Event()

    def answer_with_the_lock_taken(request):  # the fetch then has its answer and waits for the lock
        rotate_and_retire_behind_the_lock(api_config, rotated)
        return Response(json.dumps(detail()), content_type="application/json")

    httpserver.expect_request("/api/v1/orders/101").respond_with_handler(answer_with_the_lock_taken)
    queue(store)
    assert run_voucher_fetches(api_config, store, client, now=NOW).vouchers_added == 2
    assert rotated.is_set() and first_key not in api_config.key_file.read_text()
    cipher = load_cipher(api_config)
    assert [unseal(cipher, r)["card_number"] for r in voucher_store.for_order(store, 101)] == CODES[:2]
