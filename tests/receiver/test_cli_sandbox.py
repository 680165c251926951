"""The receiver's commands against the sandbox on loopback: what an operator sees, end to end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.store import jobs, open_db
from partnerkit.vouchers import run_voucher_fetches
from receiver.app import create_app
from tests.receiver.conftest import envelope, post


@pytest.fixture
def env(sandbox_config):
    return config_as_env(sandbox_config)


def run(env, *args, code: int = 0):
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def test_webhooks_test_prints_the_answer_fields_not_a_python_repr(env):
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    table = run(env, "webhooks", "test", "1").stdout
    assert "test delivery queued" in table and "DELIVERY_ID" in table
    assert "{'" not in table and "True" not in table
    rows = run(env, "webhooks", "test", "1", "--format", "csv").stdout.splitlines()
    assert rows[0] == "webhook_id,message,delivery_id,event_id"
    assert rows[1].startswith("1,test delivery queued,")
    answer = json.loads(run(env, "webhooks", "test", "1", "--format", "json").stdout)
    assert answer["success"] is True and answer["data"]["message"] == "test delivery queued"


def test_orders_create_checks_the_voucher_key_before_the_wallet_is_debited(env, sandbox_config, sandbox_server):
    sandbox_config.key_file.parent.mkdir(parents=True, exist_ok=True)
    sandbox_config.key_file.write_text("damaged\n")  # too short to be a key: restore it from its backup
    result = run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1", code=2)
    assert "voucher key file" in result.output
    assert sandbox_server.sandbox.orders == {}, "no order placed that could not be stored"


def test_an_order_whose_vouchers_came_with_the_create_is_not_read_again(env, sandbox_config, sandbox_server):
    created = json.loads(run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "3",
                             "--format", "json").stdout)[0]
    assert created["status"] == "DELIVERED" and created["vouchers_stored"] == 3
    # The provider's order.delivered webhook arrives after the create answered: it queues a fetch.
    app = create_app(replace(sandbox_config, log_level="ERROR"))
    try:
        body = envelope("evt_created_order", order_id=created["id"], quantity=3)
        assert post(app.test_client(), body, token="bootstrap-token-for-tests").get_json() == {"status": "accepted"}
    finally:
        app.extensions["partnerkit_receiver"].close()
    db = open_db(sandbox_config.db_path)
    reads_before = sandbox_server.sandbox.calls["GET /api/v1/orders/:id"]
    with PartnerClient(sandbox_config, db) as client:
        summary = run_voucher_fetches(sandbox_config, db, client)
    assert summary.done == 1 and summary.vouchers_added == 0
    assert sandbox_server.sandbox.calls["GET /api/v1/orders/:id"] == reads_before, "no read for vouchers in hand"
    assert jobs.latest_for_orders(db, [created["id"]])[created["id"]]["state"] == "done"
    assert len(json.loads(run(env, "vouchers", str(created["id"]), "--format", "json").stdout)) == 3


def test_webhooks_retry_takes_format_like_every_other_webhooks_command(env, sandbox_server):
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")  # nothing listens there
    run(env, "webhooks", "test", "1")
    for minutes in (0, 1, 2, 4, 8):  # the document's retry schedule: 5 attempts, then failed
        sandbox_server.advance(minutes * 60 + 1)
    failed = json.loads(run(env, "webhooks", "deliveries", "--status", "failed", "--format", "json").stdout)
    assert [d["id"] for d in failed] == [1]
    table = run(env, "webhooks", "retry", "1").stdout.splitlines()
    assert table[0].split() == ["DELIVERY_ID", "MESSAGE"] and table[1].split()[0] == "1"
    sandbox_server.advance(61)  # the re-queued attempt fails again
    answer = json.loads(run(env, "webhooks", "retry", "1", "--format", "json").stdout)
    assert answer == {"message": "delivery re-queued", "delivery_id": 1}
    sandbox_server.advance(61)
    assert run(env, "webhooks", "retry", "1", "--format", "csv").stdout.splitlines() == [
        "delivery_id,message", "1,delivery re-queued"]
