"""A 429 without Retry-After (Errors, "Other"; Limits): the block follows X-RateLimit-Reset.

Against the sandbox on loopback, its `rate_limit` fault leaving headers out; freezegun holds the
clock so that the waits are exact (the sandbox writes X-RateLimit-Reset from the same clock).
"""

from __future__ import annotations

import pytest
import requests
from freezegun import freeze_time

from partnerkit import errors
from partnerkit.client import PartnerClient
from partnerkit.config import Config
from partnerkit.store import open_db
from tests.conftest import account_of
from partnerkit.store.budget import DEFAULT_BLOCK_S, GENERAL, ORDER_CREATE, Budget, block_seconds, seconds_until_reset

from tests.client.client_payloads import FAST
from tests.sandbox_serving import serve_sandbox

NOW = 1_714_557_600.0  # 2024-05-01 10:00:00 UTC
HOUR = 3600.0


@pytest.mark.parametrize("reset, seconds", [
    (None, None),                     # absent: the caller falls back to its default
    (float("nan"), None),
    (float("inf"), None),
    (NOW + 5, 5.0),                   # a unix time (above 10^9): sooner than the 60 s default
    (NOW + 300, 300.0),               # ... and later
    (NOW - 30, 0.0),                  # already past: the window has reopened, never negative
    (7, 7.0),                         # seconds from now
    (0, 0.0),
    (-4, 0.0),
    (HOUR + 1, HOUR),                 # never longer than one window of the class
    (NOW * 1000, HOUR),               # a unix time in milliseconds
    (NOW + 86_400, HOUR),             # a clock a day off
])
def test_seconds_until_reset_follows_the_readme_unit_rule_within_one_window(reset, seconds):
    assert seconds_until_reset(reset, now=NOW, window_s=HOUR) == seconds


@pytest.fixture
def server():
    with serve_sandbox(background=False) as running:
        yield running


@pytest.fixture
def config(server, tmp_path, migrated_file):
    alpha = next(c for c in server.clients if c.name == "alpha")
    db = open_db(migrated_file(tmp_path / "pk.db"))
    account_of(db, alpha.key, ("1", "2"))  # a database in use: the faults below hit the calls under test alone
    db.conn.close()
    return Config(db_path=tmp_path / "pk.db", api_base_url=server.base_url, api_key=alpha.key,
                  api_secret=alpha.secret, http_timeout_s=5)


def _fault(server, **spec):
    url = f"{server.base_url}/sandbox/faults/rate_limit"
    r = requests.put(url, json=spec, timeout=5) if spec else requests.delete(url, timeout=5)
    assert r.status_code == 200, r.text


def _blocked_for(client) -> float | None:
    until = client.budget.usage()[GENERAL]["blocked_until"]
    return None if until is None else until - NOW


@freeze_time("2024-05-01 10:00:00")
@pytest.mark.parametrize("seconds", [5, 300])
def test_a_429_without_retry_after_blocks_until_x_ratelimit_reset(server, config, seconds):
    _fault(server, scope="wallet", seconds=seconds, omit=["Retry-After"])
    poller = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.RateLimited) as info:
        poller.list_wallets()
    assert info.value.retry_after == seconds  # not the 60 s default, sooner or later
    assert _blocked_for(poller) == seconds
    # The block is shared: another process on the same database sends nothing until the reset.
    other = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.BudgetExhausted) as blocked:
        other.get_recharge(1)
    assert blocked.value.retry_after == seconds
    assert server.sandbox.faults_injected["rate_limit"] == 1


def test_a_waiting_caller_sleeps_until_x_ratelimit_reset_then_sends(server, config):
    _fault(server, scope="wallet", seconds=5, omit=["Retry-After"])
    with freeze_time("2024-05-01 10:00:00") as frozen:
        slept = []

        def sleep(seconds):
            slept.append(seconds)
            frozen.tick(seconds)
            _fault(server)  # the window has reopened

        client = PartnerClient(config, open_db(config.db_path), retry=FAST, sleep=sleep)
        assert client.list_wallets()
    assert slept == [5.0]
    assert server.sandbox.calls["GET /api/v1/wallets"] == 2


@freeze_time("2024-05-01 10:00:00")
def test_a_reset_further_than_one_window_blocks_for_one_window(server, config):
    _fault(server, scope="wallet", seconds=30 * 86_400, omit=["Retry-After"])
    client = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.RateLimited) as info:
        client.list_wallets()
    assert info.value.retry_after == HOUR and _blocked_for(client) == HOUR


@freeze_time("2024-05-01 10:00:00")
def test_retry_after_still_wins_over_x_ratelimit_reset(server, config):
    _fault(server, scope="wallet", seconds=7)  # the sandbox sends both, equal; Retry-After is read
    client = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.RateLimited) as info:
        client.list_wallets()
    assert info.value.retry_after == 7.0 and _blocked_for(client) == 7.0


