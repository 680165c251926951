"""A 404 that is not the provider's says nothing of the record asked for (h08's review, after the wrong base URL fix).

With PARTNERKIT_API_BASE_URL's path wrong (here the sandbox under /partner: a web server's HTML 404 for every
call), the client counted the answers as the provider failing, yet four callers still read such a 404 as the
record's own answer: `webhooks delete` forgot the token of a webhook the provider still has, `webhooks update`
said "no such webhook", `webhooks retry` of several listed each delivery as refused, a voucher fetch was parked as
its order's trouble (for an hour), and the poller logged a PROCESSING recharge "not found". Each now treats it as
the provider failing, and the worker's job line says what to check, as the command line's error does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import timedelta

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.client import PartnerClient, RetryPolicy
from partnerkit.config import config_as_env
from partnerkit.errors import NotFound
from partnerkit.store import jobs, meta, webhook_tokens
from partnerkit.store import recharges as recharge_store
from partnerkit.store.db import transaction
from partnerkit.timeutil import utcnow
from partnerkit.vouchers import FetchPolicy, run_voucher_fetches
from reconcile.poller import BACKOFF_KEY, poll_once
from reconcile.recharges import submit
from reconcile.worker_jobs import JOBS, JobRunner

HTML_404 = "HTTP 404: NOT FOUND on "


@pytest.fixture
def wrong(sandbox_server, sandbox_config):
    """The configuration with the base URL's path wrong: every call reaches a web server's HTML 404."""
    return replace(sandbox_config, api_base_url=sandbox_server.base_url + "/partner")


def hint(config) -> str:
    return (f": this is not the provider's answer; check PARTNERKIT_API_BASE_URL (now {config.api_base_url}) and "
            "any proxy towards it")


def run(config, *args, code: int = 0):
    result = CliRunner().invoke(cli, list(args), env=config_as_env(config), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def registered(sandbox_config, db):
    """One webhook registered at the provider, its token saved; the database knows the key's account, so the
    commands under the wrong base URL send their own call first (no wallet read before it)."""
    run(sandbox_config, "webhooks", "register", "--url", "https://127.0.0.1:9/webhooks/partner")
    assert [t for t, _ in webhook_tokens.sealed(db)] == ["1"]
    return 1


def test_delete_keeps_the_token_of_a_webhook_it_could_not_reach(sandbox_server, wrong, db, registered):
    result = run(wrong, "webhooks", "delete", "1", "--format", "json", code=1)
    assert result.stdout == ""
    assert result.stderr.strip() == f"Error: {HTML_404}DELETE /api/v1/webhooks/1{hint(wrong)}"
    # Before: `{"deleted_at_provider": false, "token_forgotten": true}`, exit 0, the webhook alive at the provider.
    assert [t for t, _ in webhook_tokens.sealed(db)] == ["1"]
    assert sorted(sandbox_server.sandbox.webhooks) == [1]


def test_update_is_not_told_there_is_no_such_webhook(sandbox_server, wrong, db, registered):
    result = run(wrong, "webhooks", "update", "1", "--name", "renamed", code=1)
    assert result.stderr.strip() == f"Error: {HTML_404}PUT /api/v1/webhooks/1{hint(wrong)}"
    assert "no such webhook" not in result.output
    assert sandbox_server.sandbox.webhooks[1].name != "renamed"


def test_retry_of_several_stops_at_an_answer_that_is_not_the_providers(sandbox_server, sandbox_config, wrong, db):
    run(sandbox_config, "webhooks", "list")  # the key's account known: the retries are the first calls below
    calls_before = sum(sandbox_server.sandbox.calls.values())
    result = run(wrong, "webhooks", "retry", "1", "2", "--format", "json", code=1)
    # Before: two rows, each delivery "refused" with the web server's 404, and "2 refused by the provider".
    assert json.loads(result.stdout) == []
    assert "refused" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: stopped after 0 of 2: {HTML_404}POST /api/v1/webhooks/deliveries/1/retry{hint(wrong)}; the rest "
        "were not sent: run the same command again later")
    assert sum(sandbox_server.sandbox.calls.values()) == calls_before  # none reached the provider


def test_a_voucher_fetch_backs_off_and_is_never_parked_as_its_orders_trouble(sandbox_config, wrong, db):
    with PartnerClient(sandbox_config, db) as right:  # the key's account known, as the worker's first call leaves it
        right.list_wallets()
    now = utcnow()
    with transaction(db) as conn:
        jobs.queue(conn, 5001, now=now, expected_status="DELIVERED", expected_count=1)
    # The provider's own 404 would park it after one attempt here, until the hourly revival.
    policy = FetchPolicy(max_attempts=2, not_found_attempts=1)
    with PartnerClient(wrong, db, retry=RetryPolicy(max_attempts=1)) as client:
        first = run_voucher_fetches(wrong, db, client, now=now, policy=policy)
        job = jobs.latest_for_orders(db, [5001])[5001]
        assert (first.retried, first.dead) == (1, 0)
        assert (job["state"], job["attempts"]) == ("pending", 1)
        assert job["last_error"] == f"{HTML_404}GET /api/v1/orders/5001"
        assert job["next_run_at"] == jobs.stamp(now + timedelta(seconds=policy.base_s))  # a 5xx's backoff
        assert jobs.counters(db, "voucher_fetch.") == {"voucher_fetch.not_the_provider": 1}

        later = now + timedelta(seconds=policy.base_s)
        second = run_voucher_fetches(wrong, db, client, now=later, policy=policy)
    assert second.dead == 1
    # Parked as the provider's failure: the first call it answers re-arms it (`rearm_parked_fetches`), not an hour on.
    assert jobs.latest_for_orders(db, [5001])[5001]["next_run_at"] == jobs.stamp(later)


def test_the_poller_reads_it_as_a_failed_read_not_as_not_found(sandbox_config, wrong, db, caplog):
    with PartnerClient(sandbox_config, db) as right:  # digit 8: PROCESSING for ever at the sandbox
        outcome = submit(sandbox_config, db, right, mobile_number="9876543218", operator_id=1, amount=199)
    assert outcome.status == "PROCESSING"
    later = utcnow() + timedelta(minutes=10)
    with PartnerClient(wrong, db, retry=RetryPolicy(max_attempts=1)) as client:
        with caplog.at_level(logging.WARNING, logger="reconcile.poller"):
            with pytest.raises(NotFound) as info:  # the job's error, as a 5xx's
                poll_once(wrong, db, client, now=later)
    assert not info.value.from_provider
    assert str(info.value) == f"{HTML_404}GET /api/v1/recharges/{outcome.recharge.id}"
    assert not any("not found at the provider" in r.getMessage() for r in caplog.records)
    assert meta.get(db, BACKOFF_KEY).startswith("1|")  # the next passes wait: the provider failed this one
    row = recharge_store.get(db, outcome.local_id)
    assert row["status"] == "PROCESSING" and row["last_polled_at"] is None  # not read: due again once it answers


def test_the_worker_job_line_says_what_to_check(wrong, db, caplog):
    runner = JobRunner(wrong, next(spec for spec in JOBS if spec.id == "sync-recent"))
    try:
        with caplog.at_level(logging.ERROR, logger="reconcile.worker"):
            record = runner()
    finally:
        runner.close()
    assert record["outcome"] == "error"
    assert record["result"].startswith(f"NotFound: {HTML_404}GET /api/v1/wallets")  # the sync's first read
    assert record["result"].endswith(hint(wrong))
    [line] = [r for r in caplog.records if r.getMessage() == "job sync-recent error"]
    assert line.result == record["result"]


def test_the_hint_never_shows_a_user_and_password_and_follows_the_wallet_read_before_a_write(wrong):
    from partnerkit.errors import AccountCheckFailed, base_url_hint, shown_base_url

    error = NotFound("NOT FOUND", status=404, body="<html>")
    base = wrong.api_base_url.replace("http://", "http://ops:s3cr3t-pw@")
    assert shown_base_url(base) == wrong.api_base_url
    assert base_url_hint(error, base) == hint(wrong)
    try:
        raise AccountCheckFailed("the wallet read before the write failed") from error
    except AccountCheckFailed as check:
        assert base_url_hint(check, base) == hint(wrong)
    assert base_url_hint(NotFound("recharge not found", status=404, body={"error": {"message": "x"}}), base) == ""
