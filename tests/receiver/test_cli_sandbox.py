"""The receiver's commands against the sandbox on loopback: what an operator sees, end to end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import requests
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.cli.webhooks import ORDER_EVENTS
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.crypto import load_cipher
from partnerkit.store import jobs, open_db, webhook_tokens
from partnerkit.vouchers import run_voucher_fetches
from receiver.app import create_app
from receiver.tokens import saved_tokens
from tests.receiver.conftest import envelope, post


@pytest.fixture
def env(sandbox_config):
    return config_as_env(sandbox_config)


@pytest.fixture
def existing_db(sandbox_config):
    """The database, created before the command as the worker's first start would: `orders create` refuses a
    missing one (exit 2), and any other command that creates it says so first on stderr."""
    database = open_db(sandbox_config.db_path)
    yield database
    database.conn.close()


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


def test_orders_create_checks_the_voucher_key_before_the_wallet_is_debited(env, sandbox_config, sandbox_server,
                                                                           existing_db):
    sandbox_config.key_file.parent.mkdir(parents=True, exist_ok=True)
    sandbox_config.key_file.write_text("damaged\n")  # too short to be a key: restore it from its backup
    result = run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1", code=2)
    assert "voucher key file" in result.output
    assert sandbox_server.sandbox.orders == {}, "no order placed that could not be stored"
    # The same for a webhook: its token comes back once, and one that cannot be stored is lost.
    result = run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner", code=2)
    assert "voucher key file" in result.output and "Traceback" not in result.output
    assert sandbox_server.sandbox.webhooks == {}, "no webhook created whose token could not be stored"


def test_an_order_whose_vouchers_came_with_the_create_is_not_read_again(env, sandbox_config, sandbox_server,
                                                                        existing_db):
    created = json.loads(run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "3",
                             "--format", "json").stdout)
    assert created["status"] == "DELIVERED" and created["vouchers_stored"] == 3
    # The provider's order.delivered webhook arrives after the create answered: it queues a fetch.
    app = create_app(replace(sandbox_config, log_level="ERROR"))
    try:
        # Its facts are the order's own (an event of another order under its id is kept but not applied).
        event = json.loads(envelope("evt_created_order", order_id=created["id"], quantity=3))
        placed = sandbox_server.sandbox.orders[created["id"]].placed_at.isoformat()
        event["data"].update(reference_code=created["ref"], denomination="10.00", created_at=placed)
        body = json.dumps(event).encode()
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


def test_webhooks_delete_removes_it_at_the_provider_and_forgets_its_token(env, sandbox_config, sandbox_server):
    env = {**env, "PARTNERKIT_WEBHOOK_TOKENS": ""}  # empty counts as unset: only saved tokens are accepted
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner", "--name", "second", "--again")
    result = run(env, "webhooks", "delete", "1", "--format", "json")
    assert json.loads(result.stdout) == {"id": 1, "deleted_at_provider": True, "token_forgotten": True}
    assert "deleted at the provider" in result.stderr and "no webhook token is accepted" not in result.stderr
    assert sorted(sandbox_server.sandbox.webhooks) == [2]
    listed = json.loads(run(env, "webhooks", "list", "--format", "json").stdout)
    assert [(w["id"], w["token_saved"]) for w in listed] == [(2, True)]
    # Again: the provider answers 404 and nothing is saved: one line, exit 1, no traceback.
    again = run(env, "webhooks", "delete", "1", code=1)
    assert "no such webhook and no token of it is saved" in again.output and "Traceback" not in again.output
    # The last token: deleted, and the operator is told the receiver now accepts nothing.
    last = run(env, "webhooks", "delete", "2")
    assert "no webhook token is accepted any more" in last.stderr
    assert last.stdout.split() == ["ID", "DELETED_AT_PROVIDER", "TOKEN_FORGOTTEN", "2", "yes", "yes"]


def test_webhooks_delete_forgets_the_token_of_a_webhook_the_provider_no_longer_has(env, sandbox_server):
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    sandbox_server.sandbox.webhooks.clear()  # deleted at the provider by someone else
    result = run(env, "webhooks", "delete", "1", "--format", "csv")
    assert result.stdout.splitlines() == ["id,deleted_at_provider,token_forgotten", "1,no,yes"]
    assert "already gone at the provider" in result.stderr
    assert json.loads(run(env, "webhooks", "list", "--format", "json").stdout) == []


def test_webhooks_update_changes_it_at_the_provider_and_the_details_saved_with_its_token(env, sandbox_config,
                                                                                          sandbox_server):
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    hook = sandbox_server.sandbox.webhooks[1]
    token = hook.token
    result = run(env, "webhooks", "update", "1", "--name", "renamed", "--url", "https://127.0.0.1:8/webhooks/partner",
                 "--events", "order.delivered", "--events", "order.failed", "--inactive", "--format", "json")
    answer = json.loads(result.stdout)  # the provider's answer as it came
    assert (answer["id"], answer["name"], answer["events"], answer["is_active"]) == (
        1, "renamed", ["order.delivered", "order.failed"], False)
    assert (hook.name, hook.url, hook.events, hook.is_active) == (
        "renamed", "https://127.0.0.1:8/webhooks/partner", ["order.delivered", "order.failed"], False)
    assert "updated at the provider" in result.stderr and "--active" in result.stderr
    db = open_db(sandbox_config.db_path)
    saved, = webhook_tokens.listing(db)
    assert (saved["name"], saved["url"], saved["events"]) == (
        "renamed", "https://127.0.0.1:8/webhooks/partner", ["order.delivered", "order.failed"])
    accepted = saved_tokens(db, load_cipher(sandbox_config))
    assert [(t.webhook_id, t.token) for t in accepted] == [("1", token)]  # the token itself is untouched
    # One field at a time; table and csv print the answer's fields like `webhooks test` does.
    table = run(env, "webhooks", "update", "1", "--active").stdout.splitlines()
    assert table[0].split()[:3] == ["WEBHOOK_ID", "ID", "NAME"] and "yes" in table[1].split()
    assert hook.is_active is True and hook.name == "renamed"
    rows = run(env, "webhooks", "update", "1", "--name", "third", "--format", "csv").stdout.splitlines()
    assert rows[0].startswith("webhook_id,id,name,url,events,is_active") and rows[1].startswith("1,1,third,")
    assert webhook_tokens.listing(db)[0]["name"] == "third"


def test_webhooks_update_of_a_webhook_without_a_saved_token_saves_nothing(env, sandbox_config, sandbox_server):
    db = open_db(sandbox_config.db_path)
    with PartnerClient(sandbox_config, db) as client:  # registered elsewhere: its token was never saved here
        created = client.create_webhook(name="elsewhere", url="https://127.0.0.1:9/x", events=["order.failed"])
    result = run(env, "webhooks", "update", str(created.id), "--events", "order.delivered")
    assert sandbox_server.sandbox.webhooks[created.id].events == ["order.delivered"]
    assert "saved with its token" not in result.stderr
    assert webhook_tokens.listing(db) == []


@pytest.mark.parametrize("args, code, match", [
    ([], 2, "give at least one of --name, --url, --events, --active/--inactive"),
    (["--url", "http://partner.example.com/webhooks/partner"], 1,
     "--url is plain HTTP, and the provider delivers to HTTPS URLs only"),
    (["--name", ""], 1, "webhook 1 not updated: HTTP 400"),
])
def test_webhooks_update_refusals_are_one_line_and_change_nothing(env, sandbox_server, args, code, match):
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    result = run(env, "webhooks", "update", "1", *args, code=code)
    assert match in result.stderr.strip().splitlines()[-1] and "Traceback" not in result.output
    hook = sandbox_server.sandbox.webhooks[1]
    assert (hook.name, hook.url, hook.updated_at) == ("partnerkit", "https://127.0.0.1:9/webhooks/partner", None)


def test_webhooks_update_of_an_unknown_webhook_is_one_line_with_exit_1(env, sandbox_server, existing_db):
    result = run(env, "webhooks", "update", "424242", "--name", "x", code=1)
    assert result.stderr.strip().splitlines() == [
        "Error: webhook 424242: the provider has no such webhook (`partnerkit webhooks list` shows yours)"]


def test_webhook_events_are_a_json_array_and_joined_text_in_tables(env):
    events = ["order.delivered", "order.failed"]
    args = ["--url", "https://127.0.0.1:9/webhooks/partner", "--events", events[0], "--events", events[1]]
    registered = json.loads(run(env, "webhooks", "register", *args, "--format", "json").stdout)
    assert registered == {"id": 1, "name": "partnerkit", "url": "https://127.0.0.1:9/webhooks/partner",
                          "events": events}
    listed, = json.loads(run(env, "webhooks", "list", "--format", "json").stdout)
    assert listed["events"] == events
    assert run(env, "webhooks", "register", *args, "--again", "--format", "csv").stdout.splitlines() == [
        "id,name,url,events", '2,partnerkit,https://127.0.0.1:9/webhooks/partner,"order.delivered,order.failed"']
    table = run(env, "webhooks", "list").stdout.splitlines()
    assert [line.split()[3] for line in table[1:]] == ["order.delivered,order.failed"] * 2


def test_webhooks_stats_in_json_is_one_object_like_status(env, sandbox_server):
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")  # nothing listens there
    run(env, "webhooks", "test", "1")
    sandbox_server.advance(1)
    stats = json.loads(run(env, "webhooks", "stats", "--format", "json").stdout)
    assert isinstance(stats, dict) and set(stats) == {
        "total_count", "pending_count", "delivered_count", "failed_count", "last_24h_total", "last_24h_delivered",
        "last_24h_failed"}
    assert stats["total_count"] == stats["last_24h_total"] == 1
    assert run(env, "webhooks", "stats", "--format", "csv").stdout.splitlines()[1].startswith("1,")


def test_a_url_off_the_receivers_path_is_warned_about(env):
    """The receiver answers 404 on any other path: a typo in --url lost every delivery in silence."""
    registered = run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/hooks")
    assert ("warning: the URL's path /hooks is not PARTNERKIT_WEBHOOK_PATH (/webhooks/partner): the receiver "
            "answers 404 there unless a proxy in front of it rewrites the path") in registered.stderr
    updated = run(env, "webhooks", "update", "1", "--url", "https://127.0.0.1:9/webhook/partner")
    assert "warning: the URL's path /webhook/partner is not PARTNERKIT_WEBHOOK_PATH" in updated.stderr
    fine = run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    assert "warning" not in fine.stderr
    renamed = run(env, "webhooks", "update", "1", "--name", "renamed")
    assert "warning" not in renamed.stderr


def test_registering_the_same_url_again_has_nothing_to_do_unless_again(env, sandbox_server, existing_db):
    """Running the README's flow a second time registered a second webhook to the same receiver, and only
    warned afterwards: every event then came twice (absorbed as duplicates, but each delivery counted). Then it
    was refused as a usage error (exit 2, a Usage banner), which failed a setup meant to be re-runnable: the
    webhook is there and its token saved, so there is nothing to do (exit 0, the webhook printed)."""
    url = "https://127.0.0.1:9/webhooks/partner"
    first = json.loads(run(env, "webhooks", "register", "--url", url, "--format", "json").stdout)
    second = run(env, "webhooks", "register", "--url", url, "--format", "json")
    assert json.loads(second.stdout) == first  # the same shape as a register's, naming the webhook there
    assert second.stderr.strip().splitlines() == [
        f"webhook 1 is already registered for {url} and the receiver accepts its deliveries (its token is saved "
        "here): nothing to do; --again registers another webhook all the same (each event then arrives twice)"]
    assert sorted(sandbox_server.sandbox.webhooks) == [1], "nothing created"
    # The same receiver written another way: scheme and host in another case, the scheme's default port.
    shouted = run(env, "webhooks", "register", "--url", "HTTPS://127.0.0.1:9/webhooks/partner")
    assert shouted.stderr.startswith(f"webhook 1 is already registered for {url} ")
    assert shouted.stdout.splitlines()[1].split()[:2] == ["1", "partnerkit"]
    # Asked for other events than it has: said, not changed.
    narrower = run(env, "webhooks", "register", "--url", url, "--events", "order.delivered")
    assert (f"warning: webhook 1 subscribes to {', '.join(ORDER_EVENTS)}, not to the events asked for: "
            "`partnerkit webhooks update 1 --events ...` changes them") in narrower.stderr
    assert sorted(sandbox_server.sandbox.webhooks) == [1], "nothing created"
    again = run(env, "webhooks", "register", "--url", url, "--again")
    assert "webhook 2 registered" in again.stderr
    assert ("warning: webhook 1 already delivers to this URL: each event now arrives twice (stored once); "
            "`partnerkit webhooks delete 1` removes the old one") in again.stderr
    # Two webhooks to the URL, both tokens saved: the first is the one registered; the second is named.
    rerun = run(env, "webhooks", "register", "--url", url)
    assert rerun.stderr.startswith("webhook 1 is already registered for ")
    assert ("warning: webhook 2 already delivers to this URL: each event now arrives twice (stored once); "
            "`partnerkit webhooks delete 2` removes the old one") in rerun.stderr
    assert sorted(sandbox_server.sandbox.webhooks) == [1, 2], "nothing created"
    # Another URL, or the same one once the webhook there is paused, is registered as before.
    assert "webhook 3 registered" in run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner?b=1",
                                         code=0).stderr
    run(env, "webhooks", "update", "1", "--inactive")
    run(env, "webhooks", "update", "2", "--inactive")
    resumed = run(env, "webhooks", "register", "--url", url)
    assert "webhook 4 registered" in resumed.stderr
    assert ("warning: webhook 1 (inactive) has this URL too: `partnerkit webhooks update 1 --active` would make each "
            "event arrive twice; `partnerkit webhooks delete 1` removes it") in resumed.stderr


def test_registering_again_names_the_webhook_a_stopped_register_left_without_its_token(env, sandbox_config,
                                                                                       sandbox_server):
    """A register killed after the provider created the webhook loses its token (shown only once). Running it
    again warned about nothing (the check read only the saved tokens), and from then on every event also went to
    the first webhook, whose deliveries the receiver refuses. Now it is refused, naming it and what to do."""
    url = "https://127.0.0.1:9/webhooks/partner"
    db = open_db(sandbox_config.db_path)
    with PartnerClient(sandbox_config, db) as client:
        lost = client.create_webhook(name="partnerkit", url=url, events=["order.created"])  # what the kill left
    db.conn.close()
    no_unbound = {k: v for k, v in env.items() if k != "PARTNERKIT_WEBHOOK_TOKENS"}
    refused = run(no_unbound, "webhooks", "register", "--url", url, code=1)  # a state to settle, not a usage error
    assert refused.stdout == "" and refused.stderr.strip().splitlines() == [
        f"Error: webhook {lost.id} already delivers to {url} (active at the provider); the token of {lost.id} is not "
        "saved here (a register stopped after the provider created it: the token is shown only once), so the "
        f"receiver refuses its deliveries; nothing registered: `partnerkit webhooks token set {lost.id}` saves its "
        "signing token (read from stdin; a lost one is replaced by rotating the signing secret in the provider's "
        f"client portal), or `partnerkit webhooks delete {lost.id}`, then register again; --again registers another "
        "webhook all the same (each event then arrives twice)"]
    assert sorted(sandbox_server.sandbox.webhooks) == [lost.id], "nothing created"
    second = run(no_unbound, "webhooks", "register", "--url", url, "--again")
    assert (f"warning: webhook {lost.id} also delivers to this URL, and its token is not saved here (a `webhooks "
            "register` stopped after the provider created it leaves such a webhook: the token is shown only once): "
            "the receiver refuses each of its deliveries (401, reason no_token) and the provider marks them failed "
            f"after its retries; `partnerkit webhooks delete {lost.id}` removes it") in second.stderr

    third = run(env, "webhooks", "register", "--url", url, "--again")  # PARTNERKIT_WEBHOOK_TOKENS: an unbound token
    warnings = [line for line in third.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, third.stderr
    assert warnings[0].startswith(f"warning: webhook {lost.id} also delivers to this URL, and its token is not "
                                  "saved here")
    assert ("the receiver checks its deliveries only against the unbound tokens of PARTNERKIT_WEBHOOK_TOKENS and "
            "refuses them unless one of those signs them") in warnings[0]
    assert warnings[1] == ("warning: webhook 2 already delivers to this URL: each event now arrives twice (stored "
                           "once); `partnerkit webhooks delete 2` removes the old one")

    # A saved token of a webhook the provider no longer has (deleted at the provider, or a sandbox restarted):
    # not a webhook that delivers, so no reason to refuse; the leftover token is named.
    with sandbox_server.sandbox.lock:
        for webhook_id in (1, 2, 3):
            del sandbox_server.sandbox.webhooks[webhook_id]
    fourth = run(env, "webhooks", "register", "--url", url)
    assert ("warning: a token is still saved for webhook 2, which delivered to this URL but which the provider no "
            "longer lists; `partnerkit webhooks delete 2` forgets it") in fourth.stderr
    assert "webhook 4 registered" in fourth.stderr and "already delivers" not in fourth.stderr

    # The provider's list cannot be read: the tokens saved here still name webhook 4 (refused), and with
    # --again the new webhook is registered all the same, the check saying what it could not read.
    faults = f"{sandbox_server.base_url}/sandbox/faults/http_500"
    assert requests.put(faults, json={"scope": "GET /api/v1/webhooks"}, timeout=5).status_code < 300
    try:
        fifth = run(env, "webhooks", "register", "--url", url, code=1)
        sixth = run(env, "webhooks", "register", "--url", url, "--again")
    finally:
        requests.delete(faults, timeout=5)
    said, = fifth.stderr.strip().splitlines()  # nothing can confirm them: neither "nothing to do" nor a usage error
    assert said.startswith(
        f"Error: webhooks 2, 3, 4 already deliver to {url}, as far as the tokens saved here tell (the provider's "
        "webhooks could not be listed: HTTP 500"), fifth.stderr
    assert said.endswith("; nothing registered: run it again once the provider answers (`partnerkit webhooks list` "
                         "shows its webhooks); --again registers another webhook all the same (each event then "
                         "arrives twice)")
    assert "webhook 5 registered" in sixth.stderr
    assert "warning: the provider's webhooks could not be listed (" in sixth.stderr
    assert "warning: webhook 4 already delivers to this URL" in sixth.stderr  # its token is saved: known here
    assert f"webhook {lost.id} also" not in sixth.stderr


def test_a_rerun_of_register_after_the_lost_token_is_saved_has_nothing_to_do(env, sandbox_config, sandbox_server):
    """The way out the refusal names: save the webhook's signing token here, and the setup's register, run again,
    finds it registered and accepted (exit 0), and the receiver takes its deliveries."""
    url = "https://127.0.0.1:9/webhooks/partner"
    db = open_db(sandbox_config.db_path)
    with PartnerClient(sandbox_config, db) as client:
        lost = client.create_webhook(name="partnerkit", url=url, events=["order.created"])  # what the kill left
    db.conn.close()
    no_unbound = {k: v for k, v in env.items() if k != "PARTNERKIT_WEBHOOK_TOKENS"}
    run(no_unbound, "webhooks", "register", "--url", url, code=1)
    saved = CliRunner().invoke(cli, ["webhooks", "token", "set", str(lost.id)], env=no_unbound, input=lost.token + "\n")
    assert saved.exit_code == 0, saved.output
    rerun = run(no_unbound, "webhooks", "register", "--url", url, "--format", "json")
    assert json.loads(rerun.stdout) == {"id": lost.id, "name": "partnerkit", "url": url, "events": ["order.created"]}
    assert rerun.stderr.startswith(f"webhook {lost.id} is already registered for {url} and the receiver accepts")
    assert sorted(sandbox_server.sandbox.webhooks) == [lost.id], "nothing created"
    db = open_db(sandbox_config.db_path)
    try:
        accepted = saved_tokens(db, load_cipher(sandbox_config))
    finally:
        db.conn.close()
    assert [(t.webhook_id, t.token) for t in accepted] == [(str(lost.id), lost.token)]


def test_a_token_or_secret_in_an_answer_whose_shape_is_not_shown_is_masked():
    # The document shows the token only in the create answer; update, test and retry answers are
    # "not shown", so whatever names a token or a secret there is masked before it is printed.
    from partnerkit.cli.webhooks import _answer_row, _masked

    answer = {"success": True, "data": {"id": 7, "token": "whsec_printed_by_mistake_1",
                                        "signing_secret": "s3cr3t-value-xyz", "nested": [{"Token": "abcdefghijklmnop"}],
                                        "token_rotated": None, "url": "https://partner.example/webhooks/partner"}}
    shown = _masked(answer)
    text = json.dumps(shown) + json.dumps(_answer_row(7, shown))
    for secret in ("whsec_printed_by_mistake_1", "s3cr3t-value-xyz", "abcdefghijklmnop"):
        assert secret not in text
    assert shown["data"]["url"] == "https://partner.example/webhooks/partner" and shown["data"]["id"] == 7
    assert shown["data"]["token_rotated"] is None  # nothing to hide stays as it is


def failed_deliveries(env, sandbox_server, count: int) -> None:
    """`count` deliveries to a URL nothing listens on, each failed after the document's 5 attempts."""
    run(env, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    for _ in range(count):
        run(env, "webhooks", "test", "1")
    for minutes in (0, 1, 2, 4, 8):
        sandbox_server.advance(minutes * 60 + 1)
    assert len(json.loads(run(env, "webhooks", "deliveries", "--status", "failed", "--format", "json").stdout)) == count


def test_webhooks_retry_takes_several_ids_and_goes_on_past_a_refusal(env, sandbox_server):
    failed_deliveries(env, sandbox_server, 2)
    result = run(env, "webhooks", "retry", "1", "2", "424242", "--format", "json", code=1)
    rows = json.loads(result.stdout)
    assert [(r["delivery_id"], r["outcome"]) for r in rows] == [(1, "re-queued"), (2, "re-queued"), (424242, "refused")]
    assert "404" in rows[2]["message"]
    assert "re-queued 2 deliveries of 3; 1 refused by the provider" in result.stderr
    assert [d.max_attempts for d in sandbox_server.sandbox.deliveries.values()] == [6, 6]  # one more attempt each


def test_webhooks_retry_failed_requeues_every_failed_delivery_page_by_page(env, sandbox_server):
    failed_deliveries(env, sandbox_server, 3)
    lists_before = sandbox_server.sandbox.calls["GET /api/v1/webhooks/deliveries"]
    result = run(env, "webhooks", "retry", "--failed", "--format", "csv")
    assert result.stdout.splitlines() == ["delivery_id,outcome,message", "3,re-queued,delivery re-queued",
                                          "2,re-queued,delivery re-queued", "1,re-queued,delivery re-queued"]
    assert "re-queued 3 deliveries of 3" in result.stderr
    # All read before any was re-queued: a walk that re-queued as it went would skip some (offset pages).
    assert sandbox_server.sandbox.calls["GET /api/v1/webhooks/deliveries"] == lists_before + 1
    assert [d.max_attempts for d in sandbox_server.sandbox.deliveries.values()] == [6, 6, 6]


def test_webhooks_retry_failed_stops_before_the_hours_last_requests(env, sandbox_config, sandbox_server):
    """The voucher fetches' and the poller's tenths of the hour are left to them, as the syncs leave them."""
    from partnerkit.store.budget import Budget, walk_reserve

    failed_deliveries(env, sandbox_server, 4)
    db = open_db(sandbox_config.db_path)
    used = Budget.from_config(sandbox_config, db).usage()["general"]["used"]
    db.conn.close()
    # An hourly budget that leaves room for the list and two retries above the walks' reserve.
    hourly = next(b for b in range(used, used + 200)
                  if b - walk_reserve(b, sandbox_config.poller_budget_share) - used == 3)
    result = run({**env, "PARTNERKIT_HOURLY_BUDGET": str(hourly)}, "webhooks", "retry", "--failed", "--format", "json",
                 code=1)
    assert [r["outcome"] for r in json.loads(result.stdout)] == ["re-queued", "re-queued"]
    assert result.stderr.strip().splitlines()[-1].startswith("Error: stopped after 2 of 4: request budget")
    assert "run the same command again later" in result.stderr
    assert sorted(d.max_attempts for d in sandbox_server.sandbox.deliveries.values()) == [5, 5, 6, 6]


def test_webhooks_retry_without_an_id_or_failed_is_a_usage_error(env, existing_db):
    result = CliRunner().invoke(cli, ["webhooks", "retry"], env=env)
    assert result.exit_code == 2 and "give one or more DELIVERY_IDs, or --failed" in result.stderr
    none = run(env, "webhooks", "retry", "--failed")
    assert none.stderr.strip() == "no failed deliveries to re-queue" and none.stdout == ""


def test_a_mistyped_voucher_key_creates_no_webhook_and_places_no_order(env, sandbox_config, sandbox_server,
                                                                       existing_db):
    """Finding 1: the key is checked before the provider is called (the token comes back only once; the
    wallet is debited at creation)."""
    created = json.loads(run(env, "orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "2",
                             "--format", "json").stdout)
    assert created["vouchers_stored"] == 2  # sealed with the generated key file
    wrong = {**env, "PARTNERKIT_VOUCHER_KEY": "d3Jvbmctd3Jvbmctd3Jvbmctd3Jvbmctd3Jvbmct"}
    for args in (["orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "2"],
                 ["webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner"]):
        result = run(wrong, *args, code=2)
        assert result.stderr.startswith("Error: PARTNERKIT_VOUCHER_KEY opens none of the vouchers")
    assert list(sandbox_server.sandbox.orders) == [created["id"]] and sandbox_server.sandbox.webhooks == {}
    assert len(json.loads(run(env, "vouchers", str(created["id"]), "--reveal", "--format", "json").stdout)) == 2
