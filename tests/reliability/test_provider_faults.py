"""The provider misbehaving for minutes at a time: nothing lost, budget honoured, work resumes by itself,
malformed records quarantined with a reason (issue 7, provider faults).

Every test runs the real kit (the worker's JobRunner, PartnerClient, SQLite in tmp_path) against the
real sandbox on loopback, switches a fault on through the sandbox's control API, drives the worker's
jobs on a virtual clock for minutes (tests/reliability/provider_world.py), switches the fault off and
lets the same jobs run on: no manual step. The sandbox's hourly limit equals the kit's budget, so a
burst past the budget would show as a real 429 from the sandbox (`rate_limited`), which must stay 0.
"""

from __future__ import annotations


import pytest
from freezegun import freeze_time

from partnerkit.money import from_cents
from partnerkit.store import jobs, quarantine
from partnerkit.store import recharges as recharge_store
from partnerkit.client._http import RetryPolicy
from reconcile.jobs import report_day
from reconcile.locate import locate
from reconcile.recharges import submit
from tests.reliability.provider_orders import codes_stored, delivered_orders, mobile, processing_recharges
from tests.reliability.provider_world import (
    FAULTS, ORDER_DETAIL, RECHARGE_LIST, RECHARGE_ONE, START, SUBMIT, World, local_orders, local_recharges, local_transactions,
)

# What each fault leaves in a parked fetch's reason (the client's own words).
REASONS = {"http_500": "HTTP 500", "rate_limit": "429", "slow": "no answer within the timeout",
           "malformed_json": "body is not JSON"}


@pytest.fixture
def frozen():
    with freeze_time(START) as clock:
        yield clock


def _world(tmp_path, frozen, fault: str) -> World:
    # A slow provider costs real seconds (the client waits for its timeout): one attempt per read,
    # a 0.5 s timeout against a 1.5 s hold. Otherwise a 2 s timeout no healthy answer comes near.
    if fault == "slow":
        return World(tmp_path, frozen, timeout_s=0.5, retry=RetryPolicy(max_attempts=1))
    return World(tmp_path, frozen)


def _gaps(records: list[dict]) -> list[float]:
    """Seconds between the runs that made API calls."""
    stamps = [r["at"] for r in records if r["calls"]]
    return [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:])]


# ---- voucher fetches ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["http_500", "rate_limit", "slow", "malformed_json"])
def test_voucher_fetch_rides_out_a_provider_fault(tmp_path, frozen, fault):
    """Fetches back off and park with the fault named; an hour later the catch-up re-arms them and every
    voucher is stored exactly as the provider has it; every call went through the shared budget."""
    with _world(tmp_path, frozen, fault) as world:
        orders = delivered_orders(world, count=1 if fault == "slow" else 3, quantity=2)
        # (A slow list would only make the catch-up wait too: the detail is what the fetch reads.)
        with world.fault(fault, scope=ORDER_DETAIL if fault == "slow" else "orders", **FAULTS[fault]):
            # The scheduler runs the fetch every 3 s; stepping 10 s (its shortest backoff) runs it as
            # often as anything is due, at a third of the cost.
            during = world.drive("fetch-vouchers", "catch-up-orders", seconds=30 * 60, every=10)
            # Every API call of the last half hour was taken from the shared budget first.
            assert world.budget_used() == world.general_calls()
        fetches = [r for r in during if r["job"] == "fetch-vouchers"]
        assert {r["outcome"] for r in fetches} == {"ok"}          # a fetch's failure is the job's, not the run's
        assert all(codes_stored(world, o) == [] for o in orders)
        rows = jobs.latest_for_orders(world.db, orders)
        assert all(REASONS[fault] in rows[o]["last_error"] for o in orders), rows
        if fault == "rate_limit":
            # Retry-After (120 s) is obeyed by every job: no call at all until it has passed.
            assert min(_gaps(fetches)) >= 120
            assert world.injected("rate_limit") == len([r for r in fetches if r["calls"]])
        else:
            assert {r["state"] for r in rows.values()} == {"dead"}  # parked after its attempts
            detail_calls = world.calls(ORDER_DETAIL)
            # 8 attempts each; a fault of the detail alone leaves the list answering, and the order sync
            # re-arms a fetch the provider parked for one more read (then every 15 minutes at most).
            rearmed = jobs.counters(world.db, "voucher_fetch.rearmed").get("voucher_fetch.rearmed", 0)
            assert detail_calls <= (len(orders) * 8 + rearmed) * world.retry.max_attempts
            assert rearmed <= (len(orders) if fault == "slow" else 0)
        # The provider recovers. Nobody touches anything: the worker's jobs run on.
        world.drive("fetch-vouchers", "catch-up-orders", seconds=2 * 3600, every=30)
        for order_id in orders:
            assert codes_stored(world, order_id) == world.provider_codes(order_id)
        assert jobs.counts_by_state(world.db) == {"done": len(orders)}
        assert world.sb.rate_limited == 0


