"""One database serves one provider account (finding 4: two API keys of two accounts sharing a database
reported each other's money as drifts, and a full read withdrew the other's transactions).

The sandbox on loopback with its seeded clients alpha (wallets 1 and 2) and beta (wallet 3), real SQLite
files in tmp_path, the real CLI in process; pytest-httpserver for a provider whose wallet list shows no id.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest
import requests
from click.testing import CliRunner

from partnerkit.account import ADOPT, CANNOT_TELL, OTHER_ACCOUNT, SAME, judge
from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import Config, config_as_env, load_config
from partnerkit.errors import AccountCheckFailed, AccountMismatch, is_ambiguous
from partnerkit.store import open_db
from partnerkit.store import account as account_store
from partnerkit.timeutil import utcnow
from tests.client.client_payloads import FAST
from tests.receiver.servers import PARTNERKIT, free_port
from tests.reliability.test_cli_errors import assert_one_line_error
from tests.worker.worker_helpers import mobile

OTHER = "belongs to another provider account than the one this database serves"


def settings(server, tmp_path, name: str, **overrides: str) -> Config:
    """A configuration for the sandbox's client `name`, on the one database in tmp_path."""
    client = next(c for c in server.clients if c.name == name)
    return load_config(environ={
        "PARTNERKIT_DB": str(tmp_path / "shared.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
        "PARTNERKIT_API_KEY": client.key, "PARTNERKIT_API_SECRET": client.secret,
        "PARTNERKIT_REPORT_DIR": str(tmp_path / f"reports-{name}"), "PARTNERKIT_LOG_LEVEL": "ERROR",
        "PARTNERKIT_VOUCHER_KEY": "tests-only-voucher-key-0123456789", **overrides})


def cli_run(config: Config, *args: str):
    result = CliRunner().invoke(cli, list(args), env={"PARTNERKIT_CONFIG": None, **config_as_env(config)})
    assert "Traceback" not in result.output
    return result


@pytest.mark.parametrize("account_wallets, has_account, key_wallets, verdict", [
    (set(), False, {"1", "2"}, ADOPT),          # an empty database adopts the first key's account
    (set(), False, set(), ADOPT),               # ... even one whose list shows no wallet yet
    ({"1", "2"}, True, {"2"}, SAME),            # a rotated key: a wallet in common
    ({"1", "2"}, True, {"1", "2", "7"}, SAME),  # ... and a wallet opened since
    ({"1", "2"}, False, {"1"}, SAME),           # an upgraded database: wallets from its newest snapshot
    ({"1", "2"}, True, {"3"}, OTHER_ACCOUNT),   # none in common: another account
    ({"1", "2"}, False, {"3"}, OTHER_ACCOUNT),
    ({"1", "2"}, True, set(), CANNOT_TELL),     # the list shows no id to compare
    (set(), True, {"3"}, CANNOT_TELL),          # the account's own list showed none
])
def test_judge_follows_the_table(account_wallets, has_account, key_wallets, verdict):
    assert judge(account_wallets, has_account, key_wallets) == verdict


def test_a_second_account_is_refused_before_it_sends_or_stores_anything(sandbox_server, tmp_path):
    alpha, beta = settings(sandbox_server, tmp_path, "alpha"), settings(sandbox_server, tmp_path, "beta")
    today = utcnow().date().isoformat()
    db = open_db(alpha.db_path)  # created beforehand, as submit refuses a missing database (exit 2, no account read)
    assert cli_run(alpha, "recharges", "submit", "--mobile", "9811111110", "--operator-id", "1",
                   "--amount", "111").exit_code == 0
    tables = ("recharges", "order_intents", "budget_events", "transactions", "transaction_quarantine", "drifts",
              "wallet_snapshots", "sync_walks", "orders", "webhook_tokens")
    stored = {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in tables}
    calls = dict(sandbox_server.sandbox.calls)

    for args in (["recharges", "submit", "--mobile", "9822222220", "--operator-id", "1", "--amount", "222"],
                 ["orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1"],
                 ["reconcile", "--date", today],
                 ["webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner"],
                 ["orders", "sync"]):
        result = cli_run(beta, *args)
        assert_one_line_error(result.exit_code, result.stderr, result.stdout, code=2, match=OTHER)
        assert "the key's wallets: 3; this database's: 1, 2" in result.stderr, args
    # The worker refuses at start, before any job runs (a real process, as it runs in production).
    worker = subprocess.run([PARTNERKIT, "worker", "--once"], capture_output=True, text=True, timeout=60,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")},
                                 **config_as_env(beta)})
    assert_one_line_error(worker.returncode, worker.stderr, worker.stdout, code=2, match=OTHER)
    # Each refusal cost one wallet read, and sent nothing else; nothing was stored but that read's budget entry.
    assert {k: v - calls.get(k, 0) for k, v in sandbox_server.sandbox.calls.items() if v != calls.get(k, 0)} == \
        {"GET /api/v1/wallets": 6}
    after = {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in stored}
    assert after == {**stored, "budget_events": stored["budget_events"] + 6}
    assert not (tmp_path / "reports-beta").exists()
    assert [k["how"] for k in account_store.keys(db)] == ["adopted"]

    # Alpha's day reads as alpha's alone: no drift, nothing withdrawn (beta's money never entered).
    assert cli_run(beta, "recharges", "submit", "--mobile", "9822222220", "--operator-id", "1",
                   "--amount", "222").exit_code == 2
    requests.post(f"{sandbox_server.base_url}/sandbox/wallets/topup", timeout=5,
                  json={"client": "beta", "currency": "INR", "amount": "10.00"}).raise_for_status()
    assert cli_run(alpha, "reconcile", "--date", today).exit_code == 0
    assert json.loads(cli_run(alpha, "drifts", "list", "--format", "json").stdout) == []
    assert db.execute("SELECT COUNT(*) FROM transaction_quarantine").fetchone()[0] == 0
    db.conn.close()


