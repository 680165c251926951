"""`partnerkit catalog products|operators`: where the ids `orders create --product-id` and `recharges submit
--operator-id` take come from (a new user found no command that listed them). Run in-process through click
against the sandbox; the record mapping, whose shape the document does not show, is tested directly."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.cli.catalog import operator_row, product_row, records
from partnerkit.config import config_as_env
from partnerkit.errors import MalformedResponse
from partnerkit.money import dumps
from partnerkit.store import open_db
from partnerkit.store.budget import Budget
from tests.reliability.test_cli_errors import assert_one_line_error
from tests.worker.worker_helpers import mobile


def _run(config, *args: str):
    return CliRunner().invoke(cli, list(args), env=config_as_env(config))


def _json(config, *args: str) -> list[dict]:
    result = _run(config, *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _cli_requests(config) -> int:
    database = open_db(config.db_path)
    try:
        return Budget.from_config(config, database).usage()["general"]["by_purpose"].get("cli", 0)
    finally:
        database.conn.close()


def test_products_lists_the_ids_and_denominations_orders_create_takes(sandbox_config):
    products = {p["id"]: p for p in _json(sandbox_config, "catalog", "products")}
    test_voucher = products[7]
    assert test_voucher["name"] == "Sandbox Test Voucher (code)"
    assert test_voucher["denominations"] == ["10.00", "50.00", "100.00"]  # money: 2-decimal strings
    assert (test_voucher["currency"], test_voucher["country"], test_voucher["max_quantity"]) == ("INR", "IN", 1000)
    # What it lists is what `orders create` takes.
    denomination = test_voucher["denominations"][1]
    created = _run(sandbox_config, "orders", "create", "--product-id", "7", "--denomination", denomination,
                   "--quantity", "1", "--format", "json")
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["amount"] == "50.00"


def test_operators_lists_the_ids_recharges_submit_takes(sandbox_config):
    operators = {o["name"]: o for o in _json(sandbox_config, "catalog", "operators")}
    assert operators["Vi"]["requires_circle"] is True and operators["Jio"]["requires_circle"] is False
    assert operators["MTNL"]["is_active"] is False
    open_db(sandbox_config.db_path).conn.close()  # `recharges submit` refuses a database that does not exist
    submitted = _run(sandbox_config, "recharges", "submit", "--mobile", mobile(0), "--operator-id",
                     str(operators["Jio"]["id"]), "--amount", "99", "--format", "json")
    assert submitted.exit_code == 0, submitted.output
    assert json.loads(submitted.stdout)["status"] == "SUCCESS"


def test_each_listing_is_one_request_within_the_shared_budget(sandbox_config, sandbox_server):
    _json(sandbox_config, "catalog", "products")
    _json(sandbox_config, "catalog", "operators")
    assert _cli_requests(sandbox_config) == 2
    calls = sandbox_server.sandbox.calls
    assert (calls["GET /api/v1/products"], calls["GET /api/v1/recharge/operators"]) == (1, 1)


def test_the_provider_filters_products_by_currency_and_country_in_any_case(sandbox_config):
    assert [p["id"] for p in _json(sandbox_config, "catalog", "products", "--currency", "usd")] == [4]
    assert {p["country"] for p in _json(sandbox_config, "catalog", "products", "--country", "in")} == {"IN"}
    none = _run(sandbox_config, "catalog", "products", "--currency", "INR", "--country", "US")
    assert none.exit_code == 0 and none.stdout == ""
    assert none.stderr.strip() == "the provider lists no products in INR for country US"
    assert _json(sandbox_config, "catalog", "products", "--country", "GB") == []


@pytest.mark.parametrize("args, match", [
    (["--currency", "INRR"], "'INRR' is not a currency code (3 letters, e.g. INR)"),
    (["--country", "IND"], "'IND' is not a country code (2 letters, e.g. IN)"),
])
def test_a_code_that_is_not_one_is_a_usage_error(sandbox_config, sandbox_server, args, match):
    result = _run(sandbox_config, "catalog", "products", *args)
    assert_one_line_error(result.exit_code, result.stderr, result.stdout, code=2, usage=True, match=match)
    assert "GET /api/v1/products" not in sandbox_server.sandbox.calls  # nothing was asked


def test_table_and_csv(sandbox_config):
    table = _run(sandbox_config, "catalog", "operators").stdout.splitlines()
    assert table[0].split() == ["ID", "NAME", "IS_ACTIVE", "SUPPORTS_PREPAID", "SUPPORTS_POSTPAID",
                                "SUPPORTS_SPECIAL", "REQUIRES_CIRCLE"]
    assert table[3].split() == ["3", "Vi", "yes", "yes", "yes", "yes", "yes"]
    rows = list(csv.DictReader(io.StringIO(_run(sandbox_config, "catalog", "products", "--format", "csv").stdout)))
    amazon = next(row for row in rows if row["id"] == "1")
    assert amazon["denominations"] == "100.00,250.00,500.00,1000.00,2000.00"
    assert (amazon["category_id"], amazon["is_active"]) == ("1", "yes")


def test_an_answer_that_is_not_json_is_one_line_with_exit_1(sandbox_config, sandbox_server):
    operators = "GET /api/v1/recharge/operators"  # in the sandbox's `recharges` scope, not `catalog`
    sandbox_server.sandbox.settings.faults = {"malformed_json": {"scope": ["catalog", operators]}}
    for what, path in (("products", "/api/v1/products"), ("operators", "/api/v1/recharge/operators")):
        result = _run(sandbox_config, "catalog", what)
        assert_one_line_error(result.exit_code, result.stderr, result.stdout, code=1,
                              match=f"GET {path}: HTTP 200 body is not JSON")


# --- the records, whose shape the document does not show ------------------------------------------

@pytest.mark.parametrize("body", [
    [{"id": 1}],
    {"data": [{"id": 1}]},
    {"success": True, "data": [{"id": 1}]},
    {"success": True, "data": {"products": [{"id": 1}], "total": 1}},
    {"products": [{"id": 1}]},
    {"items": [{"id": 1}]},
])
def test_a_list_is_read_bare_or_in_an_envelope(body):
    assert records(body, "product") == [{"id": 1}]


@pytest.mark.parametrize("body, got", [({"data": {"id": 1}}, "an object with id"), ("text", "str"), (None, "NoneType")])
def test_an_answer_without_a_list_is_malformed(body, got):
    with pytest.raises(MalformedResponse, match=f"the provider's operator list is not a JSON array of records "
                                                f"\\(got {got}\\)"):
        records(body, "operator")


def test_a_record_is_read_by_its_names_and_their_aliases():
    row = product_row({"product_id": 9, "product_name": "Gift", "country_code": "IN",
                       "denominations": [{"value": "100.00"}, Decimal("250"), 500, "n/a"]})
    assert (row["id"], row["name"], row["country"], row["vendor"]) == (9, "Gift", "IN", None)
    assert row["denominations"] == [Decimal("100.00"), Decimal("250"), Decimal(500), "n/a"]  # never rounded into one
    assert json.loads(dumps(row["denominations"])) == ["100.00", "250.00", "500.00", "n/a"]  # as JSON prints them
    assert operator_row({"operator_id": 3, "operator_name": "Vi", "country": "IN"})["country_code"] == "IN"
    assert operator_row({"id": 3, "operator_id": 4})["id"] == 3  # the record's own name first