def test_parked_fetches_are_read_as_soon_as_the_provider_answers_again(tmp_path, frozen):
    """Finding 6 (session 14): fetches parked during an outage waited for the hourly revival after the
    provider was back. The order sync's first answered page re-arms them: every voucher within minutes,
    one detail read per order, none of it the hourly revival's."""
    with World(tmp_path, frozen) as world:
        orders = delivered_orders(world, count=3, quantity=2)
        with world.fault("http_500", scope="orders"):
            world.drive("fetch-vouchers", "catch-up-orders", seconds=30 * 60, every=10)
        assert {r["state"] for r in jobs.latest_for_orders(world.db, orders).values()} == {"dead"}
        details = world.calls(ORDER_DETAIL)
        world.drive("fetch-vouchers", "catch-up-orders", seconds=6 * 60, every=10)
        for order_id in orders:
            assert codes_stored(world, order_id) == world.provider_codes(order_id)
        assert world.calls(ORDER_DETAIL) - details == len(orders)
        assert jobs.counters(world.db, "voucher_fetch.re") == {"voucher_fetch.rearmed": len(orders)}
        assert world.sb.rate_limited == 0


def test_a_detail_that_keeps_failing_is_reread_at_the_backoffs_pace_while_the_list_answers(tmp_path, frozen):
    """Re-arming on the provider's answers keeps the backoff's purpose: an order detail that keeps failing
    while every order sync's list is answered is read again every 15 minutes at most, not every 5."""
    with World(tmp_path, frozen) as world:
        [order] = delivered_orders(world, count=1, quantity=1)
        with world.fault("http_500", scope=ORDER_DETAIL):
            world.drive("fetch-vouchers", "catch-up-orders", seconds=25 * 60, every=10)
            assert jobs.latest_for_orders(world.db, [order])[order]["state"] == "dead"
            details = world.calls(ORDER_DETAIL)
            world.drive("fetch-vouchers", "catch-up-orders", seconds=90 * 60, every=10)
        rearmed = jobs.counters(world.db, "voucher_fetch.rearmed")["voucher_fetch.rearmed"]
        # Once at once (its first park), then at most every 15 minutes: 18 syncs ran meanwhile.
        assert 2 <= rearmed <= 7, rearmed
        assert world.calls(ORDER_DETAIL) - details == rearmed * world.retry.max_attempts
        world.drive("fetch-vouchers", "catch-up-orders", seconds=16 * 60, every=10)
        assert codes_stored(world, order) == world.provider_codes(order)


