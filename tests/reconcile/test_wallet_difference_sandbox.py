"""The demo's wallet difference on the sandbox (real HTTP): a provider's clock ahead of ours dates the entries it
made before partnerkit read its balance after that read, and a refund deleted from its list cancels the debit before
it. `partnerkit reconcile` reads the balance after its walks listed them: the difference is the refund, not timing
(docs/reconcile.md, "The wallet against the provider's balance")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests

pytest.importorskip("sandbox.testing")

from reconcile.jobs import reconcile_day  # noqa: E402
from reconcile.recharges import submit  # noqa: E402
from tests.reconcile.reconcile_helpers import sandbox_day  # noqa: E402

# The sandbox's clock (its opening top-up is dated then) and ours: 5 minutes after, before the sandbox's hour jump.
PROVIDER_START = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
OUR_NOW = PROVIDER_START + timedelta(minutes=5)


@pytest.fixture
def world(tmp_path):
    with sandbox_day(tmp_path, PROVIDER_START) as world:
        yield world


def control(server, method: str, path: str, **body) -> dict:
    response = requests.request(method, f"{server.base_url}/sandbox{path}", json=body or None, timeout=10)
    assert response.status_code < 300, response.text
    return response.json()


def test_a_refund_deleted_after_a_debit_dated_after_the_read_is_the_difference_not_timing(world):
    server, config, db, client = world
    day = PROVIDER_START.date()
    control(server, "POST", "/clock/advance", seconds=3600)  # the provider's clock now an hour ahead of ours
    paid = submit(config, db, client, mobile_number="9800000010", operator_id=1, amount=199, force=True).recharge
    failed = submit(config, db, client, mobile_number="9800000024", operator_id=1, amount=149, force=True).recharge
    assert (paid.status, failed.status) == ("SUCCESS", "FAILED")
    entries = list(client.iter_transactions(from_date=day, to_date=day))
    [refund] = [t for t in entries if t.get("recharge_id") == failed.id and t["direction"] == "CREDIT"]
    [debit] = [t for t in entries if t.get("recharge_id") == failed.id and t["direction"] == "DEBIT"]
    control(server, "DELETE", f"/transactions/{refund['id']}")  # the provider keeps the refund out of its list

    report = reconcile_day(config, db, client, day, now=OUR_NOW)

    w = report["wallets"]["INR"]
    assert w["provider_balance_at"] < debit["created_at"]  # dated after the read, made (and listed) before it
    # Walked forward from the opening top-up, the chain met the provider's balance after the first recharge's debit:
    # "timing". The failed recharge's debit was listed before the read: the ledger's balance then is after it.
    assert (w["ledger_balance_at_provider_time"], w["provider_difference"], w["provider_difference_status"],
            w["provider_difference_explained_by"]) == (debit["balance_after"], f"{failed.payable:.2f}", "unconfirmed",
                                                       [])
    assert [(d["kind"], d["reference"]) for d in report["drifts"]] == [("missing_refund", failed.reference_number)]
