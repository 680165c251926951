"""`partnerkit orders sync --since` covers the whole requested range, against the sandbox on loopback.

The order list has no date filter, so a range is read page by page (100 orders a page) back to
`--since`. Regression: an explicit --since used to be clamped to 2 days (and 20 pages) without a
word, so older orders were silently left out.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env, load_config
from partnerkit.store import open_db
from sandbox import orders as sandbox_orders
from sandbox.settings import SandboxSettings
from sandbox.testing import SandboxServer
from tests.conftest import account_of
from tests.sandbox_serving import serve_sandbox

OLD, RECENT = 130, 20  # 150 orders: two pages of the list


def _place(server: SandboxServer, count: int) -> None:
    """Orders placed at the sandbox's current time, through its own order logic (no rate limit)."""
    sb = server.sandbox
    client = server.clients[0]
    with sb.lock:
        for _ in range(count):
            request = sandbox_orders.parse_create(sb, client, {"product_id": 7, "denomination": 10, "quantity": 1})
            sandbox_orders.create(sb, client, request)


@pytest.fixture
def history():
    """A sandbox whose first 130 orders were placed 5 days ago and the last 20 now."""
    started = datetime.now(timezone.utc) - timedelta(days=5)
    with serve_sandbox(SandboxSettings(start=started), background=False) as server:
        _place(server, OLD)
        server.advance(timedelta(days=5).total_seconds())
        _place(server, RECENT)
        yield server, started


def _env(server: SandboxServer, tmp_path, **extra: str) -> dict:
    client = server.clients[0]
    config = load_config(environ={
        "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
        "PARTNERKIT_API_KEY": client.key, "PARTNERKIT_API_SECRET": client.secret,
        "PARTNERKIT_WEBHOOK_TOKENS": "bootstrap-token-for-tests", **extra})
    db = open_db(config.db_path)
    account_of(db, client.key, ("1", "2"))  # a database in use: the budgets below are the walk's alone
    db.conn.close()
    return config_as_env(config)