@pytest.mark.parametrize("fault,spec,reason", [
    ("missing_fields", {"fields": ["card_number"]}, "OrderDetail.vouchers[0]: Voucher.card_number: missing"),
    ("money_precision", {}, "more than 2 decimal places"),
])
def test_a_malformed_order_detail_parks_its_fetch_and_never_blocks_the_others(tmp_path, frozen, fault, spec, reason):
    with World(tmp_path, frozen) as world:
        bad, *good = delivered_orders(world, count=3, quantity=2)
        with world.fault(fault, scope=ORDER_DETAIL, ids=[bad], **spec):
            runs = world.drive("fetch-vouchers", seconds=30 * 60, every=10)
        assert {r["outcome"] for r in runs} == {"ok"}
        for order_id in good:                                     # fetched at once, in the same runs
            assert codes_stored(world, order_id) == world.provider_codes(order_id)
        parked = jobs.latest_for_orders(world.db, [bad])[bad]
        assert parked["state"] == "dead" and reason in parked["last_error"]
        assert codes_stored(world, bad) == []
        assert world.calls(ORDER_DETAIL) == len(good) + 8         # the bad one: 8 reads over 21 minutes
        world.drive("fetch-vouchers", "catch-up-orders", seconds=2 * 3600, every=30)
        assert codes_stored(world, bad) == world.provider_codes(bad)
        assert jobs.counters(world.db, "voucher_fetch.revived") == {"voucher_fetch.revived": 1}


# ---- the recharge poller ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["http_500", "rate_limit", "slow", "malformed_json"])
def test_poller_rides_out_a_provider_fault(tmp_path, frozen, fault):
    """PROCESSING recharges settle at the provider during the fault; the poller backs off (never every 5 s
    against a failing provider), never resubmits, and settles every one as soon as the provider answers."""
    with _world(tmp_path, frozen, fault) as world:
        local = processing_recharges(world, digits=[5, 6, 7, 5])
        submits = world.calls(SUBMIT)
        with world.fault(fault, scope="recharges", **FAULTS[fault]):
            during = world.drive("poll-recharges", seconds=5 * 60)
            assert world.budget_used() == world.general_calls()
        assert {r["status"] for r in local_recharges(world).values()} == {"PROCESSING"}
        assert {r["outcome"] for r in during} <= {"ok", "error", "budget_exhausted"}
        gaps = _gaps(during)
        if fault == "rate_limit":
            assert min(gaps) >= 120                                 # Retry-After, for every pass
        else:
            assert all(60 <= gap < 70 for gap in gaps[-3:]), gaps  # backed off to once a minute
        # The provider answers again: the first pass after the back-off (or the Retry-After) settles all.
        world.drive("poll-recharges", seconds=125 if fault == "rate_limit" else 65)
        assert {p: (r["status"], r["payable"]) for p, r in local_recharges(world).items()} == \
            world.provider_recharges()
        assert len(local) == 4 and world.calls(SUBMIT) == submits  # never a resubmit
        assert world.sb.rate_limited == 0


@pytest.mark.parametrize("fault,spec,reason", [
    ("missing_fields", {"fields": ["status"]}, "Recharge.status: missing"),
    ("money_precision", {}, "more than 2 decimal places"),
])
def test_poller_quarantines_a_bad_record_and_settles_the_rest_of_the_page(tmp_path, frozen, fault, spec, reason):
    with World(tmp_path, frozen) as world:
        processing_recharges(world, digits=[5, 6, 7, 5])
        bad = min(world.provider_recharges())
        world.advance(25)                                          # all four settled at the provider
        with world.fault(fault, scope="recharges", ids=[bad], **spec):
            runs = world.drive("poll-recharges", seconds=2 * 60)
        assert {r["outcome"] for r in runs} == {"ok"}
        rows = local_recharges(world)
        assert rows[bad]["status"] == "PROCESSING" and reason in rows[bad]["last_error"]
        truth = world.provider_recharges()
        assert {p: (r["status"], r["payable"]) for p, r in rows.items() if p != bad} == \
            {p: v for p, v in truth.items() if p != bad}
        [held] = quarantine.held(world.db, "recharge")
        assert held["key"] == f"recharge:{bad}" and reason in held["reason"]
        # Read on the document's schedule like any other, not in a loop: the first pass lists the page
        # (age 25 s), then one read every 5 s to an age of 1 minute and every 15 s after: 12 in 2 minutes.
        assert world.calls(RECHARGE_LIST) + world.calls(RECHARGE_ONE) <= 13
        world.drive("poll-recharges", seconds=5 * 60)
        assert local_recharges(world)[bad]["status"] == truth[bad][0]
        assert local_recharges(world)[bad]["last_error"] is None
        assert quarantine.held(world.db, "recharge") == []


