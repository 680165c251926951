"""The receiver's commands: events, orders, vouchers, webhooks (the provider faked by pytest-httpserver)."""

from __future__ import annotations

import json
import socket
from dataclasses import replace

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from receiver.app import create_app
from tests.receiver.conftest import envelope, post
from tests.receiver.test_vouchers import CODES, detail


@pytest.fixture
def env(config, httpserver):
    return config_as_env(replace(config, api_base_url=httpserver.url_for("/").rstrip("/"), log_level="ERROR"))


def run(env, *args):
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_events_list_shows_states_duplicates_and_jobs(client, env):
    post(client, envelope("evt_a"))
    post(client, envelope("evt_a"))
    post(client, b"not json", X_Event_ID="evt_bad")
    rows = json.loads(run(env, "events", "list", "--format", "json").stdout)
    assert [(r["dedup_key"], r["state"], r["duplicates"], r["job_state"]) for r in rows] == [
        ("evt_bad", "quarantined", 0, None), ("evt_a", "processed", 1, "pending")]
    assert rows[0]["job_reason"] == "body is not JSON"
    csv_out = run(env, "events", "list", "--format", "csv").stdout.splitlines()
    assert csv_out[0].startswith("dedup_key,event_type,order_id") and len(csv_out) == 3
    assert "evt_a" in run(env, "events", "list").stdout


def test_orders_list_and_show(client, env):
    post(client, envelope("e1", "order.partially_delivered", status="PARTIALLY_DELIVERED", quantity=4, delivered=1))
    rows = json.loads(run(env, "orders", "list", "--format", "json").stdout)
    assert rows[0]["id"] == 101 and rows[0]["status"] == "PARTIALLY_DELIVERED" and rows[0]["amount"] == "1000.00"
    shown = json.loads(run(env, "orders", "show", "101", "--format", "json").stdout)
    assert shown["job_state"] == "pending" and shown["events"][0]["dedup_key"] == "e1"
    assert "PARTIALLY_DELIVERED" in run(env, "orders", "show", "101").stdout
    missing = CliRunner().invoke(cli, ["orders", "show", "999"], env=env)
    assert missing.exit_code == 1 and "not known locally" in missing.output


def test_events_list_and_orders_show_name_the_duplicate_count_alike(client, env):
    post(client, envelope("evt_twice"))
    post(client, envelope("evt_twice"))
    listed = json.loads(run(env, "events", "list", "--format", "json").stdout)[0]
    shown = json.loads(run(env, "orders", "show", "101", "--format", "json").stdout)["events"][0]
    assert listed["duplicates"] == shown["duplicates"] == 1
    assert shown["duplicate_count"] == 1, "the old name stays as an alias for existing scripts"
    header = run(env, "events", "list", "--format", "csv").stdout.splitlines()[0].split(",")
    table = run(env, "orders", "show", "101").stdout
    assert "duplicates" in header and "DUPLICATES" in table and "DUPLICATE_COUNT" not in table


def test_vouchers_masked_unless_revealed(client, config, env, httpserver):
    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db
    from partnerkit.vouchers import run_voucher_fetches

    post(client, envelope())
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(detail())
    api_config = replace(config, api_base_url=httpserver.url_for("/").rstrip("/"))
    db = open_db(config.db_path)
    run_voucher_fetches(api_config, db, PartnerClient(api_config, db))
    masked = run(env, "vouchers", "101").stdout
    assert CODES[0] not in masked and CODES[0][-4:] in masked and "PIN-0" not in masked
    revealed = json.loads(run(env, "vouchers", "101", "--reveal", "--format", "json").stdout)
    assert [v["card_number"] for v in revealed] == CODES[:2]
    assert set(revealed[0]) == {"card_number", "pin_code", "claim_url", "voucher_reference_number", "expires_at"}


