"""Ids across starts (docs/sandbox.md, "Ids"): `python -m sandbox` numbers every start's records from its start
time, so a partnerkit database kept across a restart never meets an id, an event id or an order ref twice; the
test harness (id_block 0, the default of SandboxSettings) keeps the documented ids, the same at every start."""
from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from sandbox import SandboxSettings, ids
from tests.sandbox.sandbox_helpers import Api, make_settings
from tests.sandbox_serving import serve_sandbox

ALPHA = SimpleNamespace(key="pk_sandbox_alpha", secret="sk_sandbox_alpha_3f9a1c7e5b2d4068")
BANNER_LINES = 6  # listening, three clients, webhook defaults, ids


@contextmanager
def python_m_sandbox(*options: str):
    """`python -m sandbox --port 0 [options]` as a user starts it; yields its base URL and banner."""
    process = subprocess.Popen([sys.executable, "-m", "sandbox", "--port", "0", *options],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = [process.stdout.readline() for _ in range(BANNER_LINES)]
        if not banner[0].startswith("sandbox listening on "):
            process.kill()
            pytest.fail(f"the sandbox did not start: {banner} {process.communicate(timeout=10)}")
        yield banner[0].split()[3], banner
    finally:
        process.terminate()
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0 and "sandbox stopped" in out and "Traceback" not in err, err


def what_a_day_numbers(base_url: str) -> dict[str, set]:
    """One of everything a partner's database keeps, made through the API, and the ids it was given."""
    alpha = Api(SimpleNamespace(base_url=base_url), ALPHA)
    hook = alpha.post("/api/v1/webhooks", {"name": "n", "url": "http://127.0.0.1:9/hook",
                                           "events": ["order.created"]})
    recharge = alpha.recharge(mobile="9876543215", amount=199)
    order = alpha.order(product_id=7, denomination=10, quantity=2)
    assert (hook.status_code, recharge.status_code, order.status_code) == (201, 202, 200)
    deliveries = alpha.get("/api/v1/webhooks/deliveries").json()["data"]["deliveries"]
    transactions = alpha.get("/api/v1/transactions").json()
    return {"recharge": {recharge.json()["id"]}, "reference_number": {recharge.json()["reference_number"]},
            "order": {order.json()["id"]}, "order ref": {order.json()["ref"]},
            "voucher": {v["card_number"] for v in order.json()["vouchers"]},
            "transaction": {t["id"] for t in transactions}, "webhook": {hook.json()["id"]},
            "delivery": {d["id"] for d in deliveries}, "event_id": {d["event_id"] for d in deliveries},
            "wallet": {w["id"] for w in alpha.get("/api/v1/wallets").json()}}


def test_two_starts_of_python_m_sandbox_give_no_id_twice():
    with python_m_sandbox() as (base_url, banner):
        first = what_a_day_numbers(base_url)
    with python_m_sandbox() as (base_url, _):
        second = what_a_day_numbers(base_url)
    for kind in first.keys() - {"wallet"}:
        assert first[kind] and second[kind] and not first[kind] & second[kind], kind
    assert max(first["recharge"]) < min(second["recharge"])  # a later start numbers higher
    assert first["wallet"] == second["wallet"] == {1, 2}     # the seeded wallets are the account's own
    # The numbering is the documented one, in the start's block, and the banner says so.
    block = (min(first["recharge"]) - 100001) // ids.BLOCK_SIZE
    assert block > 0 and min(first["order"]) == block * ids.BLOCK_SIZE + 5001
    assert min(first["transaction"]) == block * ids.BLOCK_SIZE + 700001  # alpha's opening balance
    assert min(first["reference_number"]).endswith(f"{block}100001")
    assert banner[5].strip().startswith(f"ids of this start: recharge {block}100001, order {block}005001, "
                                        f"transaction {block}700001, webhook {block}000001 onwards")


def test_fixed_ids_number_every_start_from_the_documented_first_ids():
    with python_m_sandbox("--fixed-ids") as (base_url, banner):
        numbers = what_a_day_numbers(base_url)
    assert (numbers["recharge"], numbers["order"], numbers["webhook"], min(numbers["transaction"])) == \
        ({100001}, {5001}, {1}, 700001)
    assert banner[5].strip() == ("ids of this start: recharge 100001, order 5001, transaction 700001, webhook 1 "
                                 "onwards (fixed: the same at every start, so give each start a fresh partnerkit "
                                 "database)")


def test_the_test_harness_keeps_the_documented_ids_and_draws_at_every_start():
    made = []
    for _ in range(2):
        with serve_sandbox(make_settings(), background=False) as server:
            alpha = Api(server, server.clients[0])
            alpha.post("/api/v1/webhooks", {"name": "n", "url": "http://127.0.0.1:9/hook", "events": ["order.created"]})
            order = alpha.order(product_id=7, denomination=10, quantity=1).json()
            event = server.sandbox.deliveries[1].event_id
            made.append((server.sandbox.settings.id_block, alpha.recharge().json()["id"], order["id"], order["ref"],
                         order["vouchers"][0]["card_number"], event))
    assert made[0] == made[1] and made[0][:3] == (0, 100001, 5001)


def test_a_block_numbers_every_kind_above_the_documented_ids_and_a_later_wallet_too():
    with serve_sandbox(make_settings(id_block=42), background=False) as server:
        sb = server.sandbox
        assert sorted(sb.wallets) == [1, 2, 3, 4]  # seeded: the same at every start
        assert min(sb.transactions) == 42_700_001
        opened = Api(server, server.clients[2]).control("POST", "/wallets/topup",
                                                        {"client": "gamma", "currency": "INR", "amount": 10})
        assert opened.status_code == 201 and opened.json()["wallet_id"] == 42_000_005
        assert [sb.next_id(kind) for kind in ("recharge", "order", "webhook", "delivery")] == \
            [42_100_001, 42_005_001, 42_000_001, 42_000_001]


def test_a_start_one_second_later_is_the_next_block_and_the_blocks_are_seconds_since_2024():
    start = datetime(2025, 11, 22, 17, 0, 0, 250_000, tzinfo=timezone.utc)
    assert ids.block_at(start) == (366 + 325) * 86400 + 17 * 3600  # 2024, then 2025 up to November 22
    assert ids.block_at(start + timedelta(seconds=1)) == ids.block_at(start) + 1
    assert ids.block_at(ids.EPOCH) == 1  # never the fixed block 0
    assert ids.first_ids(ids.MAX_BLOCK)["transaction"] < 2**53  # exact in every JSON reader


@pytest.mark.parametrize("value", [-1, True, "5", 1.5, ids.MAX_BLOCK + 1])
def test_an_id_block_that_is_not_one_is_refused(value):
    with pytest.raises(ValueError, match=rf"id_block must be a whole number from 0 to {ids.MAX_BLOCK}, not "):
        SandboxSettings(id_block=value)


def test_the_id_block_cannot_change_while_the_sandbox_runs(alpha, sb):
    refused = alpha.control("PATCH", "/settings", {"id_block": 7, "hourly_limit": 5})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == ("invalid settings: id_block is chosen when the sandbox starts (this "
                                                  "one numbers its ids in block 0); it cannot change while it runs")
    assert (sb.settings.id_block, sb.settings.hourly_limit, sb.next_id("order")) == (0, 1000, 5001)
    same = alpha.control("PATCH", "/settings", {"id_block": 0})  # a GET's answer sent back unchanged
    assert same.status_code == 200 and same.json()["id_block"] == 0
