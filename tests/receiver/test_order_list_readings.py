"""The order list where the provider's document leaves room for another provider than the sandbox:

- its error table gives `404 not_found No Matching Result Found!` to "Order list and order detail"
  alike: a provider may answer it for an empty list (the sandbox's `order_list_empty_404`);
- it gives the list no sort order (only the recharge list is "newest first (always id descending)"):
  a provider listing oldest first, or in no order, is served here by a loopback HTTP server
  (pytest-httpserver) in front of the real client, since the sandbox lists newest first.
"""

from __future__ import annotations

import json
import logging
import random
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from werkzeug import Response

from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import Config, config_as_env, load_config
from partnerkit.store import open_db
from partnerkit.vouchers import catch_up_orders
from sandbox.settings import SandboxSettings
from tests.conftest import account_of
from tests.sandbox_serving import serve_sandbox

NOW = datetime(2026, 11, 22, 8, 0, tzinfo=timezone.utc)
SINCE = NOW - timedelta(days=1)
# 240 orders, one an hour over ten days, ids growing with time: 25 placed since SINCE (inclusive).
HISTORY = [{"id": 6000 + i, "reference_code": f"r{i}", "transaction_id": 9000 + i, "product_id": 7,
            "denomination": "10.00", "quantity": 1, "amount": "10.00", "status": "delivered", "currency": "INR",
            "email": None, "mobile": None,
            "placed_at": (NOW - timedelta(hours=239 - i)).strftime("%Y-%m-%dT%H:%M:%SZ")} for i in range(240)]
IN_RANGE = {o["id"] for o in HISTORY if o["placed_at"] >= SINCE.strftime("%Y-%m-%dT%H:%M:%SZ")}


# ---- 404 for an empty order list ------------------------------------------------------------------------

def test_a_partner_without_orders_syncs_and_reconciles_when_the_empty_list_is_a_404(tmp_path):
    today = datetime.now(timezone.utc).date()
    with serve_sandbox(SandboxSettings(order_list_empty_404=True), background=False) as server:
        client = server.clients[1]  # beta: no order ever placed
        env = config_as_env(load_config(environ={
            "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
            "PARTNERKIT_API_KEY": client.key, "PARTNERKIT_API_SECRET": client.secret,
            "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")}))
        runner = CliRunner()
        open_db(tmp_path / "partnerkit.db").conn.close()  # submit refuses a database that does not exist
        submitted = runner.invoke(cli, ["recharges", "submit", "--mobile", "9800000010", "--operator-id", "1",
                                        "--amount", "50"], env=env)
        assert submitted.exit_code == 0, submitted.output
        synced = runner.invoke(cli, ["orders", "sync", "--format", "json"], env=env)
        assert synced.exit_code == 0, synced.output
        summary = json.loads(synced.stdout)
        assert (summary["pages"], summary["seen"], summary["stopped"]) == (1, 0, "end of list")
        reconciled = runner.invoke(cli, ["reconcile", "--date", today.isoformat()], env=env)
        assert reconciled.exit_code == 0, reconciled.output
        assert "1 recharge" in reconciled.stderr
        assert server.sandbox.calls["GET /api/v1/orders"] == 2  # each walk read the 404 once, as its empty page
        assert (tmp_path / "reports" / f"partnerkit-report-{today.isoformat()}.json").exists()


# ---- the list's sort order ------------------------------------------------------------------------------

def _serve(httpserver, arrange, *, total_pages: bool = True) -> list[int]:
    """The history in pages as `arrange` orders it; returns the pages asked for, in order."""
    asked: list[int] = []
    listing = arrange(list(HISTORY))

    def answer(request):
        page, limit = int(request.args.get("page", 1)), int(request.args.get("limit", 10))
        asked.append(page)
        chunk = listing[(page - 1) * limit: page * limit]
        headers = {"X-Page": str(page), "X-Per-Page": str(limit), "X-Total-Count": str(len(listing))}
        if total_pages:
            headers["X-Total-Pages"] = str(-(-len(listing) // limit))
        return Response(json.dumps(chunk), status=200, headers=headers, content_type="application/json")

    httpserver.expect_request("/api/v1/orders").respond_with_handler(answer)
    return asked


@pytest.fixture
def walk(httpserver, tmp_path, migrated_file):
    config = Config(db_path=tmp_path / "partnerkit.db", api_base_url=httpserver.url_for("/").rstrip("/"),
                    api_key="pk_test_readings", api_secret="sk_test_readings_0123456789", http_timeout_s=2.0)
    db = open_db(migrated_file(config.db_path))
    account_of(db, config.api_key)  # the server below answers the order list only

    def run(**kwargs):
        with PartnerClient(config, db) as client:
            return catch_up_orders(config, db, client, since=SINCE, now=NOW, **kwargs)

    run.stored = lambda: {row[0] for row in db.execute("SELECT id FROM orders")}
    yield run
    db.conn.close()


def newest_first(orders: list) -> list:
    return sorted(orders, key=lambda o: o["id"], reverse=True)


def oldest_first(orders: list) -> list:
    return sorted(orders, key=lambda o: o["id"])


def shuffled(orders: list) -> list:
    random.Random(7).shuffle(orders)
    return orders


def test_newest_first_stops_at_the_first_order_older_than_since(httpserver, walk, caplog):
    asked = _serve(httpserver, newest_first)
    with caplog.at_level(logging.WARNING, logger="partnerkit.vouchers"):
        summary = walk()
    assert asked == [1] and (summary.stopped, summary.list_order) == ("reached since", None)
    assert walk.stored() == IN_RANGE and caplog.records == []


def test_oldest_first_is_read_from_the_last_page_backwards(httpserver, walk, caplog):
    asked = _serve(httpserver, oldest_first)
    with caplog.at_level(logging.WARNING, logger="partnerkit.vouchers"):
        summary = walk()
    # Page 1 holds the oldest orders; the day's are on the last page (3), which also reaches `since`.
    assert asked == [1, 3] and (summary.stopped, summary.list_order) == ("reached since", "oldest first")
    assert summary.seen == len(IN_RANGE) == 25  # one an hour, `since` itself included
    assert walk.stored() == IN_RANGE
    assert [r.getMessage() for r in caplog.records] == [
        "the provider lists orders oldest first (ids ascending within page 1), not newest first: reading from the "
        "last page backwards"]


def test_oldest_first_without_total_pages_is_read_to_its_end(httpserver, walk):
    asked = _serve(httpserver, oldest_first, total_pages=False)
    summary = walk()
    assert asked == [1, 2, 3] and (summary.stopped, summary.list_order) == ("end of list", "oldest first")
    assert walk.stored() == IN_RANGE


def test_a_list_in_no_order_is_read_to_its_end_and_never_stopped_early(httpserver, walk, caplog):
    asked = _serve(httpserver, shuffled)
    with caplog.at_level(logging.WARNING, logger="partnerkit.vouchers"):
        summary = walk()
    assert asked == [1, 2, 3] and (summary.stopped, summary.list_order) == ("end of list", "unsorted")
    assert walk.stored() == IN_RANGE
    assert "in no order" in caplog.records[0].getMessage() and len(caplog.records) == 1


def test_the_scheduled_run_reads_its_pages_from_the_newest_end_too(httpserver, walk):
    """Without --since the catch-up reads at most `max_pages`: on an oldest-first list, the newest ones."""
    asked = _serve(httpserver, oldest_first)
    summary = walk(max_pages=2)
    assert asked == [1, 3] and walk.stored() == IN_RANGE and summary.list_order == "oldest first"
