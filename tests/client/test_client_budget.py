"""The persistent request budget (Limits): shared across processes, tightened by the provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from freezegun import freeze_time
from werkzeug import Response

from partnerkit.client import PartnerClient
from partnerkit.errors import BudgetExhausted
from partnerkit.store import open_db
from tests.conftest import account_of
from partnerkit.store.budget import (GENERAL, ORDER_CREATE, Budget, Limit, ProviderView, key_hash, poller_cap,
                                     poller_reserve, wait_needed)


SMALL = {GENERAL: Limit(5, 3600.0), ORDER_CREATE: Limit(2, 60.0)}


@pytest.fixture
def budget(db):
    return Budget(db, "the-api-key", limits=SMALL)


class VirtualTime:
    """The budget's injectable clock and sleep: a sleep is recorded and moves the clock instead of waiting."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_wait_needed_is_a_pure_sliding_window():
    limit = Limit(3, 60.0)
    assert wait_needed(now=100.0, limit=limit, sent=[50.0, 60.0], provider=ProviderView()) == 0.0
    assert wait_needed(now=100.0, limit=limit, sent=[50.0, 60.0, 70.0], provider=ProviderView()) == 10.0
    assert wait_needed(now=100.0, limit=limit, sent=[50.0, 60.0], provider=ProviderView(), keep_free=1) == 10.0
    assert wait_needed(now=100.0, limit=limit, sent=[], provider=ProviderView(blocked_until=104.0)) == 4.0
    assert wait_needed(now=100.0, limit=limit, sent=[], provider=ProviderView(remaining=0, until=130.0)) == 30.0


@pytest.mark.parametrize("own_sent, own_cap, expected", [
    ([60.0, 70.0], None, 0.0),    # no cap: only the shared window counts
    ([60.0, 70.0], 3, 0.0),       # under its cap
    ([60.0, 70.0], 2, 20.0),      # at its cap: until its oldest own send (60) leaves the window
    ([60.0, 70.0], 1, 30.0),      # over its cap (lowered meanwhile): until it holds fewer than one
    ([], 0, 60.0),                # a cap of 0 never sends: a whole window
])
def test_wait_needed_counts_the_purpose_against_its_own_cap(own_sent, own_cap, expected):
    limit = Limit(10, 60.0)  # the shared window has plenty of room
    sent = sorted([50.0, *own_sent])
    assert wait_needed(now=100.0, limit=limit, sent=sent, provider=ProviderView(), own_sent=own_sent,
                       own_cap=own_cap) == expected


def test_wait_needed_takes_the_longer_of_the_own_cap_and_the_shared_window():
    limit = Limit(3, 60.0)
    sent = [50.0, 60.0, 70.0]  # the shared window is full until 50 leaves (10 s)
    assert wait_needed(now=100.0, limit=limit, sent=sent, provider=ProviderView(), own_sent=[70.0], own_cap=1) == 30.0
    assert wait_needed(now=100.0, limit=limit, sent=sent, provider=ProviderView(), own_sent=[50.0], own_cap=1) == 10.0


@pytest.mark.parametrize("hourly, share, cap, reserve", [
    (1000, "0.5", 500, 100),   # the defaults: half for itself, a tenth the walks leave it
    (1000, "0.05", 50, 50),    # a share under a tenth: the walks leave it its whole share, no more
    (1000, "1", 1000, 100),
    (40, "0.5", 20, 4),
    (7, "0.5", 3, 0),          # rounded down, as the vouchers' tenth is
    (1, "0.5", 0, 0),
])
def test_poller_cap_and_reserve(hourly, share, cap, reserve):
    assert poller_cap(hourly, Decimal(share)) == cap
    assert poller_reserve(hourly, Decimal(share)) == reserve


@freeze_time("2024-05-01 10:00:00")
def test_exhausted_without_waiting_then_room_after_the_window(budget):
    for _ in range(5):
        budget.acquire(purpose="sync", wait=False)
    with pytest.raises(BudgetExhausted) as info:
        budget.acquire(purpose="sync", wait=False)
    assert info.value.retry_after == 3600.0 and info.value.budget_class == GENERAL
    with freeze_time("2024-05-01 11:00:01"):
        assert budget.acquire(wait=False).budget_class == GENERAL