# ---- the syncs --------------------------------------------------------------------------------------------
def _day_of_traffic(world) -> None:
    """Recharges of every outcome, an instant order, a pending one; some settle during the fault."""
    processing_recharges(world, digits=[0, 4, 5, 6, 7])
    client = world.client("setup", timeout=10)
    client.create_order(product_id=7, denomination=10, quantity=2)
    client.create_order(product_id=1, denomination=100, quantity=1, ref="stuck-sync")


def _assert_store_matches_provider(world) -> None:
    assert {p: (r["status"], r["payable"]) for p, r in local_recharges(world).items()} == world.provider_recharges()
    assert local_transactions(world) == world.provider_transactions()
    assert local_orders(world) == world.provider_orders()


@pytest.mark.parametrize("fault", ["http_500", "rate_limit", "slow", "malformed_json"])
def test_sync_recent_fails_cleanly_during_a_fault_and_the_next_run_repairs_everything(tmp_path, frozen, fault):
    with _world(tmp_path, frozen, fault) as world:
        _day_of_traffic(world)
        with world.fault(fault, **FAULTS[fault]):
            world.advance(30)                                      # PROCESSING ones settle meanwhile
            during = world.drive("sync-recent", seconds=30 * 60)
            assert world.budget_used() == world.general_calls()
        assert {r["outcome"] for r in during} <= {"error", "budget_exhausted"}
        after = world.drive("sync-recent", seconds=15 * 60)
        assert after[0]["outcome"] == "ok"
        _assert_store_matches_provider(world)
        assert world.sb.rate_limited == 0


@pytest.mark.parametrize("fault,reason", [("money_precision", "more than 2 decimal places"),
                                          ("missing_fields", "no amount")])
def test_sync_quarantines_an_unreadable_transaction_and_releases_it_once_read_again(tmp_path, frozen, fault, reason):
    """Held as `transaction:<id>` while the provider sends it broken, listed in the day's report; the
    first sync that reads it correctly stores it and releases it, and the report no longer lists it."""
    with World(tmp_path, frozen) as world:
        _day_of_traffic(world)
        world.advance(30)
        bad = sorted(world.provider_transactions())[2]
        with world.fault(fault, scope="transactions", ids=[int(bad)]):
            [run] = world.drive("sync-recent", seconds=60)
            assert run["outcome"] == "ok" and run["result"]["quarantined"] == 1
            stored = local_transactions(world)
            assert bad not in stored and len(stored) == len(world.provider_transactions()) - 1
            [held] = quarantine.held(world.db, "transaction")
            assert held["key"] == f"transaction:{bad}" and reason in held["reason"]
            report = report_day(world.config, world.db, START.date(), now=world.now())
            assert [q["key"] for q in report["quarantined"]] == [f"transaction:{bad}"]
            world.advance(15 * 60)
            [run] = world.drive("sync-recent", seconds=60)                # still broken: held once, not twice
            assert run["result"]["quarantined"] == 1 and len(quarantine.held(world.db, "transaction")) == 1
        world.advance(15 * 60)
        [run] = world.drive("sync-recent", seconds=60)
        assert run["outcome"] == "ok" and run["result"]["quarantined"] == 0
        _assert_store_matches_provider(world)
        assert quarantine.held(world.db, "transaction") == []
        report = report_day(world.config, world.db, START.date(), now=world.now())
        assert report["quarantined"] == [] and report["summary"]["quarantined"] == 0
        world.advance(15 * 60)                                            # re-running changes nothing
        world.drive("sync-recent", seconds=60)
        _assert_store_matches_provider(world)
        assert quarantine.held(world.db, "transaction") == []