def test_since_six_days_ago_reads_every_order_back_to_it(history, tmp_path):
    server, started = history
    since = (started - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = CliRunner().invoke(cli, ["orders", "sync", "--since", since, "--format", "json"],
                                env=_env(server, tmp_path), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["seen"] == OLD + RECENT and summary["pages"] == 2
    assert summary["stopped"] == "end of list"
    assert summary["reached"] < (started + timedelta(hours=1)).isoformat()
    db = open_db(tmp_path / "partnerkit.db")
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == OLD + RECENT
    # Delivered orders without their vouchers get a fetch queued, old ones included.
    assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == OLD + RECENT


def test_a_range_cut_short_by_the_budget_says_so_and_exits_1(history, tmp_path):
    server, started = history
    since = (started - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = CliRunner().invoke(cli, ["orders", "sync", "--since", since, "--format", "json"],
                                env=_env(server, tmp_path, PARTNERKIT_HOURLY_BUDGET="1"))
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert summary["pages"] == 1 and summary["seen"] == 100 and summary["stopped"] == "budget"
    assert "the order list was read back to orders placed at" in result.stderr
    assert ("the hourly API budget is spent (a tenth is kept for voucher fetches and one for the recharge poller)"
            in result.stderr)
    assert "with the same --since within 6 hours, it reads on from the page it stopped before" in result.stderr
    assert "Traceback" not in result.output
    db = open_db(tmp_path / "partnerkit.db")
    assert db.execute("SELECT entity, next_page FROM sync_walks").fetchall() == [("orders", 2)]
    db.conn.close()


def test_the_help_says_how_far_back_each_way_reads():
    text = " ".join(CliRunner().invoke(cli, ["orders", "sync", "--help"]).output.split())
    assert "however far" in text and "2 days" in text and "20 pages" in text


def test_a_range_walk_leaves_a_tenth_to_voucher_fetches_and_a_tenth_to_the_poller(history, tmp_path):
    server, started = history
    since = (started - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = _env(server, tmp_path, PARTNERKIT_HOURLY_BUDGET="10")  # a tenth each: 2 requests kept free
    config = load_config(environ=env)
    db = open_db(config.db_path)
    with PartnerClient(config, db) as client:
        for _ in range(7):
            client.delivery_stats()  # 3 requests of the hour left
    result = CliRunner().invoke(cli, ["orders", "sync", "--since", since, "--format", "json"], env=env)
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert (summary["pages"], summary["stopped"]) == (1, "budget"), "the second page would eat the reserve"
    status = json.loads(CliRunner().invoke(cli, ["status", "--format", "json"], env=env).stdout)
    assert status["budget_remaining_this_hour"] == 2
    db.conn.close()


def test_a_since_in_the_future_is_refused_before_any_call(history, tmp_path):
    server, _ = history
    calls = sum(server.sandbox.calls.values())
    since = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = CliRunner().invoke(cli, ["orders", "sync", "--since", since], env=_env(server, tmp_path))
    assert result.exit_code == 2 and "is in the future" in result.output and "Traceback" not in result.output
    assert sum(server.sandbox.calls.values()) == calls, "no page read for a range that cannot hold an order"


def test_a_long_walk_prints_how_far_it_has_read(history, tmp_path, monkeypatch):
    """A walk far back is one request per 100 orders (minutes against a real provider): how far it has
    read goes to stderr every few seconds (here at every page), never to the JSON on stdout."""
    import partnerkit.cli.output as output

    monkeypatch.setattr(output, "PROGRESS_EVERY_S", 0.0)
    server, started = history
    since = (started - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = CliRunner().invoke(cli, ["orders", "sync", "--since", since, "--format", "json"],
                                env=_env(server, tmp_path), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seen"] == OLD + RECENT
    lines = result.stderr.splitlines()
    assert lines[:2] == ["orders sync: orders, 100 read so far", "orders sync: orders, 150 read so far"], lines


def test_catch_up_orders_reports_each_page_read(history, tmp_path):
    from partnerkit.vouchers import catch_up_orders

    server, started = history
    config = load_config(environ=_env(server, tmp_path))
    db = open_db(config.db_path)
    calls: list[tuple[str, int]] = []
    with PartnerClient(config, db) as client:
        catch_up_orders(config, db, client, since=started - timedelta(days=1),
                        progress=lambda entity, read: calls.append((entity, read)))
    assert calls == [("orders", 100), ("orders", 150)]
    db.conn.close()


def test_a_walk_asked_to_stop_ends_after_its_page_keeps_its_place_and_reads_on(history, tmp_path):
    """SIGTERM to the worker (`stop_walks`) during an order walk down to a `since`: it ends after the page it
    read, stored, with its place kept, and the next walk down to the same `since` reads on from there."""
    from partnerkit import walks
    from partnerkit.store import ledger as ledger_store
    from partnerkit.vouchers import catch_up_orders, orders_read

    server, started = history
    _place(server, 200)  # 350 orders: four pages
    since = started - timedelta(days=1)
    config = load_config(environ=_env(server, tmp_path))
    db = open_db(config.db_path)
    list_calls = lambda: server.sandbox.calls.get("GET /api/v1/orders", 0)  # noqa: E731
    try:
        with PartnerClient(config, db) as client:
            before = list_calls()
            with pytest.raises(walks.WalkStopped, match=r"^the orders sync of .*\.\.now stopped before page 2, which "
                                                        r"its next run reads on from: the worker is stopping"):
                catch_up_orders(config, db, client, since=since, progress=lambda entity, read: walks.stop_walks())
            walks.allow_walks()
            assert list_calls() - before == 1
            assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 100  # the page read is stored
            [kept] = ledger_store.walk_positions(db)
            assert (kept["entity"], kept["to_day"], kept["next_page"]) == ("orders", "now", 2)
            assert orders_read(db) is None  # not read down to `since` yet

            before = list_calls()
            summary = catch_up_orders(config, db, client, since=since)
            assert list_calls() - before == 3 and summary.pages == 3  # pages 2 to 4, not page 1 again
            assert summary.stopped == "end of list"
            assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == OLD + RECENT + 200
            assert ledger_store.walk_positions(db) == []
            assert orders_read(db)[0] == since  # read down to it, in two parts
    finally:
        walks.allow_walks()
        db.conn.close()


def test_the_scheduled_walk_asked_to_stop_ends_after_its_page_and_keeps_no_place(history, tmp_path):
    from partnerkit import walks
    from partnerkit.store import ledger as ledger_store
    from partnerkit.vouchers import catch_up_orders

    server, _ = history
    _place(server, 200)
    config = load_config(environ=_env(server, tmp_path))
    db = open_db(config.db_path)
    try:
        with PartnerClient(config, db) as client:
            before = server.sandbox.calls.get("GET /api/v1/orders", 0)
            with pytest.raises(walks.WalkStopped, match="stopped part-way, keeping no place"):
                catch_up_orders(config, db, client, progress=lambda entity, read: walks.stop_walks())
            assert server.sandbox.calls.get("GET /api/v1/orders", 0) - before == 1
            assert ledger_store.walk_positions(db) == []  # its start moves with the clock: nothing would read on
    finally:
        walks.allow_walks()
        db.conn.close()


def test_ctrl_c_ends_orders_sync_after_its_page_in_one_line_and_the_next_run_reads_on(history, tmp_path):
    """Ctrl-C to `partnerkit orders sync --since` (a real process): it ends after the page it is reading, says
    where it stopped in one line, exits 1 without a traceback, and the same command reads on from that page."""
    import os
    import signal
    import subprocess
    import sys

    server, started = history
    _place(server, 200)
    since = (started - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}, **_env(server, tmp_path)}
    child: list[subprocess.Popen] = []
    asked: list[str] = []

    def ctrl_c_at_page_two() -> None:
        from flask import request

        if request.path == "/api/v1/orders":
            asked.append(request.args.get("page", "1"))
            if asked[-1] == "2" and child:
                os.kill(child[0].pid, signal.SIGINT)  # what the terminal sends on Ctrl-C, while page 2 is read

    server.app.before_request(ctrl_c_at_page_two)
    child.append(subprocess.Popen([sys.executable, "-m", "partnerkit", "orders", "sync", "--since", since],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out, err = child[0].communicate(timeout=60)
    first = list(asked)
    child.clear()
    again = CliRunner().invoke(cli, ["orders", "sync", "--since", since, "--format", "json"], env=env)

    assert first == ["1", "2"], (first, err)
    lines = err.strip().splitlines()
    assert "Traceback" not in err and out == ""
    assert lines[-1].startswith("Error: the orders sync of ") and lines[-1].endswith(
        "..now stopped before page 3, which its next run reads on from: interrupted (Ctrl-C)"), err
    assert lines[-2].startswith("interrupted (Ctrl-C): the sync stops after the page it is reading"), err
    assert again.exit_code == 0, again.output
    assert asked[len(first):] == ["3", "4"]  # read on from the kept page
    assert json.loads(again.stdout)["seen"] == 150
