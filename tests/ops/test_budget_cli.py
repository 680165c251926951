"""`partnerkit budget show|unblock`: a 429 with a long Retry-After blocked every process for up to an hour
after the provider had recovered, and nothing lifted it (session 14, finding 7). The 429 is the sandbox's
`rate_limit` fault, met by the real client; the commands run in-process through click."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import pytest
import requests
from click.testing import CliRunner

from partnerkit import errors
from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import jobs
from partnerkit.store.budget import GENERAL, ORDER_CREATE, Budget
from partnerkit.store.db import transaction
from partnerkit.timeutil import parse_ts, utcnow
from partnerkit.vouchers import run_voucher_fetches


def _run(config, *args: str):
    return CliRunner().invoke(cli, list(args), env=config_as_env(config))


def _show(config) -> dict[str, dict]:
    result = _run(config, "budget", "show", "--format", "json")
    assert result.exit_code == 0, result.output
    return {row["class"]: row for row in json.loads(result.stdout)}


@pytest.fixture
def blocked(sandbox_server, sandbox_config, db):
    """One call met `429 Retry-After: 3600`; then the provider recovered. Yields the order whose voucher
    fetch waits for the block."""
    with PartnerClient(sandbox_config, db, wait_for_budget=False) as client:
        order = client.create_order(product_id=7, denomination=10, quantity=1)   # realtime: DELIVERED
        fault = f"{sandbox_server.base_url}/sandbox/faults/rate_limit"
        assert requests.put(fault, json={"scope": "wallet", "seconds": 3600}, timeout=5).status_code == 200
        with pytest.raises(errors.RateLimited):
            client.list_wallets()
        assert requests.delete(fault, timeout=5).status_code < 300
        with transaction(db) as conn:
            jobs.queue(conn, order.id, now=utcnow(), expected_status="DELIVERED", expected_count=1)
        waited = run_voucher_fetches(sandbox_config, db, client)
    assert waited.deferred == 1 and waited.done == 0     # the block holds the fetch: due again in an hour
    yield order


def test_show_says_what_blocks_the_budget_and_why(sandbox_config, blocked):
    rows = _show(sandbox_config)
    assert list(rows) == [GENERAL, ORDER_CREATE]
    general = rows[GENERAL]
    until = parse_ts(general["blocked_until"])
    assert timedelta(minutes=59) < until - utcnow() <= timedelta(hours=1)
    assert general["blocked_because"] == "HTTP 429 to GET /api/v1/wallets (default), Retry-After: 3600"
    assert general["limit"] == general["configured_limit"] == 1000 and general["window_s"] == 3600
    assert general["used"] == sum(general["used_by_purpose"].values()) >= 2
    assert general["provider_remaining"] is None             # a 429's figure is not kept: its block says it all
    assert general["provider_remaining_sent_at"] is None
    assert general["last_unblocked"] is None and general["requests_elsewhere"] is None
    assert rows[ORDER_CREATE]["blocked_until"] is None and rows[ORDER_CREATE]["window_s"] == 60
    table = _run(sandbox_config, "budget", "show")
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:3] == ["CLASS", "LIMIT", "WINDOW_S"]
    assert "HTTP 429 to GET /api/v1/wallets" in table.stdout
    spreadsheet = list(csv.DictReader(io.StringIO(_run(sandbox_config, "budget", "show", "--format", "csv").stdout)))
    assert [r["class"] for r in spreadsheet] == [GENERAL, ORDER_CREATE] and spreadsheet[0]["requests_elsewhere"] == ""


def test_unblock_lifts_the_block_for_every_process_and_keeps_who_and_when(sandbox_config, db, blocked):
    submit = ["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "10"]
    refused = _run(sandbox_config, *submit)
    assert refused.exit_code == 1 and "has no room for 'cli'; retry in 60 min" in refused.stderr
    status = collect(sandbox_config, db)
    [line] = [line for line in status["attention"] if "answered 429" in line]
    assert "once the provider confirms it is back, `partnerkit budget unblock` lifts it now" in line

    lifted = _run(sandbox_config, "budget", "unblock", "--by", "oncall-anna", "--note", "provider INC-42 closed")
    assert lifted.exit_code == 0, lifted.output
    [said] = lifted.stderr.splitlines()
    assert said.startswith("lifted the 429 block of the general budget, which ran until ")
    assert "(HTTP 429 to GET /api/v1/wallets (default), Retry-After: 3600), by oncall-anna at " in said
    assert said.endswith("; 1 voucher fetch(es) that waited for it are due now; the next 429 blocks again")

    general = _show(sandbox_config)[GENERAL]
    assert general["blocked_until"] is None and general["blocked_because"] is None
    assert general["last_unblocked"].startswith("by oncall-anna at ")
    assert general["last_unblocked"].endswith(": provider INC-42 closed")
    assert not any("answered 429" in line for line in collect(sandbox_config, db)["attention"])
    accepted = _run(sandbox_config, *submit)
    assert accepted.exit_code == 0, accepted.output
    general = _show(sandbox_config)[GENERAL]
    assert general["provider_remaining"] < 1000 and general["provider_remaining_sent_at"].endswith("Z")
    with PartnerClient(sandbox_config, db, wait_for_budget=False) as client:
        fetched = run_voucher_fetches(sandbox_config, db, client)
    assert fetched.done == 1 and fetched.vouchers_added == 1     # not an hour later

    again = _run(sandbox_config, "budget", "unblock")
    assert again.exit_code == 0 and again.stderr.strip() == "nothing to lift: no budget class is blocked by a 429 now"


def test_the_next_429_blocks_again_after_an_unblock(sandbox_server, sandbox_config, db, blocked):
    assert _run(sandbox_config, "budget", "unblock", "--by", "anna").exit_code == 0
    fault = f"{sandbox_server.base_url}/sandbox/faults/rate_limit"
    assert requests.put(fault, json={"scope": "wallet", "seconds": 120}, timeout=5).status_code == 200
    with PartnerClient(sandbox_config, db, wait_for_budget=False) as client:
        with pytest.raises(errors.RateLimited):
            client.list_wallets()
        with pytest.raises(errors.BudgetExhausted, match="the provider answered 429"):
            client.list_wallets()
    general = _show(sandbox_config)[GENERAL]
    assert parse_ts(general["blocked_until"]) - utcnow() <= timedelta(seconds=120)
    assert general["blocked_because"].endswith("Retry-After: 120") and general["last_unblocked"].startswith("by anna")


def test_unblock_of_one_class_leaves_the_other(sandbox_config, db):
    budget = Budget.from_config(sandbox_config, db)
    budget.block(GENERAL, 600, why="HTTP 429 to GET /api/v1/orders (order_sync), Retry-After: 600")
    budget.block(ORDER_CREATE, 30)
    lifted = _run(sandbox_config, "budget", "unblock", "--class", ORDER_CREATE, "--by", "anna")
    assert lifted.exit_code == 0 and "429 block of the order_create budget" in lifted.stderr
    assert "voucher fetch" not in lifted.stderr                   # they spend the general budget only
    rows = _show(sandbox_config)
    assert rows[ORDER_CREATE]["blocked_until"] is None and rows[GENERAL]["blocked_until"] is not None
    nothing = _run(sandbox_config, "budget", "unblock", "--class", ORDER_CREATE)
    assert nothing.exit_code == 0
    assert nothing.stderr.strip() == "nothing to lift: the order_create budget is not blocked by a 429 now"


def test_a_shorter_429_keeps_the_reason_of_the_longer_block(sandbox_config, db):
    budget = Budget.from_config(sandbox_config, db, clock=lambda: 1_800_000_000.0)
    budget.block(GENERAL, 3600, why="first, long")
    budget.block(GENERAL, 60, why="second, short")
    [general, _] = budget.describe()
    assert general["blocked_until"] == datetime.fromtimestamp(1_800_003_600, timezone.utc)
    assert general["blocked_because"] == "first, long"