@pytest.mark.parametrize("omit, wait", [
    (["Retry-After", "X-RateLimit-Reset"], DEFAULT_BLOCK_S),   # neither usable: the default
    (["X-RateLimit-Reset"], 7.0),                              # Retry-After alone
])
def test_a_429s_remaining_0_does_not_outlast_its_block(server, config, omit, wait):
    # X-RateLimit-Remaining: 0 without a Reset is trusted for a whole window on a 2xx; on a 429
    # that held every process for an hour whatever the Retry-After said.
    _fault(server, scope="wallet", seconds=7, omit=omit)
    with freeze_time("2024-05-01 10:00:00") as frozen:
        client = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
        with pytest.raises(errors.RateLimited):
            client.list_wallets()
        assert _blocked_for(client) == wait
        _fault(server)
        frozen.tick(wait - 1)
        with pytest.raises(errors.BudgetExhausted) as info:
            client.list_wallets()
        assert info.value.retry_after == 1.0
        frozen.tick(1)
        assert client.list_wallets()
    assert server.sandbox.calls["GET /api/v1/wallets"] == 2


@freeze_time("2024-05-01 10:00:00")
def test_a_remaining_figure_is_trusted_at_most_one_window(tmp_path):
    # The same rule bounds X-RateLimit-Remaining's hold: a Reset in milliseconds once kept a
    # "0 remaining" for 54 000 years.
    budget = Budget(open_db(tmp_path / "b.db"), "k")
    budget.observe(budget.acquire(wait=False), remaining=0, reset=NOW * 1000)
    with pytest.raises(errors.BudgetExhausted) as info:
        budget.acquire(wait=False)
    assert info.value.retry_after == HOUR


# ---- F4: a Retry-After longer than the window it applies to -----------------------------------------------------
@pytest.mark.parametrize("retry_after, window, seconds", [
    (None, HOUR, DEFAULT_BLOCK_S),     # none given: the default
    (None, 60.0, 60.0),
    (7.0, HOUR, 7.0),
    (0.0, HOUR, 0.0),
    (-3.0, HOUR, 0.0),                 # never negative
    (86_400.0, HOUR, HOUR),            # a day: one window of the general budget (per hour)
    (86_400.0, 60.0, 60.0),            # ... one minute for order creation
    (float("inf"), HOUR, DEFAULT_BLOCK_S),
])
def test_a_429_blocks_at_most_one_window_of_its_class(retry_after, window, seconds):
    assert block_seconds(retry_after, window_s=window) == seconds


@freeze_time("2024-05-01 10:00:00")
def test_a_retry_after_of_a_day_blocks_the_general_budget_one_hour_not_a_day(server, config):
    _fault(server, scope="GET /api/v1/orders", seconds=86_400)
    client = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.RateLimited) as info:
        client.list_orders()
    assert info.value.retry_after == HOUR and _blocked_for(client) == HOUR
    _fault(server)
    other = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.BudgetExhausted, match=r"retry in 60 min"):
        other.get_recharge(1)   # every process waits for the block, an hour at most
    with freeze_time("2024-05-01 10:59:59"), pytest.raises(errors.BudgetExhausted):
        other.list_wallets()
    with freeze_time("2024-05-01 11:00:00"):
        other.list_wallets()    # the provider recovered long ago: an hour later the calls go again
    assert server.sandbox.calls["GET /api/v1/wallets"] == 1


@freeze_time("2024-05-01 10:00:00")
def test_a_429_on_order_creation_blocks_its_minute_and_never_the_reads(server, config):
    _fault(server, scope="POST /api/v1/orders", seconds=86_400)
    client = PartnerClient(config, open_db(config.db_path), wait_for_budget=False, retry=FAST)
    with pytest.raises(errors.RateLimited) as info:
        client.create_order(product_id=1, denomination=100, quantity=1)
    assert info.value.retry_after == 60.0
    usage = client.budget.usage()
    assert usage[ORDER_CREATE]["blocked_until"] == NOW + 60 and usage[GENERAL]["blocked_until"] is None
    _fault(server)
    client.list_wallets()                          # reads go on: only the order-creation class is blocked
    with pytest.raises(errors.BudgetExhausted, match="order_create"):
        client.create_order(product_id=1, denomination=100, quantity=1)
    with freeze_time("2024-05-01 10:01:00"):
        assert client.create_order(product_id=1, denomination=100, quantity=1).id
    assert server.sandbox.calls["POST /api/v1/orders"] == 2 and server.sandbox.calls["GET /api/v1/wallets"] == 1