def test_run_refuses_another_accounts_key_before_the_receiver_starts(sandbox_server, tmp_path):
    alpha = settings(sandbox_server, tmp_path, "alpha")
    beta = settings(sandbox_server, tmp_path, "beta", PARTNERKIT_WEBHOOK_TOKENS="whsec_tests_only_token_1")
    assert cli_run(alpha, "orders", "sync").exit_code == 0
    port = free_port()
    done = subprocess.run([PARTNERKIT, "run", "--bind", f"127.0.0.1:{port}", "--workers", "1"], capture_output=True,
                          text=True, timeout=60, env={**{k: v for k, v in os.environ.items()
                                                         if not k.startswith("PARTNERKIT_")}, **config_as_env(beta)})
    assert_one_line_error(done.returncode, done.stderr, done.stdout, code=2, match=OTHER)
    assert "partnerkit receiver on" not in done.stderr  # refused before the receiver was started


def test_a_rotated_key_of_the_same_account_is_taken_on_its_first_call(sandbox_server, tmp_path):
    alpha = settings(sandbox_server, tmp_path, "alpha")
    open_db(alpha.db_path).conn.close()  # submit refuses a missing database
    assert cli_run(alpha, "recharges", "submit", "--mobile", mobile(0), "--operator-id", "1",
                   "--amount", "50").exit_code == 0
    issued = requests.post(f"{sandbox_server.base_url}/sandbox/clients/alpha/keys", json={}, timeout=5)
    assert issued.status_code == 201
    new_key, new_secret = issued.json()["key"], issued.json()["secret"]
    requests.delete(f"{sandbox_server.base_url}/sandbox/clients/alpha/keys/{alpha.api_key}",
                    timeout=5).raise_for_status()
    rotated = settings(sandbox_server, tmp_path, "alpha", PARTNERKIT_API_KEY=new_key,
                       PARTNERKIT_API_SECRET=new_secret)
    assert cli_run(alpha, "orders", "sync").exit_code == 1  # the old key is revoked: the provider's 401

    wallet_reads = sandbox_server.sandbox.calls["GET /api/v1/wallets"]
    for amount in ("60", "70"):  # no manual step; only the new key's first call reads the wallets
        result = cli_run(rotated, "recharges", "submit", "--mobile", mobile(0), "--operator-id", "1",
                         "--amount", amount)
        assert result.exit_code == 0, result.output
    assert sandbox_server.sandbox.calls["GET /api/v1/wallets"] == wallet_reads + 1
    shown = json.loads(cli_run(rotated, "account", "show", "--format", "json").stdout)
    assert [w["wallet_id"] for w in shown["wallets"]] == ["1", "2"]
    assert [(k["how"], k["configured"]) for k in shown["keys"]] == [("adopted", False), ("wallets", True)]
    assert shown["configured_key"] == "known"
    assert new_key not in json.dumps(shown) and new_secret not in json.dumps(shown)


