"""The worker's answers to a provider in trouble, piece by piece: the poller's back-off, parked voucher
fetches re-armed, unreadable records held in quarantine and released (tests/reliability has the whole
story on a virtual clock)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from partnerkit.errors import ServerError
from partnerkit.store import jobs, quarantine
from partnerkit.store.db import transaction
from partnerkit.timeutil import utcnow
from partnerkit.vouchers import FetchPolicy, catch_up_orders, rearm_parked_fetches, revive_parked_fetches, run_voucher_fetches
from reconcile.poller import poll_once
from reconcile.recharges import submit
from tests.worker.worker_helpers import mobile

T0 = datetime(2025, 3, 10, 10, 0, tzinfo=timezone.utc)


def _park(db, order_id: int, at: datetime, rearm_at: datetime | None = None) -> None:
    with transaction(db) as conn:
        jobs.queue(conn, order_id, now=at, expected_status="DELIVERED", expected_count=1)
    [job] = [j for j in jobs.claim(db, owner="t", now=at, lease_until=at + timedelta(minutes=2), limit=50)
             if j.order_id == order_id]
    with transaction(db) as conn:
        jobs.finish(conn, job, now=at, state="dead", error="gave up after 8 attempts: HTTP 500", rearm_at=rearm_at)


def test_revive_rearms_only_jobs_parked_long_enough_and_still_newest(wdb):
    for order_id in (1, 2, 3, 4):
        _park(wdb, order_id, T0)
    _park(wdb, 5, T0 + timedelta(minutes=59))
    with transaction(wdb) as conn:                       # order 2: a new event queued a newer job
        jobs.queue(conn, 2, now=T0, expected_status="DELIVERED", expected_count=2)
    with transaction(wdb) as conn:                       # order 3: a newer job already finished it
        jobs.queue(conn, 3, now=T0, expected_status="DELIVERED", expected_count=2)
    [newer] = [j for j in jobs.claim(wdb, owner="t", now=T0, lease_until=T0 + timedelta(minutes=1), limit=9)
               if j.order_id == 3]
    with transaction(wdb) as conn:
        jobs.finish(conn, newer, now=T0, state="done")
    revived = revive_parked_fetches(wdb, now=T0 + timedelta(hours=1), policy=FetchPolicy(revive_per_run=1))
    assert revived == [1]                                # one per run (revive_per_run), oldest first
    assert revive_parked_fetches(wdb, now=T0 + timedelta(hours=1)) == [4]
    assert revive_parked_fetches(wdb, now=T0 + timedelta(hours=1)) == []   # 5 parked 59 minutes ago
    rows = jobs.latest_for_orders(wdb, [1, 2, 3, 4, 5])
    assert [rows[o]["state"] for o in (1, 2, 3, 4, 5)] == ["pending", "pending", "done", "pending", "dead"]
    assert rows[1]["attempts"] == 1 and rows[1]["next_run_at"] == jobs.stamp(T0 + timedelta(hours=1))
    assert jobs.counters(wdb, "voucher_fetch.revived") == {"voucher_fetch.revived": 2}


@pytest.mark.parametrize("first, providers, seconds", [
    (True, True, 0.0),        # the provider failed its whole series: its next answer re-arms it
    (False, True, 900.0),     # re-armed and failed again: the backoff's slowest pace (cap_s)
    (True, False, 3600.0),    # the order's own trouble (404, 400, short or unreadable detail): hourly
    (False, False, 3600.0),
])
def test_when_an_answer_of_the_provider_may_rearm_a_parked_fetch(first, providers, seconds):
    assert FetchPolicy().rearm_delay(first=first, providers=providers) == seconds


def test_rearm_takes_the_parked_fetches_whose_moment_has_come_and_only_the_newest_of_an_order(wdb):
    _park(wdb, 1, T0, rearm_at=T0)
    _park(wdb, 2, T0, rearm_at=T0 + timedelta(hours=1))  # parked by the order's own trouble
    _park(wdb, 3, T0, rearm_at=T0)
    _park(wdb, 4, T0, rearm_at=T0 + timedelta(seconds=1))
    with transaction(wdb) as conn:                       # order 3: a new event queued a newer job
        jobs.queue(conn, 3, now=T0, expected_status="DELIVERED", expected_count=2)
    assert rearm_parked_fetches(wdb, now=T0, policy=FetchPolicy(rearm_per_run=5)) == [1]
    assert rearm_parked_fetches(wdb, now=T0 + timedelta(seconds=1)) == [4]
    assert rearm_parked_fetches(wdb, now=T0 + timedelta(minutes=59)) == []
    # The orders a sync listed: only theirs; `whenever` (a person ran it) whatever parked them.
    assert rearm_parked_fetches(wdb, now=T0, order_ids=[2, 3]) == []
    assert rearm_parked_fetches(wdb, now=T0, order_ids=[2, 3], whenever=True) == [2]
    rows = jobs.latest_for_orders(wdb, [1, 2, 3, 4])
    assert {o: rows[o]["state"] for o in rows} == {1: "pending", 2: "pending", 3: "pending", 4: "pending"}
    assert rows[2]["next_run_at"] == jobs.stamp(T0) and rows[2]["attempts"] == 1   # due now, attempts kept
    assert jobs.counters(wdb, "voucher_fetch.rearmed") == {"voucher_fetch.rearmed": 3}


def test_the_order_sync_rearms_what_the_provider_parked_and_by_hand_every_listed_delivering_order(
        server, config, wdb, client, stats):
    """An outage parked one fetch (the provider's 500s), the order's own trouble another: the scheduled
    sync re-arms the first as soon as its list is answered, `partnerkit orders sync` both."""
    outage = client.create_order(product_id=7, denomination=10, quantity=1)   # realtime: DELIVERED at once
    short = client.create_order(product_id=7, denomination=10, quantity=1)
    with transaction(wdb) as conn:
        for order in (outage, short):
            jobs.queue(conn, order.id, now=utcnow(), expected_status="DELIVERED", expected_count=1)
    server.sandbox.settings.faults = {"http_500": {"scope": "GET /api/v1/orders/:id"}}
    parked = run_voucher_fetches(config, wdb, client, policy=FetchPolicy(max_attempts=1))
    assert parked.dead == 2 and parked.answered == 0 and parked.rearmed == 0
    assert jobs.counts_by_state(wdb) == {"dead": 2}
    with transaction(wdb) as conn:                       # the second as a detail short of vouchers parks it
        conn.execute("UPDATE jobs SET next_run_at = ? WHERE order_id = ?",
                     (jobs.stamp(utcnow() + timedelta(hours=1)), short.id))
    server.sandbox.settings.faults = {}
    synced = catch_up_orders(config, wdb, client)
    assert synced.fetches_rearmed == 1 and synced.fetches_revived == 0
    states = jobs.latest_for_orders(wdb, [outage.id, short.id])
    assert (states[outage.id]["state"], states[short.id]["state"]) == ("pending", "dead")
    by_hand = catch_up_orders(config, wdb, client, since=utcnow() - timedelta(hours=1), rearm_listed=True)
    assert by_hand.fetches_rearmed == 1
    stats.mark()
    fetched = run_voucher_fetches(config, wdb, client)
    assert fetched.done == 2 and fetched.vouchers_added == 2 and stats.calls("GET /api/v1/orders/:id") == 2


def test_a_fetch_that_answers_rearms_the_fetches_the_providers_failure_parked(server, config, wdb, client):
    parked, later = (client.create_order(product_id=7, denomination=10, quantity=1) for _ in range(2))
    with transaction(wdb) as conn:
        jobs.queue(conn, parked.id, now=utcnow(), expected_status="DELIVERED", expected_count=1)
    server.sandbox.settings.faults = {"http_500": {"scope": "GET /api/v1/orders/:id"}}
    assert run_voucher_fetches(config, wdb, client, policy=FetchPolicy(max_attempts=1)).dead == 1
    server.sandbox.settings.faults = {}
    with transaction(wdb) as conn:                       # the provider is back: the next order's event
        jobs.queue(conn, later.id, now=utcnow(), expected_status="DELIVERED", expected_count=1)
    first = run_voucher_fetches(config, wdb, client)
    assert first.done == 1 and first.answered == 1 and first.rearmed == 1
    second = run_voucher_fetches(config, wdb, client)
    assert second.done == 1 and second.vouchers_added == 1
    assert jobs.counts_by_state(wdb) == {"done": 2}


def test_a_revived_fetch_gets_one_read_then_parks_again(server, config, wdb, client, stats):
    order = client.create_order(product_id=1, denomination=100, quantity=1, ref="stuck-revive")
    server.sandbox.settings.faults = {"http_500": {"scope": "GET /api/v1/orders/:id"}}
    with transaction(wdb) as conn:
        jobs.queue(conn, order.id, now=T0, expected_status="DELIVERED", expected_count=1)
    policy = FetchPolicy(max_attempts=2)
    moment = T0
    for _ in range(2):
        run_voucher_fetches(config, wdb, client, now=moment, policy=policy)
        moment += timedelta(minutes=5)
    assert jobs.latest_for_orders(wdb, [order.id])[order.id]["state"] == "dead"
    stats.mark()
    moment = T0 + timedelta(hours=2)
    assert revive_parked_fetches(wdb, now=moment, policy=policy) == [order.id]
    summary = run_voucher_fetches(config, wdb, client, now=moment, policy=policy)
    assert summary.outcomes == {"dead": 1} and stats.calls() == 1
    row = jobs.latest_for_orders(wdb, [order.id])[order.id]
    assert row["state"] == "dead" and row["last_error"].startswith("gave up after 3 attempts: HTTP 500")


def test_the_poller_backs_off_after_a_failed_pass_and_resumes_when_the_provider_answers(server, config, wdb,
                                                                                       client, stats):
    submit(config, wdb, client, mobile_number=mobile(5), operator_id=1, amount=199)
    server.sandbox.settings.faults = {"http_500": {"scope": "recharges"}}
    start = server.clock.now() + timedelta(seconds=10)
    stats.mark()
    with pytest.raises(ServerError):
        poll_once(config, wdb, client, now=start)
    waiting = poll_once(config, wdb, client, now=start + timedelta(seconds=4))
    assert waiting.backing_off_until is not None and waiting.calls == 0 and stats.calls() == 1
    with pytest.raises(ServerError):                      # 5 s later: tried again, then 10 s of quiet
        poll_once(config, wdb, client, now=start + timedelta(seconds=5))
    assert poll_once(config, wdb, client, now=start + timedelta(seconds=14)).calls == 0
    server.sandbox.settings.faults = {}
    server.advance(601)                                   # the fixture's processing delay: settled
    resumed = poll_once(config, wdb, client, now=start + timedelta(seconds=15))
    assert resumed.backing_off_until is None and resumed.settled == 1
    assert stats.calls() == 3                             # one read per pass that was not backing off


def test_unreadable_records_are_held_then_released(wdb):
    raw = {"id": 100001, "reference_number": "RCH1", "created_at": "2025-03-10T10:00:00.000Z"}
    keys = quarantine.hold(wdb, "recharge", [("Recharge.status: missing", raw), ("no id at all", {"x": 1})], now=T0)
    assert keys[0] == "recharge:100001" and keys[1].startswith("recharge:sha256:")
    held = quarantine.held(wdb, "recharge")
    assert [(h["key"], h["reason"], h["day"]) for h in held][0] == ("recharge:100001", "Recharge.status: missing",
                                                                    "2025-03-10")
    assert quarantine.held(wdb, "order") == []
    assert quarantine.release(wdb, "recharge", [100001, 5]) == 1
    assert [h["key"] for h in quarantine.held(wdb, "recharge")] == [keys[1]]
    with pytest.raises(ValueError, match="unknown quarantine kind"):
        quarantine.key_for("voucher", raw)


def test_a_status_the_document_does_not_describe_is_quarantined_not_raised(wdb):
    from partnerkit.store import recharges as store

    def record(rid, status):
        return {"id": rid, "reference_number": f"RCH{rid}", "status": status, "mobile_number": "9800000005",
                "face": "100.00", "discount": "2.00", "payable": "98.00", "created_at": "2025-03-10T10:00:00Z"}

    result = store.upsert_from_provider(wdb, [record(1, "SUCCESS"), record(2, "PENDING"), record(3, "FAILED")], T0)
    assert result.inserted == 2 and result.seen_provider_ids == {1, 2, 3}
    assert result.rejected == [(2, "recharge record unreadable: recharge status 'PENDING' is not one the document "
                                   "describes")]
    assert [h["key"] for h in quarantine.held(wdb, "recharge")] == ["recharge:2"]
    # Read correctly later: stored, and released from the quarantine.
    assert store.upsert_from_provider(wdb, [record(2, "SUCCESS")], T0).inserted == 1
    assert quarantine.held(wdb, "recharge") == []
