"""A long sync never takes the last of the hour: the voucher fetches keep their reserve
(partnerkit.store.budget.background_reserve), against the real sandbox and the worker's own job runner."""

from __future__ import annotations

import pytest
from freezegun import freeze_time

from partnerkit.errors import BudgetExhausted
from partnerkit.store.budget import background_reserve
from tests.reliability.provider_orders import processing_recharges
from tests.reliability.provider_world import START, World

HOURLY = 40


def _spend_until(world: World, used: int) -> None:
    filler = world.client("filler")
    for _ in range(HOURLY):  # bounded
        if world.budget_used() >= used:
            return
        filler.list_wallets()


def test_a_sync_stopped_by_the_budget_leaves_the_voucher_fetches_their_reserve(tmp_path):
    reserve = background_reserve(HOURLY)
    assert reserve == 4
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[0, 4])  # so the sync has recharges, transactions and orders to read
        _spend_until(world, HOURLY - reserve - 2)  # two requests above the reserve are left

        record = world.run("sync-recent")  # it needs four or more (recharges, orders, transactions, wallets)

        assert record["outcome"] == "budget_exhausted"
        assert world.budget_used() == HOURLY - reserve  # it took the two, never the reserve
        fetches = world.client("voucher_fetch")
        for _ in range(reserve):
            fetches.list_wallets()  # what a voucher fetch would spend: there for it
        assert world.budget_used() == HOURLY
        with pytest.raises(BudgetExhausted):
            fetches.list_wallets()  # and the hour is then really spent
        assert world.sb.rate_limited == 0


def test_the_sync_completes_once_the_hour_has_room_again(tmp_path):
    with freeze_time(START) as frozen, World(tmp_path, frozen, hourly_budget=HOURLY) as world:
        processing_recharges(world, digits=[0, 4])
        _spend_until(world, HOURLY - background_reserve(HOURLY))
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
        _spend_until(world, HOURLY - background_reserve(HOURLY) - 2)  # room for two pages

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
