"""A long sync never takes the last of the hour: the voucher fetches keep their reserve
(partnerkit.store.budget.background_reserve) and the recharge poller its slice (poller_reserve),
while the poller takes at most its share for itself; against the real sandbox and the worker's own
job runner."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from freezegun import freeze_time

from partnerkit.errors import BudgetExhausted
from partnerkit.store.budget import background_reserve, poller_cap, poller_reserve, walk_reserve
from tests.reliability.provider_orders import processing_recharges
from tests.reliability.provider_world import RECHARGE_LIST, RECHARGE_ONE, START, World, local_recharges

HOURLY = 40
SHARE = Decimal("0.5")  # the default PARTNERKIT_POLLER_BUDGET_SHARE, which World leaves as it is
WALKS_LEAVE = walk_reserve(HOURLY, SHARE)  # the vouchers' tenth and the poller's


def _spend_until(world: World, used: int) -> None:
    filler = world.client("filler")
    for _ in range(HOURLY):  # bounded
        if world.budget_used() >= used:
            return
        filler.list_wallets()


def test_a_sync_stopped_by_the_budget_leaves_the_voucher_fetches_their_reserve(tmp_path):
    assert (background_reserve(HOURLY), poller_reserve(HOURLY, SHARE), WALKS_LEAVE) == (4, 4, 8)
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[0, 4])  # so the sync has recharges, transactions and orders to read
        _spend_until(world, HOURLY - WALKS_LEAVE - 2)  # two requests above what the walks leave

        record = world.run("sync-recent")  # it needs four or more (recharges, orders, transactions, wallets)

        assert record["outcome"] == "budget_exhausted"
        assert world.budget_used() == HOURLY - WALKS_LEAVE  # it took the two, never the reserves
        fetches = world.client("voucher_fetch")
        for _ in range(WALKS_LEAVE):
            fetches.list_wallets()  # what a voucher fetch would spend: there for it (it keeps no reserve)
        assert world.budget_used() == HOURLY
        with pytest.raises(BudgetExhausted):
            fetches.list_wallets()  # and the hour is then really spent
        assert world.sb.rate_limited == 0


def test_after_the_syncs_have_spent_all_they_may_the_poller_still_reads_processing_recharges(tmp_path):
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        ids = processing_recharges(world, digits=[5, 6, 7])  # PROCESSING; the sandbox settles them after 20 s
        _spend_until(world, HOURLY - WALKS_LEAVE - 2)
        assert world.run("sync-recent")["outcome"] == "budget_exhausted"
        assert world.budget_used() == HOURLY - WALKS_LEAVE  # the syncs have spent all they may
        assert {r["status"] for r in local_recharges(world).values()} == {"PROCESSING"}

        world.advance(25)  # settled at the provider; due on the poller's schedule
        record = world.run("poll-recharges")

        assert record["outcome"] == "ok" and not record["result"]["budget_exhausted"], record
        assert record["result"]["settled"] == len(ids)
        assert sorted(r["status"] for r in local_recharges(world).values()) == ["FAILED", "REVERSED", "SUCCESS"]
        usage = world.client().budget.usage()["general"]
        assert usage["by_purpose"]["poller"] == record["result"]["calls"] >= 1
        assert usage["remaining"] >= background_reserve(HOURLY)  # the voucher fetches' tenth is untouched
        assert world.sb.rate_limited == 0


@pytest.mark.parametrize("others", [0, 12], ids=["budget otherwise free", "others spent 12"])
def test_the_poller_never_takes_more_than_its_share_of_an_hour(tmp_path, others):
    cap = poller_cap(HOURLY, SHARE)
    assert cap == 20
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[8])  # never settles: the poller wants a read every 5 s to 5 min
        _spend_until(world, 1 + others)
        reads: list[tuple] = []  # (when, provider reads the pass made)
        own_in_window = []
        for _ in range(int(75 * 60 / 15)):  # 75 minutes, a pass every 15 s (bounded)
            world.advance(15)
            before = world.calls(RECHARGE_LIST) + world.calls(RECHARGE_ONE)
            record = world.run("poll-recharges")
            assert record["outcome"] == "ok", record
            reads.append((world.now(), world.calls(RECHARGE_LIST) + world.calls(RECHARGE_ONE) - before))
            own_in_window.append(world.client().budget.usage()["general"]["by_purpose"].get("poller", 0))

        assert max(own_in_window) == cap  # it wanted more and took all of its share, whatever others spent
        for at, _ in reads:  # the provider's count: in no hour more than its share
            assert sum(n for t, n in reads if at - timedelta(hours=1) < t <= at) <= cap
        first_hour = sum(n for t, n in reads if t < START + timedelta(hours=1))
        assert first_hour == cap
        assert sum(n for t, n in reads if t > START + timedelta(hours=1)) >= 1  # its cap slides with the hour
        assert world.budget_used() <= HOURLY - background_reserve(HOURLY)  # the vouchers' tenth is left
        assert world.sb.rate_limited == 0


def test_the_sync_completes_once_the_hour_has_room_again(tmp_path):
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[0, 4])
        _spend_until(world, HOURLY - WALKS_LEAVE)
        assert world.run("sync-recent")["outcome"] == "budget_exhausted"  # nothing above the reserve
        world.advance(3600)  # the sliding hour has moved past every request
        assert world.run("sync-recent")["outcome"] == "ok"


def _recharge_lists(world: World) -> int:
    return world.calls("GET /api/v1/recharges")


def test_a_sync_stopped_by_the_budget_reads_on_from_its_page_at_the_next_run(tmp_path, monkeypatch):
    from partnerkit.store import ledger as ledger_store
    from reconcile import sync
    from tests.reliability.provider_world import local_recharges, local_transactions

    monkeypatch.setattr(sync, "RECHARGE_PAGE", 2)  # five recharges: three pages
    monkeypatch.setattr(sync, "TRANSACTION_PAGE", 2)
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[0, 4, 0, 4, 0])
        first_run_at = world.now()
        _spend_until(world, HOURLY - WALKS_LEAVE - 2)  # room for two pages

        before = _recharge_lists(world)
        assert world.run("sync-recent")["outcome"] == "budget_exhausted"
        assert _recharge_lists(world) - before == 2  # pages 1 and 2, then the budget stopped it
        day = world.now().date().isoformat()
        position = ledger_store.walk_position(world.db, "recharges", day, day)
        assert position is not None and position[0] == 3
        assert len(local_recharges(world)) == 5  # submitted by the kit: all known before the sync

        world.advance(3600)  # the hour has room again
        before = _recharge_lists(world)
        assert world.run("sync-recent")["outcome"] == "ok"
        assert _recharge_lists(world) - before == 1  # page 3 only: read on, not from page 1
        assert ledger_store.walk_position(world.db, "recharges", day, day) is None
        # The coverage the finished walk claims counts from when its first part began.
        assert ledger_store.coverage(world.db, "recharges", day) == first_run_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert local_transactions(world) == world.provider_transactions()
        assert world.sb.rate_limited == 0


def test_a_stopped_walk_too_old_to_read_on_from_starts_over(tmp_path, monkeypatch):
    from partnerkit.store import ledger as ledger_store
    from reconcile import sync

    monkeypatch.setattr(sync, "RECHARGE_PAGE", 2)
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[0, 4, 0, 4, 0])
        day = world.now().date().isoformat()
        ledger_store.keep_walk_position(world.db, "recharges", day, day, next_page=3, reason="test",
                                        started_at="2025-03-10T03:00:00Z", stopped_at="2025-03-10T03:05:00Z")
        before = _recharge_lists(world)
        assert world.run("sync-recent")["outcome"] == "ok"  # 10:00: begun seven hours ago, past RESUME_WITHIN
        assert _recharge_lists(world) - before == 3  # from page 1
        assert ledger_store.walk_position(world.db, "recharges", day, day) is None