def test_revealed_csv_keeps_a_formula_start_as_text_and_json_gives_the_code_exactly(client, config, env, httpserver):
    """A code that starts with = + - @ gets the spreadsheet's ' in CSV (it could be a formula the provider sent);
    the help says so and points scripts at --format json, where the code is as stored."""
    from partnerkit.client import PartnerClient
    from partnerkit.store import open_db
    from partnerkit.vouchers import run_voucher_fetches

    codes = ["-AB12-CD34", "=HYPERLINK(1)"]
    post(client, envelope())
    httpserver.expect_request("/api/v1/orders/101").respond_with_json(detail(codes=codes))
    api_config = replace(config, api_base_url=httpserver.url_for("/").rstrip("/"))
    db = open_db(config.db_path)
    run_voucher_fetches(api_config, db, PartnerClient(api_config, db))
    rows = run(env, "vouchers", "101", "--reveal", "--format", "csv").stdout.splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["'-AB12-CD34", "'=HYPERLINK(1)"]
    revealed = json.loads(run(env, "vouchers", "101", "--reveal", "--format", "json").stdout)
    assert [v["card_number"] for v in revealed] == codes
    assert "should use --format json, which gives every field exactly" in " ".join(
        run(env, "vouchers", "--help").stdout.split())


def test_webhooks_register_saves_the_token_encrypted_and_the_receiver_accepts_it(config, env, httpserver):
    httpserver.expect_request("/api/v1/webhooks", method="POST").respond_with_json(
        {"id": 12, "name": "partnerkit", "url": "https://example.com/webhooks/partner", "token": "whsec_from_provider",
         "events": ["order.delivered"], "is_active": True, "created_at": "2024-05-01T10:00:00Z"})
    result = run(env, "webhooks", "register", "--url", "https://example.com/webhooks/partner",
                 "--events", "order.delivered")
    assert "12" in result.stdout and "receiver now accepts" in result.stderr
    assert b"whsec_from_provider" not in config.db_path.read_bytes()
    app = create_app(replace(config, webhook_tokens=()))  # starts on the saved token alone
    assert post(app.test_client(), envelope(), token="whsec_from_provider", X_Webhook_ID="12").status_code == 200
    assert post(app.test_client(), envelope("e2"), token="whsec_from_provider").status_code == 401


def test_webhooks_deliveries_stats_retry(env, httpserver):
    httpserver.expect_request("/api/v1/webhooks/deliveries/stats").respond_with_json(
        {"success": True, "data": {"total_count": 3, "pending_count": 0, "delivered_count": 2, "failed_count": 1,
                                   "last_24h_total": 3, "last_24h_delivered": 2, "last_24h_failed": 1}})
    httpserver.expect_request("/api/v1/webhooks/deliveries").respond_with_json(
        {"success": True, "data": {"deliveries": [{"id": 5, "webhook_url_id": 12, "order_id": 101,
                                                   "event_type": "order.delivered", "event_id": "evt_1",
                                                   "payload": {}, "status": "failed", "attempt_count": 5,
                                                   "max_attempts": 5, "response_status": 503,
                                                   "response_time_ms": 12, "delivered_at": None,
                                                   "created_at": "2024-05-01T10:00:00Z"}]}},
        headers={"X-Page": "1", "X-Total-Count": "1", "X-Total-Pages": "1", "X-Page-Size": "20"})
    httpserver.expect_request("/api/v1/webhooks/deliveries/5/retry", method="POST").respond_with_json(
        {"success": True, "data": {"message": "Delivery re-queued", "delivery_id": 5}})
    assert json.loads(run(env, "webhooks", "stats", "--format", "json").stdout)["failed_count"] == 1
    rows = json.loads(run(env, "webhooks", "deliveries", "--status", "failed", "--format", "json").stdout)
    assert rows[0]["id"] == 5 and rows[0]["response_status"] == 503
    assert "re-queued" in run(env, "webhooks", "retry", "5").stdout


