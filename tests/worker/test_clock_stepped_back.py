"""This host's clock ran a day ahead and NTP stepped it back: what the worker scheduled meanwhile was dated a
day ahead too (a voucher fetch's next try, a parked fetch's re-arm moment, a recharge's last read and
submit time, the poller's back-off). None of it may wait for that wrong moment: each is done within the
longest delay the kit itself schedules for its kind of work (`FetchPolicy.latest_s`,
`PollSchedule.latest_s`, the poller's BACKOFF_LATEST_S).

The real sandbox on loopback and the worker's own jobs (tests/reliability/provider_world.py); only the
kit's clock jumps (freezegun), the provider's runs on, as it would."""

from __future__ import annotations

from datetime import timedelta

import pytest
from freezegun import freeze_time

from partnerkit.store import jobs, meta, orders
from partnerkit.store import recharges as recharge_store
from partnerkit.store.budget import REFUSAL_PAUSE_S
from partnerkit.store.db import transaction
from partnerkit.timeutil import CLOCK_STEP_MARGIN_S, parse_ts
from partnerkit.vouchers import FetchPolicy
from reconcile.poller import BACKOFF_CAP_S, BACKOFF_FIRST_S, BACKOFF_KEY, BACKOFF_LATEST_S
from reconcile.polling import DEFAULT_SCHEDULE
from tests.reliability.provider_orders import codes_stored, processing_recharges
from tests.reliability.provider_world import ORDER_DETAIL, RECHARGE_ONE, START, World

AHEAD = timedelta(days=1)


@pytest.fixture
def world(tmp_path):
    with freeze_time(START) as frozen, World(tmp_path, frozen) as running:
        yield running


def _put_right(world: World) -> None:
    """NTP steps this host's clock back by AHEAD; the provider's clock is not touched."""
    world.frozen.move_to(world.now() - AHEAD)


def _ordered(world: World, ref: str) -> int:
    """An order the sandbox holds PENDING (a "stuck-" ref) with a fetch queued as a DELIVERED event would."""
    created = world.client("setup", timeout=10).create_order(product_id=1, denomination=100, quantity=2, ref=ref)
    with transaction(world.db) as conn:
        orders.apply(conn, created.id, "DELIVERED", now=world.now(), source="webhook")
        jobs.queue(conn, created.id, now=world.now(), expected_status="DELIVERED", expected_count=2)
    return created.id


def test_a_fetch_retried_under_a_clock_a_day_ahead_is_read_once_the_clock_is_put_right(world):
    world.frozen.move_to(START + AHEAD)
    order = _ordered(world, "stuck-clock-1")
    [ran] = world.drive("fetch-vouchers", seconds=1)
    assert ran["result"]["retried"] == 1, ran  # the detail shows PENDING: due again 10 s on, a day ahead
    [row] = jobs.latest_for_orders(world.db, [order]).values()
    assert parse_ts(row["next_run_at"]) > START + AHEAD

    _put_right(world)
    world.control("POST", f"/orders/{order}/state", {"status": "DELIVERED"})
    details = world.calls(ORDER_DETAIL)
    world.drive("fetch-vouchers", seconds=FetchPolicy().latest_s)
    assert codes_stored(world, order) == world.provider_codes(order)
    assert world.calls(ORDER_DETAIL) - details == 1, "read at its first run, not at the wrong moment"
    assert jobs.latest_for_orders(world.db, [order])[order]["state"] == "done"


def test_a_fetch_parked_under_a_clock_a_day_ahead_is_rearmed_by_the_next_answer(world):
    world.frozen.move_to(START + AHEAD)
    order = _ordered(world, "stuck-clock-2")
    [job] = jobs.claim(world.db, owner="t", now=world.now(), lease_until=world.now(), limit=5)
    with transaction(world.db) as conn:  # parked by the provider's failure: its next answer may re-arm it
        jobs.finish(conn, job, now=world.now(), state="dead", error="gave up after 8 attempts: HTTP 500",
                    rearm_at=world.now())
    _put_right(world)
    world.control("POST", f"/orders/{order}/state", {"status": "DELIVERED"})
    # The order sync's first page is the provider answering: the parked fetch is re-armed, then read.
    world.drive("catch-up-orders", "fetch-vouchers", seconds=60)
    assert codes_stored(world, order) == world.provider_codes(order)
    assert jobs.counters(world.db, "voucher_fetch.rearmed") == {"voucher_fetch.rearmed": 1}