def test_requests_and_a_block_dated_by_a_clock_a_day_ahead_hold_the_hour_no_longer_than_an_hour(db):
    """The hour's requests were logged, and a 429's block dated, while this host's clock ran a day ahead; NTP put it
    back. Before, they counted until their dates had passed: a day without a single call (`budget unblock` lifted
    nothing, the block being in the past as far as it could tell). They count as sent at the step now: the class
    waits at most the window, as a 429 makes it."""
    clock = VirtualTime(start=1_000_000.0 + 86_400)
    budget = Budget(db, "k", limits=SMALL, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        budget.acquire(purpose="sync", wait=False)
    budget.block(GENERAL, 3600.0)
    clock.now -= 86_400  # stepped back a day
    with pytest.raises(BudgetExhausted) as info:
        budget.acquire(purpose="sync", wait=False)
    assert 3540.0 < info.value.retry_after <= 3600.0, info.value.retry_after
    clock.now += 3600.0 + 1
    assert budget.acquire(purpose="sync", wait=False).budget_class == GENERAL


def test_an_order_creation_spends_its_own_class_and_one_of_the_hour(budget):
    """Limits, row 1: the hour is "shared by all /api/v1 endpoints" (Value), or by those "without a dedicated
    allowance" (Applies to). The safe reading counts an order creation in both classes."""
    budget.acquire(purpose="poller", wait=False)
    budget.acquire(purpose="voucher_fetch", wait=False)
    budget.acquire(purpose="voucher_fetch", wait=False)
    budget.acquire(ORDER_CREATE, purpose="cli", wait=False)
    usage = budget.usage()
    assert usage[GENERAL]["used"] == 4 and usage[GENERAL]["remaining"] == 1 and usage[GENERAL]["limit"] == 5
    assert usage[GENERAL]["by_purpose"] == {"cli": 1, "poller": 1, "voucher_fetch": 2}
    assert usage[ORDER_CREATE] | {"by_purpose": None} == {"limit": 2, "window_s": 60.0, "used": 1, "remaining": 1,
                                                            "blocked_until": None, "by_purpose": None}
    # A read spends the hour only: the order class keeps its minute.
    budget.acquire(purpose="poller", wait=False)
    assert budget.usage()[ORDER_CREATE]["used"] == 1


def test_an_order_creation_waits_for_the_hour_as_well(budget):
    for _ in range(5):
        budget.acquire(purpose="sync", wait=False)  # the hour is spent; the minute's order allowance is not
    with pytest.raises(BudgetExhausted, match=r"'order_create' has no room for 'cli'; retry in 60 min \(it also "
                                              r"spends one of 'general', which has no room\)") as info:
        budget.acquire(ORDER_CREATE, purpose="cli", wait=False)
    assert info.value.budget_class == ORDER_CREATE
    usage = budget.usage()
    assert usage[ORDER_CREATE]["used"] == 0 and usage[GENERAL]["used"] == 5, "a refused request takes nothing"


def test_keep_free_reserve_leaves_room_for_others(budget):
    for _ in range(3):
        budget.acquire(purpose="poller", wait=False, keep_free=2)
    with pytest.raises(BudgetExhausted):
        budget.acquire(purpose="poller", wait=False, keep_free=2)  # 2 remain: not more than keep_free
    budget.acquire(purpose="voucher_fetch", wait=False)
    budget.acquire(purpose="voucher_fetch", wait=False)
    with pytest.raises(BudgetExhausted):
        budget.acquire(purpose="voucher_fetch", wait=False)


def test_own_cap_refuses_the_purpose_until_its_oldest_request_leaves_the_hour(db):
    clock = [1000.0]
    budget = Budget(db, "k", limits={GENERAL: Limit(10, 3600.0), ORDER_CREATE: Limit(2, 60.0)}, clock=lambda: clock[0])
    budget.acquire(purpose="poller", wait=False, own_cap=2)
    clock[0] = 1010.0
    budget.acquire(purpose="voucher_fetch", wait=False)
    clock[0] = 1020.0
    budget.acquire(purpose="poller", wait=False, own_cap=2)
    clock[0] = 1030.0
    with pytest.raises(BudgetExhausted, match=r"no room for 'poller'; retry in 60 min \('poller' has taken its own"
                                              r" cap of 2 requests per hour\)") as info:
        budget.acquire(purpose="poller", wait=False, own_cap=2)
    assert info.value.retry_after == 1000.0 + 3600 - 1030.0  # its oldest own request leaves the window
    # The cap is the poller's alone: the others still have the hour's room, an order creation included.
    budget.acquire(purpose="voucher_fetch", wait=False)
    budget.acquire(purpose="sync", wait=False, own_cap=2)
    budget.acquire(ORDER_CREATE, purpose="cli", wait=False, own_cap=2)
    assert budget.usage()[GENERAL]["by_purpose"] == {"cli": 1, "poller": 2, "sync": 1, "voucher_fetch": 2}
    clock[0] = 4600.5  # the first poller request has left the sliding hour
    budget.acquire(purpose="poller", wait=False, own_cap=2)
    with pytest.raises(BudgetExhausted, match="own cap of 2"):
        budget.acquire(purpose="poller", wait=False, own_cap=2)


def test_a_capped_caller_waits_for_its_own_oldest_request(db):
    clock = VirtualTime()
    budget = Budget(db, "k", limits={GENERAL: Limit(100, 10.0)}, clock=clock, sleep=clock.sleep)
    budget.acquire(purpose="poller", own_cap=1)
    clock.now += 4
    budget.acquire(purpose="poller", own_cap=1, max_wait=30)
    assert clock.slept == [6.0]
    with pytest.raises(BudgetExhausted, match="own cap of 1 requests per 10 s"):
        budget.acquire(purpose="poller", own_cap=1, max_wait=5)  # 10 s needed, more than max_wait


def test_own_cap_must_not_be_negative(budget):
    with pytest.raises(ValueError, match="own_cap must be 0 or more"):
        budget.acquire(purpose="poller", wait=False, own_cap=-1)


@pytest.mark.parametrize("round_", range(5))
def test_threads_racing_for_the_last_own_request_get_exactly_one(tmp_path, round_):
    # Each thread has its own connection, as separate processes would: only SQLite's BEGIN IMMEDIATE
    # stands between them. The shared window has plenty of room; only the poller's cap is at stake.
    path = tmp_path / "race.db"
    seed = Budget(open_db(path), "k", limits=SMALL | {GENERAL: Limit(100, 3600.0)})
    for _ in range(2):
        seed.acquire(purpose="poller", wait=False, own_cap=3)
    racers = [Budget(open_db(path), "k", limits=SMALL | {GENERAL: Limit(100, 3600.0)}) for _ in range(6)]
    start = threading.Barrier(len(racers))
    outcomes: list[str] = []

    def race(budget):
        start.wait()
        try:
            budget.acquire(purpose="poller", wait=False, own_cap=3)
            outcomes.append("taken")
        except BudgetExhausted:
            outcomes.append("refused")

    threads = [threading.Thread(target=race, args=(b,)) for b in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["refused"] * 5 + ["taken"]
    assert seed.usage()[GENERAL]["by_purpose"] == {"poller": 3}


def test_waiting_caller_sleeps_until_room(db):
    clock = VirtualTime()
    budget = Budget(db, "k", limits={GENERAL: Limit(1, 10.0)}, clock=clock, sleep=clock.sleep)
    budget.acquire(wait=True)
    budget.acquire(wait=True, max_wait=30)
    assert clock.slept == [10.0]
    with pytest.raises(BudgetExhausted):
        budget.acquire(wait=True, max_wait=5)  # the wait needed (10 s) is over max_wait: no sleeping
    assert clock.slept == [10.0]


def test_rows_are_keyed_by_a_hash_never_the_key(budget, db):
    budget.acquire(wait=False)
    budget.block(GENERAL, 1)
    rows = db.execute("SELECT key_hash FROM budget_events UNION SELECT key_hash FROM budget_state").fetchall()
    assert rows == [(key_hash("the-api-key"),)]
    assert "the-api-key" not in repr(budget)


def test_provider_remaining_tightens_the_budget(client, httpserver):
    remaining = iter(["2", "1", "0"])

    def handler(request):
        return Response("[]", content_type="application/json",
                        headers={"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": next(remaining), "X-RateLimit-Reset": "120"})

    httpserver.expect_request("/api/v1/wallets").respond_with_handler(handler)
    client.list_wallets()
    usage = client.budget.usage()[GENERAL]
    assert usage["used"] == 1 and usage["remaining"] == 2  # we thought 999; the provider says 2
    poller = client.with_budget("poller", wait=False)
    poller.list_wallets()
    poller.list_wallets()
    assert len(httpserver.log) == 3
    with pytest.raises(BudgetExhausted) as info:
        poller.list_wallets()
    assert 100 < info.value.retry_after <= 120 and len(httpserver.log) == 3


def test_requests_sent_after_the_observed_one_are_subtracted(budget):
    first = budget.acquire(wait=False)
    budget.acquire(wait=False)  # sent by another process before the first answer arrived
    budget.observe(first, remaining=2)
    assert budget.usage()[GENERAL]["remaining"] == 1


def test_provider_figure_never_loosens(client, httpserver, config, db):
    budget = Budget.from_config(config.__class__(**{**config.__dict__, "hourly_budget": 3}), db)
    ticket = budget.acquire(wait=False)
    budget.observe(ticket, limit=1000, remaining=999, reset=None)
    assert budget.usage()[GENERAL]["remaining"] == 2


def test_provider_lower_limit_is_believed(budget):
    ticket = budget.acquire(wait=False)
    budget.observe(ticket, limit=2, remaining=None)
    assert budget.usage()[GENERAL]["limit"] == 2 and budget.usage()[GENERAL]["remaining"] == 1


def test_keep_free_against_the_provider_figure(client, httpserver):
    httpserver.expect_request("/api/v1/wallets").respond_with_json([], headers={"X-RateLimit-Remaining": "3"})
    client.list_wallets()
    low = client.with_budget("poller", wait=False, keep_free=3)
    with pytest.raises(BudgetExhausted):
        low.list_wallets()
    client.list_wallets()  # a normal caller may still spend the reserve
    assert len(httpserver.log) == 2


def test_429_block_is_seen_by_another_process_budget(config, db):
    Budget.from_config(config, db).block(GENERAL, 20)
    other = Budget.from_config(config, open_db(config.db_path))
    with pytest.raises(BudgetExhausted) as info:
        other.acquire(wait=False)
    assert 19 < info.value.retry_after <= 20


def test_in_memory_budget_when_no_db_is_given(config):
    client = PartnerClient(config)
    assert client.budget.usage()[GENERAL]["limit"] == 1000 and not Path(config.db_path).exists()


def _two_workers(httpserver, tmp_path, *args: str) -> list[dict]:
    """Run budget_worker.py twice at once on one SQLite file (its arguments after the DB and URL); their counts."""
    httpserver.expect_request("/api/v1/wallets").respond_with_json([])
    db_path = tmp_path / "shared.db"
    db = open_db(db_path)  # migrate once up front (migrations are also safe concurrently)
    account_of(db, "shared-key")  # the account is known: the workers count only their own calls
    db.conn.close()
    worker = Path(__file__).with_name("budget_worker.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, str(worker), str(db_path), httpserver.url_for("/").rstrip("/"), *args]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def test_two_processes_share_one_budget(httpserver, tmp_path):
    results = _two_workers(httpserver, tmp_path, "40", "50")
    assert sum(r["ok"] for r in results) == 50
    assert sum(r["exhausted"] for r in results) == 30
    assert len(httpserver.log) == 50


def test_two_processes_share_one_own_cap(httpserver, tmp_path):
    # Both spend as the poller, capped at 15 of an hour of 50: together they get 15, not 15 each.
    results = _two_workers(httpserver, tmp_path, "20", "50", "15")
    assert sum(r["ok"] for r in results) == 15
    assert sum(r["exhausted"] for r in results) == 25
    assert len(httpserver.log) == 15


@pytest.mark.parametrize("headers", [
    {"X-RateLimit-Limit": "inf", "X-RateLimit-Remaining": "nan", "X-RateLimit-Reset": "inf"},
    {"X-RateLimit-Limit": "1e400", "X-RateLimit-Remaining": "-1e400"},
    {"X-RateLimit-Limit": "0"},
    {"X-RateLimit-Limit": "-5"},
    {"X-RateLimit-Limit": "many", "X-RateLimit-Remaining": "some"},
])
def test_garbled_rate_limit_headers_are_ignored_not_raised(client, httpserver, headers):
    # float() accepts "inf" and "nan"; int() of them used to raise out of the client.
    httpserver.expect_request("/api/v1/wallets").respond_with_json([], headers=headers)
    assert client.list_wallets() == []
    usage = client.budget.usage()[GENERAL]
    assert (usage["limit"], usage["remaining"]) == (1000, 999)



def test_a_spent_hour_is_refused_in_minutes_not_thousands_of_seconds(tmp_path):
    from partnerkit.errors import BudgetExhausted
    from partnerkit.store import open_db
    from partnerkit.store.budget import Budget, Limit

    clock = [1_000_000.0]
    budget = Budget(open_db(tmp_path / "b.db"), "key", limits={"general": Limit(1, 3600.0)}, clock=lambda: clock[0])
    budget.acquire(purpose="first", wait=False)
    with pytest.raises(BudgetExhausted, match=r"retry in 60 min"):
        budget.acquire(purpose="second", wait=False)
    clock[0] += 3600 - 30
    with pytest.raises(BudgetExhausted, match=r"retry in 30\.0s"):
        budget.acquire(purpose="second", wait=False)