def test_a_retry_the_provider_refuses_is_its_message_on_one_line(env, httpserver):
    # "A delivery that has used all attempts cannot be retried": the refusal is reported as the provider
    # words it, exit 1, never a traceback (README, "silent or contradicts").
    httpserver.expect_request("/api/v1/webhooks/deliveries/5/retry", method="POST").respond_with_json(
        {"success": False, "error": {"code": "ATTEMPTS_EXHAUSTED", "message": "Delivery has used all its attempts"}},
        status=400)
    result = CliRunner().invoke(cli, ["webhooks", "retry", "5"], env=env)
    assert result.exit_code == 1, result.output
    assert "Delivery has used all its attempts" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_deliveries_page_past_the_end_says_how_many_pages_there_are(env, httpserver):
    httpserver.expect_request("/api/v1/webhooks/deliveries").respond_with_json(
        {"success": True, "data": {"deliveries": []}},
        headers={"X-Page": "999", "X-Total-Count": "8", "X-Total-Pages": "1", "X-Page-Size": "20"})
    result = CliRunner().invoke(cli, ["webhooks", "deliveries", "--page", "999"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr.strip() == "no deliveries on page 999: there are 1 page(s) of 8"


def test_an_empty_filtered_listing_says_what_matched_nothing(client, env):
    post(client, envelope("evt_a", order_id=101))
    orders = run(env, "orders", "list", "--status", "failed")
    assert orders.stdout == "" and orders.stderr.strip() == "no orders in status FAILED"
    events = run(env, "events", "list", "--state", "quarantined", "--order-id", "101")
    assert events.stdout == "" and events.stderr.strip() == "no events with state quarantined and order 101"
    assert run(env, "events", "list", "--order-id", "7").stderr.strip() == "no events with order 7"


def test_orders_create_refuses_a_denomination_with_an_exponent_before_ordering(env):
    """`--denomination 1e3` would order 1000-rupee vouchers from a slip; nothing reaches the provider."""
    result = CliRunner().invoke(cli, ["orders", "create", "--product-id", "6", "--denomination", "1e3",
                                      "--quantity", "1"], env=env)
    assert result.exit_code == 2 and "written with an exponent" in result.output  # a usage error, no request


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize("bind, message", [("127.0.0.1:99999", "port 99999 is out of range: give 1 to 65535"),
                                           ("0.0.0.0:0", "port 0 is out of range: give 1 to 65535"),
                                           ("localhost", "expected HOST:PORT")])
def test_a_bad_bind_names_what_is_wrong_with_it(command, bind, message):
    result = CliRunner().invoke(cli, [command, "--bind", bind])
    assert result.exit_code == 2
    assert f"Invalid value for '--bind': {message}" in result.output


def test_vouchers_of_an_order_without_any_says_what_brings_them(client, env):
    post(client, envelope("evt_d", order_id=101))  # DELIVERED: a fetch is queued for the worker
    post(client, envelope("evt_p", "order.pending", order_id=102, status="PENDING"))
    queued = CliRunner().invoke(cli, ["vouchers", "101"], env=env)
    assert queued.exit_code == 0
    assert queued.stderr.strip() == (
        "no vouchers stored for order 101 yet: it is DELIVERED and its voucher fetch is queued; the worker "
        "fetches it (`partnerkit worker` or `partnerkit run`; `partnerkit serve` alone does not)")
    pending = CliRunner().invoke(cli, ["vouchers", "102"], env=env)
    assert pending.stderr.strip().endswith("it is PENDING; vouchers are fetched once the provider delivers it")
    assert json.loads(run(env, "vouchers", "101", "--format", "json").stdout) == []


@pytest.mark.parametrize("status", ["FAILED", "CANCELLED"])
def test_vouchers_of_a_failed_or_cancelled_order_never_come(client, env, status):
    """Not "none yet ... fetched once the provider delivers it": the provider never will."""
    post(client, envelope("evt_f", f"order.{status.lower()}", order_id=103, status=status))
    result = CliRunner().invoke(cli, ["vouchers", "103"], env=env)
    assert result.exit_code == 0
    assert result.stderr.strip() == (f"order 103 is {status}: it has no vouchers and never will "
                                     "(the provider refunds a failed or cancelled order)")


def test_a_provider_that_cannot_be_reached_is_named_by_its_base_url(config):
    env = config_as_env(replace(config, api_base_url="http://127.0.0.1:9"))  # nothing listens on port 9
    result = CliRunner().invoke(cli, ["webhooks", "list"], env=env)
    assert result.exit_code == 1
    assert result.stderr.strip() == ("Error: GET /api/v1/webhooks: connection failed before sending "
                                     "(provider at http://127.0.0.1:9, from PARTNERKIT_API_BASE_URL)")


def test_a_base_url_with_a_password_is_refused_without_showing_it(config):
    """The provider authenticates with its headers: a user:password@ in the URL is refused before any call."""
    env = config_as_env(replace(config, api_base_url="http://ops:s3cr3t-pw@127.0.0.1:9"))
    result = CliRunner().invoke(cli, ["webhooks", "list"], env=env)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: PARTNERKIT_API_BASE_URL must not carry a user name or password")
    assert "'http://***@127.0.0.1:9'" in result.stderr and "s3cr3t" not in result.output


@pytest.mark.parametrize("command", ["serve", "run"])
def test_a_receiver_refused_for_want_of_a_token_generates_no_voucher_key(config, tmp_path, command):
    env = {**config_as_env(replace(config, webhook_tokens=(), voucher_key=None)), "PARTNERKIT_WEBHOOK_TOKENS": ""}
    result = CliRunner().invoke(cli, [command, "--bind", "127.0.0.1:1"], env=env)
    assert result.exit_code == 2
    assert result.stderr.strip() == ("Error: no webhook token is accepted: set PARTNERKIT_WEBHOOK_TOKENS or run "
                                     "`partnerkit webhooks register`; the receiver refuses to start without one")
    assert not config.key_file.exists(), "no voucher key generated (and announced) for a receiver that did not start"


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize("tokens", ["", "whsec_a_token_for_a_first_start"])
def test_a_refused_start_on_a_database_that_does_not_exist_leaves_nothing_behind(config, tmp_path, command, tokens):
    """Refused for want of a token, or for a port it cannot listen on: no database, no voucher key file, no
    directory (the receiver's first start creates them; a refused one did, and a later `status` on the path
    then read an empty database instead of naming the mistake)."""
    fresh = tmp_path / "fresh" / "pk.db"
    env = {**config_as_env(replace(config, db_path=fresh, webhook_tokens=(), voucher_key=None)),
           "PARTNERKIT_WEBHOOK_TOKENS": tokens}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = CliRunner().invoke(cli, [command, "--bind", f"127.0.0.1:{taken.getsockname()[1]}"], env=env)
    assert result.exit_code == (1 if tokens else 2)
    assert ("cannot listen on 127.0.0.1" if tokens else "no webhook token is accepted") in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("group", ["events", "orders"])
def test_a_listing_cut_by_its_limit_says_so(client, env, group):
    """`events list` and `orders list` show the newest 100 by default: a table cut there said nothing,
    so 100 rows read as all there is."""
    for n in range(3):
        post(client, envelope(f"evt_cut_{n}", "order.pending", order_id=200 + n, status="PENDING"))
    cut = CliRunner().invoke(cli, [group, "list", "--limit", "2"], env=env)
    assert cut.exit_code == 0 and len(cut.stdout.splitlines()) == 3  # header and 2 rows
    assert cut.stderr.strip() == f"the newest 2 {group} are shown; --limit N shows more"
    whole = CliRunner().invoke(cli, [group, "list", "--limit", "3"], env=env)
    assert whole.exit_code == 0 and len(whole.stdout.splitlines()) == 4 and whole.stderr == ""
    for fmt in ("json", "csv"):  # a script reading stdout gets the rows alone, and the cut on stderr
        shown = CliRunner().invoke(cli, [group, "list", "--limit", "2", "--format", fmt], env=env)
        assert shown.exit_code == 0 and shown.stderr.strip() == f"the newest 2 {group} are shown; --limit N shows more"
        assert len(json.loads(shown.stdout) if fmt == "json" else shown.stdout.splitlines()[1:]) == 2
    one = CliRunner().invoke(cli, [group, "list", "--limit", "1"], env=env)  # "the newest 1 orders are shown"
    assert one.exit_code == 0 and one.stderr.strip() == f"the newest {group[:-1]} is shown; --limit N shows more"