def test_a_wallet_the_account_opens_later_is_its_own(sandbox_server, tmp_path):
    alpha = settings(sandbox_server, tmp_path, "alpha")
    db = open_db(alpha.db_path)
    with PartnerClient(alpha, db, retry=FAST) as client:
        client.list_wallets()
        requests.post(f"{sandbox_server.base_url}/sandbox/wallets/topup", timeout=5,
                      json={"client": "alpha", "currency": "EUR", "amount": "5.00"}).raise_for_status()
        client.list_wallets()
    assert [(w["wallet_id"], w["currency"]) for w in account_store.wallets(db)] == [("1", "INR"), ("2", "USD"),
                                                                                  ("5", "EUR")]
    db.conn.close()


def test_two_accounts_racing_for_an_empty_database_one_adopts_it(sandbox_server, tmp_path):
    """The check and the adoption are one IMMEDIATE transaction: two processes cannot both adopt."""
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def first_call(name: str) -> None:
        config = settings(sandbox_server, tmp_path, name)
        db = open_db(config.db_path)  # one connection per thread, as per process
        try:
            with PartnerClient(config, db, retry=FAST) as client:
                barrier.wait(30)  # the other thread's client built on a busy machine
                client.check_account()
            outcomes[name] = "taken"
        except AccountMismatch as exc:
            outcomes[name] = exc.reason
        finally:
            db.conn.close()

    threads = [threading.Thread(target=first_call, args=(name,)) for name in ("alpha", "beta")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes.values()) == ["other_account", "taken"]


def test_the_python_client_raises_account_mismatch_with_the_wallets(sandbox_server, tmp_path):
    alpha, beta = settings(sandbox_server, tmp_path, "alpha"), settings(sandbox_server, tmp_path, "beta")
    db = open_db(alpha.db_path)
    with PartnerClient(alpha, db, retry=FAST) as client:
        client.list_recharges()
    with PartnerClient(beta, db, retry=FAST) as client:
        with pytest.raises(AccountMismatch, match=OTHER) as info:
            client.get_order(5001)  # a raw read: the guard runs before every first call
        with pytest.raises(AccountMismatch):
            client.submit_recharge(mobile_number="9833333330", operator_id=1, amount=10, idempotency_key="k" * 16)
    assert (info.value.reason, info.value.key_wallets, info.value.account_wallets) == ("other_account", ("3",),
                                                                                      ("1", "2"))
    assert sandbox_server.sandbox.calls["GET /api/v1/orders/:id"] == 0
    assert sandbox_server.sandbox.calls["POST /api/v1/recharges"] == 0
    db.conn.close()


def test_a_database_without_a_client_database_is_not_guarded(sandbox_server, tmp_path):
    """PartnerClient(config) keeps an in-memory budget and stores nothing: no account to mix, no wallet read."""
    with PartnerClient(settings(sandbox_server, tmp_path, "beta"), retry=FAST) as client:
        client.list_recharges()
    assert sandbox_server.sandbox.calls["GET /api/v1/wallets"] == 0


# --- a provider whose wallet list shows no id (its shape is not in the document) -----------------

@pytest.fixture
def no_ids(httpserver, tmp_path):
    """Config factory for keys of a provider answering GET /wallets without wallet ids."""
    httpserver.expect_request("/api/v1/wallets").respond_with_json([{"currency": "INR", "balance": "10.00"}])
    httpserver.expect_request("/api/v1/recharges").respond_with_json([])

    def config(key: str) -> Config:
        return Config(db_path=tmp_path / "pk.db", api_base_url=httpserver.url_for("/").rstrip("/"), api_key=key,
                      api_secret="s3cret-for-tests", http_timeout_s=2)
    return config


