"""`--format json`: a command that reports one thing prints one JSON object, a listing a JSON array.

Every command with a `--format` option is in exactly one of the two tables below (a new command
fails `test_every_command_with_a_format_is_in_one_table` until it is added); then each command is
run against the sandbox and its JSON checked for that shape. An array of one object, which
`webhooks register`, `webhooks delete`, `orders create` and `orders sync` used to print, fails.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.cli.output import emit, emit_one
from partnerkit.config import config_as_env
from partnerkit.store import open_db
from partnerkit.timeutil import utcnow
from tests.reliability.test_cli_errors import leaves
from tests.worker.worker_helpers import mobile

ONE_OBJECT = {("account", "show"), ("drifts", "show"), ("keys", "status"), ("orders", "close"), ("orders", "create"), ("orders", "show"), ("orders", "sync"), ("recharges", "close"), ("recharges", "locate"),
              ("recharges", "quote"), ("recharges", "show"), ("recharges", "submit"), ("report",), ("status",), ("webhooks", "delete"),
              ("webhooks", "register"), ("webhooks", "retry"), ("webhooks", "stats"), ("webhooks", "test"),
              ("webhooks", "update"), ("transactions", "show")}
LISTING = {("budget", "show"), ("catalog", "operators"), ("catalog", "products"), ("config",), ("drifts", "history"), ("drifts", "list"), ("events", "list"), ("orders", "list"),
           ("recharges", "list"), ("vouchers",), ("webhooks", "deliveries"), ("webhooks", "list"), ("worker",),
           ("transactions", "list")}


def test_every_command_with_a_format_is_in_one_table():
    with_format = {path for path, command in leaves()
                   if any("--format" in getattr(p, "opts", ()) for p in command.params)}
    assert ONE_OBJECT.isdisjoint(LISTING)
    assert with_format == ONE_OBJECT | LISTING


def test_each_command_prints_its_shape_in_json(sandbox_config, sandbox_server):
    env = config_as_env(sandbox_config)
    printed: dict[tuple[str, ...], object] = {}

    def run(*args: str) -> object:
        result = CliRunner().invoke(cli, [*args, "--format", "json"], env=env, catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output)
        path = next(p for p in ONE_OBJECT | LISTING if tuple(args[:len(p)]) == p)
        printed[path] = value = json.loads(result.stdout)
        shape = dict if path in ONE_OBJECT else list
        assert isinstance(value, shape), f"`{' '.join(path)}` printed a {type(value).__name__}: {value!r}"
        return value

    open_db(sandbox_config.db_path).conn.close()  # `orders create` and `recharges submit` refuse a missing one
    run("catalog", "products")
    run("catalog", "operators")
    order = run("orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1")
    run("orders", "show", str(order["id"]))
    run("orders", "sync")
    run("orders", "list")
    run("vouchers", str(order["id"]))
    run("keys", "status")
    run("events", "list")
    run("recharges", "quote", "--operator-id", "1", "--amount", "75")
    run("recharges", "submit", "--mobile", mobile(5), "--operator-id", "1", "--amount", "75")
    run("recharges", "show", "1")
    run("recharges", "locate", "--local-id", "1")
    run("recharges", "list")
    run("status")
    budget = run("budget", "show")
    assert [row["class"] for row in budget] == ["general", "order_create"] and budget[0]["used"] >= 1
    account = run("account", "show")
    assert [w["wallet_id"] for w in account["wallets"]] == ["1", "2"] and account["configured_key"] == "known"
    run("config")
    today = utcnow().date().isoformat()
    synced = CliRunner().invoke(cli, ["reconcile", "--date", today], env=env)  # `report` needs a day read in full
    assert synced.exit_code == 0, synced.output
    run("report", "--date", today)
    run("drifts", "list")
    debits = run("transactions", "list", "--date", today)
    assert {t["type"] for t in debits} >= {"RECHARGE", "ORDER"}
    run("transactions", "show", debits[-1]["id"])
    # Last, as it moves the sandbox's clock 15 minutes on: before the order and the recharge, it put them on the
    # next day from 23:45 UTC, and `transactions list --date` of our day found only the top-up.
    run("webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")  # nothing listens there
    run("webhooks", "test", "1")
    run("webhooks", "update", "1", "--name", "renamed")
    for minutes in (0, 1, 2, 4, 8):  # the document's retry schedule: 5 attempts, then failed
        sandbox_server.advance(minutes * 60 + 1)
    run("webhooks", "stats")
    run("webhooks", "deliveries")
    run("webhooks", "retry", "1")
    run("webhooks", "list")
    run("webhooks", "delete", "1")

    # Need a drift / run every job / a lost answer (tests/worker/test_close.py, tests/receiver/test_order_close.py):
    # their own tests.
    not_run = {("drifts", "history"), ("drifts", "show"), ("orders", "close"), ("recharges", "close"), ("worker",)}
    assert set(printed) == (ONE_OBJECT | LISTING) - not_run
    assert printed[("orders", "create")]["id"] == order["id"] == printed[("orders", "show")]["id"]
    assert printed[("orders", "show")]["held"] == []  # why records of it are held: nothing here
    assert printed[("webhooks", "delete")] == {"id": 1, "deleted_at_provider": True, "token_forgotten": True}
    # Times are UTC with a Z suffix in every command, the provider's records included (`webhooks list`
    # and `deliveries` printed "+00:00" while `webhooks update` and every local listing printed "Z").
    assert printed[("webhooks", "list")][0]["created_at"].endswith("Z")
    assert "+00:00" not in json.dumps(list(printed.values()))


def _emitted(capsys, *args, **kwargs) -> str:
    emit_one(*args, **kwargs)
    return capsys.readouterr().out


@pytest.mark.parametrize("json_value", [None, ["an", "array"], "text", 7])
def test_an_answer_that_is_not_an_object_prints_the_record_instead(capsys, json_value):
    # `webhooks test` and `update` print the provider's answer as it came; its shape is not in the
    # document, and whatever it is, the command still prints one object.
    record = {"webhook_id": 1, "response": json_value}
    assert json.loads(_emitted(capsys, record, "json", json_value=json_value)) == record


def test_an_answer_that_is_an_object_is_printed_as_it_came(capsys):
    answer = {"success": True, "data": {"message": "queued"}}
    assert json.loads(_emitted(capsys, {"webhook_id": 1, "message": "queued"}, "json", json_value=answer)) == answer


def test_one_record_is_one_row_in_a_table_or_csv_or_the_rows_given(capsys):
    record = {"id": 5, "events": ["order.delivered", "order.failed"], "active": True}
    assert _emitted(capsys, record, "csv").splitlines() == ["id,events,active", '5,"order.delivered,order.failed",yes']
    assert _emitted(capsys, record, "table").split() == ["ID", "EVENTS", "ACTIVE", "5",
                                                         "order.delivered,order.failed", "yes"]
    assert _emitted(capsys, record, "csv", columns=["id"]).splitlines() == ["id", "5"]
    fields = [{"field": k, "value": v} for k, v in record.items()]
    assert _emitted(capsys, record, "csv", rows=fields, columns=["field", "value"]).splitlines() == [
        "field,value", "id,5", 'events,"order.delivered,order.failed"', "active,yes"]
    assert json.loads(_emitted(capsys, record, "json", rows=fields, columns=["field", "value"])) == record


def test_a_listing_of_one_is_still_an_array(capsys):
    emit([{"id": 1}], ["id"], "json")
    assert json.loads(capsys.readouterr().out) == [{"id": 1}]