def test_a_fetch_parked_for_its_orders_trouble_under_a_clock_a_day_ahead_is_read_within_the_hour(world):
    world.frozen.move_to(START + AHEAD)
    order = _ordered(world, "stuck-clock-3")
    [job] = jobs.claim(world.db, owner="t", now=world.now(), lease_until=world.now(), limit=5)
    with transaction(world.db) as conn:  # the order's own trouble: only the hourly revival reads it again
        jobs.finish(conn, job, now=world.now(), state="dead", error="gave up after 3 attempts: HTTP 404",
                    rearm_at=world.now() + timedelta(seconds=FetchPolicy().revive_after_s))
    _put_right(world)
    world.control("POST", f"/orders/{order}/state", {"status": "DELIVERED"})
    world.drive("catch-up-orders", "fetch-vouchers", seconds=FetchPolicy().latest_s, every=60)
    assert codes_stored(world, order) == world.provider_codes(order)


def test_a_recharge_read_under_a_clock_a_day_ahead_is_read_again_once_the_clock_is_put_right(world):
    world.frozen.move_to(START + AHEAD)
    [local_id] = processing_recharges(world, digits=[5])  # PROCESSING, SUCCESS 20 s on at the provider
    world.drive("poll-recharges", seconds=10)
    row = recharge_store.get(world.db, local_id)
    assert row["status"] == "PROCESSING" and parse_ts(row["last_polled_at"]) > START + AHEAD

    _put_right(world)
    world.advance(30)  # the provider settles it
    reads = world.calls(RECHARGE_ONE)
    world.drive("poll-recharges", seconds=DEFAULT_SCHEDULE.latest_s)
    row = recharge_store.get(world.db, local_id)
    assert row["status"] == "SUCCESS", row
    assert world.calls(RECHARGE_ONE) - reads == 1, "read at the first pass, then settled"
    assert parse_ts(row["last_polled_at"]) < START + timedelta(hours=1), "the read is dated by the clock put right"
    assert row["escalated_at"] is None


def test_a_recharge_left_processing_is_escalated_by_the_providers_age_once_the_clock_is_put_right(world):
    world.frozen.move_to(START + AHEAD)
    [local_id] = processing_recharges(world, digits=[8])  # PROCESSING for ever at the provider
    world.drive("poll-recharges", seconds=10)
    _put_right(world)
    # Its submit time is a day ahead of this clock, its creation at the provider is not: it is aged by the latter.
    world.drive("poll-recharges", seconds=DEFAULT_SCHEDULE.escalate_after_s + DEFAULT_SCHEDULE.latest_s, every=60)
    row = recharge_store.get(world.db, local_id)
    assert row["escalated_at"] is not None, row


def test_the_pollers_back_off_dated_a_day_ahead_holds_no_pass_once_the_clock_is_put_right(world):
    world.frozen.move_to(START + AHEAD)
    [local_id] = processing_recharges(world, digits=[5])
    world.advance(DEFAULT_SCHEDULE.interval(0))  # due for its first read
    with world.fault("http_500", scope="recharges"):
        [failed] = world.drive("poll-recharges", seconds=1)
    assert failed["outcome"] == "error", failed
    assert meta.get(world.db, BACKOFF_KEY).startswith("1|")  # no pass before a moment a day ahead

    _put_right(world)
    world.advance(30)
    world.drive("poll-recharges", seconds=BACKOFF_CAP_S + DEFAULT_SCHEDULE.latest_s)
    assert recharge_store.get(world.db, local_id)["status"] == "SUCCESS"


@pytest.mark.parametrize("retry_after", [None, 30.0, 120.0, 86400.0])
def test_no_delay_the_kit_schedules_reaches_the_bound_past_which_a_due_time_is_taken_for_wrong(retry_after):
    """Each bound is the longest delay of its kind plus the margin: a due time the kit set with this clock is never
    taken for one a clock since put back set (a 5xx's Retry-After of a day is held to the budget's hour)."""
    policy = FetchPolicy()
    longest = policy.latest_s - CLOCK_STEP_MARGIN_S
    assert max(policy.delay(attempt, retry_after) for attempt in range(1, 40)) <= longest
    assert max(policy.rearm_delay(first=f, providers=p) for f in (True, False) for p in (True, False)) <= longest
    assert REFUSAL_PAUSE_S <= longest and policy.wait_cap_s <= longest
    assert max(DEFAULT_SCHEDULE.interval(age) for age in range(0, 7200, 5)) <= DEFAULT_SCHEDULE.latest_s - CLOCK_STEP_MARGIN_S
    assert min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** 30) < BACKOFF_LATEST_S
