"""Another process using the API key: two hosts on copies of one database went unnoticed (session 14,
finding 8). The sign is the provider's X-RateLimit-Remaining persistently lower than this database's own
count of requests leaves; `partnerkit status` names it (`requests_elsewhere_this_hour`, attention line)."""

from __future__ import annotations

import pytest
from freezegun import freeze_time

from partnerkit.client import PartnerClient
from partnerkit.config import load_config
from partnerkit.status import collect
from partnerkit.store import open_db
from partnerkit.store.budget import (GENERAL, OTHERS_ANSWERS, OTHERS_SPAN_S, Budget, Limit, ORDER_CREATE,
                                     others_tolerance, signs_after)
from tests.reliability.provider_world import START, World

LINE = "another process uses this API key: the provider counted "


@pytest.mark.parametrize("limit, tolerance", [(1000, 20), (5000, 100), (100, 10), (1, 10)])
def test_the_providers_own_drift_is_tolerated(limit, tolerance):
    assert others_tolerance(limit) == tolerance


def _answers(gaps: list[int], *, every: float = 60.0, tolerance: int = 20) -> dict:
    signs: dict = {}
    for n, gap in enumerate(gaps):
        signs = signs_after(signs, gap=gap, tolerance=tolerance, now=n * every, remaining=500, expected=500 + gap) \
            or signs
    return signs


def test_a_sign_is_confirmed_by_five_answers_in_a_row_over_five_minutes():
    assert OTHERS_ANSWERS == 5 and OTHERS_SPAN_S == 300
    assert "confirmed_at" not in _answers([30] * 5)                  # 4 minutes: not yet
    assert "confirmed_at" not in _answers([30] * 20, every=10)       # 20 answers, but 190 s
    confirmed = _answers([30] * 6)
    assert (confirmed["confirmed_at"], confirmed["confirmed_since"], confirmed["confirmed_gap"]) == (300, 0, 30)
    assert "confirmed_at" not in _answers([30, 30, 30, 5, 30, 30, 30])  # one answer within the drift: again
    assert signs_after({}, gap=20, tolerance=20, now=0, remaining=1, expected=21) is None   # nothing to write
    # An answer within the drift ends the streak, and keeps the last confirmation for `others` to show.
    ended = _answers([30] * 6 + [3])
    assert ended["since"] is None and ended["confirmed_at"] == 300


def _budget(db, clock, **limits):
    return Budget(db, "the-api-key", limits={GENERAL: Limit(limits.get("hourly", 1000), 3600.0),
                                             ORDER_CREATE: Limit(100, 60.0)}, clock=lambda: clock[0])


def _call(budget, clock, *, remaining_elsewhere: int, provider_limit: int = 1000, used_before: list[int]) -> None:
    """One request of ours, answered by a provider that also counted `remaining_elsewhere` others."""
    ticket = budget.acquire(GENERAL, purpose="test")
    used_before[0] += 1
    budget.observe(ticket, limit=provider_limit, remaining=provider_limit - used_before[0] - remaining_elsewhere)
    clock[0] += 61


def test_the_budget_shows_requests_it_never_made_and_forgets_them_an_hour_after_the_last_sign(db):
    clock, used = [1_800_000_000.0], [0]
    budget = _budget(db, clock)
    for _ in range(6):
        _call(budget, clock, remaining_elsewhere=15, used_before=used)  # within the drift: no sign
    assert budget.others() is None
    for _ in range(5):
        _call(budget, clock, remaining_elsewhere=40, used_before=used)
    assert budget.others() is None                                      # 4 minutes of signs so far
    _call(budget, clock, remaining_elsewhere=45, used_before=used)
    seen = budget.others()
    assert seen["gap"] == 45 and seen["expected"] - seen["remaining"] == 45
    assert [row["requests_elsewhere"] for row in budget.describe()] == [45, None]
    clock[0] += 3600 - 61
    assert budget.others()["gap"] == 45
    clock[0] += 2
    assert budget.others() is None


def test_a_budget_set_below_the_keys_limit_leaves_the_difference_to_others(db):
    """PARTNERKIT_HOURLY_BUDGET=500 on a key of 1000 shares it on purpose: only beyond the 500 left is a sign."""
    clock, used = [1_800_000_000.0], [0]
    budget = _budget(db, clock, hourly=500)
    for _ in range(7):
        _call(budget, clock, remaining_elsewhere=480, used_before=used)
    assert budget.others() is None
    for _ in range(7):
        _call(budget, clock, remaining_elsewhere=560, used_before=used)
    assert budget.others()["gap"] == 60


@pytest.fixture
def frozen():
    with freeze_time(START) as clock:
        yield clock


def test_two_hosts_on_copies_of_one_database_are_named_by_status(tmp_path, frozen):
    """Host A's worker and host B's (a copy of A's database, after a move gone wrong) call the provider with
    the same key; each database counts only its own requests, the provider counts both."""
    with World(tmp_path, frozen) as world:
        host_b = load_config(environ={**{f"PARTNERKIT_{k}": v for k, v in {
            "DB": str(tmp_path / "host-b.db"), "API_BASE_URL": world.server.base_url, "API_KEY": world.key,
            "API_SECRET": world.server.clients[0].secret}.items()}})
        db_b = open_db(host_b.db_path)
        try:
            with world.client("worker") as a, PartnerClient(host_b, db_b, purpose="worker", wait_for_budget=False,
                                                            retry=world.retry, sleep=world.sleep) as b:
                for _ in range(4):                       # host A alone: its count is the provider's
                    a.list_wallets()
                    world.advance(30)
                assert collect(world.config, world.db)["requests_elsewhere_this_hour"] is None
                for _ in range(20):                      # host B starts: 5 calls per A call, for 10 minutes
                    for _ in range(5):
                        b.list_wallets()
                    a.list_wallets()
                    world.advance(30)
            status = collect(world.config, world.db)
            elsewhere = status["requests_elsewhere_this_hour"]
            assert elsewhere is not None and 5 * 20 - 5 <= elsewhere <= 5 * 20 + 1   # B's calls (and its account check)
            [line] = [line for line in status["attention"] if line.startswith(LINE)]
            assert f"counted {elsewhere} requests in the last hour beyond this database's own" in line
            assert "see README 'Move to a new host'" in line
        finally:
            db_b.conn.close()
