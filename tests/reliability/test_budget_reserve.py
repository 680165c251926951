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