@pytest.mark.parametrize("fault,reason", [("missing_fields", "balance: expected an amount"),
                                          ("money_precision", "more than 2 decimal places")])
def test_sync_quarantines_an_unreadable_wallet_balance_and_the_next_run_records_it(tmp_path, frozen, fault, reason):
    """No guessed balance: the wallet is held as `wallet:<id>` with the reason and listed in the day's
    report; the next snapshot that reads it stores its balance and releases it."""
    with World(tmp_path, frozen) as world:
        _day_of_traffic(world)
        world.advance(30)
        inr = min(w.id for w in world.sb.wallets.values() if w.client_key == world.key)
        with world.fault(fault, scope="wallet", ids=[inr]):
            [run] = world.drive("sync-recent", seconds=60)
        assert run["outcome"] == "ok" and run["result"]["wallets"] == 1      # USD only; no guessed INR
        _assert_store_matches_provider(world)
        [held] = quarantine.held(world.db, "wallet")
        assert held["key"] == f"wallet:{inr}" and reason in held["reason"] and held["day"] == world.now().date().isoformat()
        report = report_day(world.config, world.db, START.date(), now=world.now())
        assert [q["key"] for q in report["quarantined"]] == [f"wallet:{inr}"]
        world.advance(15 * 60)
        [run] = world.drive("sync-recent", seconds=60)
        latest = dict(world.db.execute("SELECT currency, balance_cents FROM wallet_snapshots"
                                       " WHERE taken_at = (SELECT MAX(taken_at) FROM wallet_snapshots)").fetchall())
        assert from_cents(latest["INR"]) == world.sb.wallets[inr].balance
        assert quarantine.held(world.db, "wallet") == []
        assert report_day(world.config, world.db, START.date(), now=world.now())["quarantined"] == []


def test_order_catch_up_quarantines_an_order_without_status_and_applies_the_others(tmp_path, frozen):
    with World(tmp_path, frozen) as world:
        client = world.client("setup", timeout=10)
        created = [client.create_order(product_id=7, denomination=10, quantity=1).id for _ in range(3)]
        bad = created[1]
        with world.fault("missing_fields", scope="orders", ids=[bad]):
            [run] = world.drive("catch-up-orders", seconds=60)
        assert run["outcome"] == "ok" and run["result"]["quarantined"] == 1
        assert set(local_orders(world)) == set(created) - {bad}
        [held] = quarantine.held(world.db, "order")
        assert held["key"] == f"order:{bad}" and "OrderSummary.status: missing" in held["reason"]
        world.drive("catch-up-orders", seconds=5 * 60)
        assert local_orders(world) == world.provider_orders()
        assert quarantine.held(world.db, "order") == []


def test_sync_quarantines_a_recharge_without_status_and_stores_the_rest(tmp_path, frozen):
    with World(tmp_path, frozen) as world:
        _day_of_traffic(world)
        world.advance(30)
        bad = max(world.provider_recharges())
        with world.fault("missing_fields", scope="recharges", ids=[bad], fields=["status"]):
            [run] = world.drive("sync-recent", seconds=60)
        assert run["outcome"] == "ok"
        assert quarantine.held(world.db, "recharge")[0]["key"] == f"recharge:{bad}"