def test_a_key_the_wallet_list_cannot_tell_is_refused_until_trusted(no_ids):
    first, rotated = no_ids("pk_first_key"), no_ids("pk_rotated_key")
    db = open_db(first.db_path)
    with PartnerClient(first, db, retry=FAST) as client:
        client.list_recharges()  # adopted: an empty database, whatever the list shows
    with PartnerClient(rotated, db, retry=FAST) as client:
        with pytest.raises(AccountMismatch, match="cannot tell whether it is the account") as info:
            client.list_recharges()
        assert info.value.reason == "cannot_tell"
    result = cli_run(rotated, "recharges", "submit", "--mobile", "9811111110", "--operator-id", "1", "--amount", "10")
    assert_one_line_error(result.exit_code, result.stderr, result.stdout, code=2,
                          match="run `partnerkit account trust-key`")
    trusted = cli_run(rotated, "account", "trust-key")
    assert trusted.exit_code == 0 and "now trusted" in trusted.stderr
    with PartnerClient(rotated, db, retry=FAST) as client:
        client.list_recharges()
    assert [k["how"] for k in account_store.keys(db)] == ["adopted", "trusted"]
    assert cli_run(rotated, "account", "trust-key").stderr.startswith("PARTNERKIT_API_KEY was already known")
    db.conn.close()


def test_trust_key_never_takes_another_accounts_key(sandbox_server, tmp_path):
    alpha, beta = settings(sandbox_server, tmp_path, "alpha"), settings(sandbox_server, tmp_path, "beta")
    assert cli_run(alpha, "orders", "sync").exit_code == 0
    result = cli_run(beta, "account", "trust-key")
    assert_one_line_error(result.exit_code, result.stderr, result.stdout, code=2, match=OTHER)


def test_a_failed_wallet_read_before_a_write_is_not_the_writes_failure(httpserver, tmp_path):
    """A 500 of the account check must not read as a submit whose outcome is unknown (it was never sent)."""
    httpserver.expect_request("/api/v1/wallets").respond_with_json({"error": {"message": "boom"}}, status=500)
    config = Config(db_path=tmp_path / "pk.db", api_base_url=httpserver.url_for("/").rstrip("/"),
                    api_key="pk_new_key", api_secret="s3cret-for-tests", http_timeout_s=2)
    db = open_db(config.db_path)
    with PartnerClient(config, db, retry=FAST, sleep=lambda s: None) as client:
        with pytest.raises(AccountCheckFailed, match="POST /recharges was not sent") as info:
            client.submit_recharge(mobile_number="9811111110", operator_id=1, amount=10, idempotency_key="k" * 16)
    assert not is_ambiguous(info.value) and info.value.retryable
    assert all(entry[0].path == "/api/v1/wallets" for entry in httpserver.log)
    assert account_store.keys(db) == []
    db.conn.close()


def test_account_show_on_a_database_that_serves_no_account_yet(tmp_path):
    config = Config(db_path=tmp_path / "pk.db", api_key="pk_some_key")
    open_db(config.db_path).conn.close()
    result = cli_run(config, "account", "show")
    assert result.exit_code == 0 and "serves no provider account yet" in result.stderr
    shown = json.loads(cli_run(config, "account", "show", "--format", "json").stdout)
    assert shown == {"wallets": [], "keys": [], "configured_key_known": False, "configured_key": "not checked yet"}


def test_a_refused_key_met_by_the_wallet_read_before_a_write_is_explained_as_a_refused_key(httpserver, tmp_path):
    httpserver.expect_request("/api/v1/wallets").respond_with_json({"error": {"name": "Unauthorized",
                                                                            "message": "invalid API credentials"}},
                                                                  status=401)
    config = Config(db_path=tmp_path / "pk.db", api_base_url=httpserver.url_for("/").rstrip("/"),
                    api_key="pk_revoked_key", api_secret="s3cret-for-tests", http_timeout_s=2)
    result = cli_run(config, "webhooks", "delete", "12")
    assert_one_line_error(result.exit_code, result.stderr, result.stdout, code=1,
                          match="DELETE /webhooks/12 was not sent: the wallet read")
    assert "the provider refused PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET" in result.stderr
    assert [entry[0].path for entry in httpserver.log] == ["/api/v1/wallets"]