# ---- recharge submit --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault,created", [("http_500", 0), ("slow", 1), ("malformed_json", 1), ("rate_limit", 0)])
def test_submit_during_a_fault_never_creates_a_second_recharge(tmp_path, frozen, fault, created):
    """A lost answer is located, never re-sent: the worker links it once the provider answers; a refused
    (429) or never-arrived (500 before any write) submit stays refused or UNKNOWN, never retried by a job."""
    with _world(tmp_path, frozen, fault) as world:
        number = mobile(5)
        client = world.client("cli", wait=True)
        with world.fault(fault, scope="recharges", **FAULTS[fault]):
            if fault == "rate_limit":
                with pytest.raises(Exception, match="429|rate limit"):
                    submit(world.config, world.db, client, mobile_number=number, operator_id=1, amount=199)
                outcome = None
            else:
                outcome = submit(world.config, world.db, client, mobile_number=number, operator_id=1, amount=199)
                assert outcome.status == "UNKNOWN" and "Do NOT submit it again" in outcome.message
        at_provider = [r for r in world.sb.recharges.values() if r.mobile_number == number]
        assert len(at_provider) == created
        # The provider recovers; only the worker's jobs run (no manual locate).
        world.drive("poll-recharges", "sync-recent", seconds=20 * 60)
        at_provider = [r for r in world.sb.recharges.values() if r.mobile_number == number]
        assert len(at_provider) == created                          # no job ever re-sends a submit
        rows = [r for r in recharge_store.list_rows(world.db) if r["mobile_number"] == number]
        if created:
            [row] = rows                                            # linked by client_reference by the sync
            assert (row["provider_id"], row["status"]) == (at_provider[0].id, at_provider[0].status)
        elif fault == "rate_limit":
            assert rows == []                                       # a 429 is a refusal: no intent kept
        else:
            [row] = rows
            assert row["status"] == "UNKNOWN"                       # the operator decides; see the report
            # 20 minutes on, locate only searches: sending the key now would perform the recharge.
            looked = locate(world.config, world.db, client, local_id=row["local_id"])
            assert looked.status == "UNKNOWN" and "--replay" in looked.message
            assert not [r for r in world.sb.recharges.values() if r.mobile_number == number]
            # --replay sends the same Idempotency-Key: at most one recharge, however often it is run.
            for _ in range(2):
                located = locate(world.config, world.db, client, local_id=row["local_id"], replay=True)
            assert located.status == "PROCESSING"
            assert len([r for r in world.sb.recharges.values() if r.mobile_number == number]) == 1


# ---- minutes at a time, everything at once ---------------------------------------------------------------
@pytest.mark.slow
def test_two_hours_of_rotating_faults_with_traffic_lose_nothing(tmp_path, frozen):
    """Every fault in turn for 10 minutes (the others quiet), orders and recharges arriving all along,
    all the worker's jobs on their own intervals: afterwards the store equals the provider, every voucher
    is stored, and the sandbox never had to refuse a request for the budget."""
    rotation = [("http_500", {}), ("rate_limit", {"seconds": 90}), ("malformed_json", {}),
                ("missing_fields", {"rate": 0.3}), ("money_precision", {"rate": 0.3}),
                ("http_500", {"rate": 0.5}), ("slow", {"seconds": 2, "rate": 0.1})]
    with World(tmp_path, frozen, hourly_budget=600, timeout_s=1.0) as world:
        jobs_ = ("poll-recharges", "fetch-vouchers", "catch-up-orders", "sync-recent")
        orders = []
        for name, spec in rotation:
            orders += delivered_orders(world, count=2, quantity=2, start=len(orders))
            processing_recharges(world, digits=[5, 6])
            with world.fault(name, **spec):
                world.drive(*jobs_, seconds=10 * 60, every=5)
            world.drive(*jobs_, seconds=3 * 60, every=5)           # quiet: a 429's Retry-After runs out
        world.drive(*jobs_, seconds=2 * 3600, every=30)
        world.advance(24 * 3600)                                  # tomorrow: yesterday's day is synced whole
        world.drive("sync-recent", seconds=60)
        _assert_store_matches_provider(world)
        for order_id in orders:
            assert codes_stored(world, order_id) == world.provider_codes(order_id)
        assert world.sb.rate_limited == 0
        assert [quarantine.held(world.db, kind) for kind in ("recharge", "order", "transaction")] == [[], [], []]
