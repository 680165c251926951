"""Timeouts and retries (docs/client.md): GETs retried, writes only when nothing was processed."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import socket
import time
from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time
from werkzeug import Response

from partnerkit import errors
from partnerkit.client import PartnerClient, RetryPolicy

from tests.client import client_payloads as p
from tests.client.client_payloads import FAST


def _json(status, body="{}", headers=None):
    return Response(body, status=status, headers=headers or {}, content_type="application/json")


def test_get_retried_on_500_then_succeeds(client, httpserver, sleeps):
    httpserver.expect_ordered_request("/api/v1/recharges/101").respond_with_response(_json(500, ""))
    httpserver.expect_ordered_request("/api/v1/recharges/101").respond_with_json(p.recharge())
    assert client.get_recharge(101).id == 101
    assert len(httpserver.log) == 2 and len(sleeps) == 1
    assert client.budget.usage()["general"]["used"] == 2  # each retry consumes budget


def test_get_gives_up_after_max_attempts(client, httpserver, sleeps):
    httpserver.expect_request("/api/v1/orders/1").respond_with_json({"error": "internal_error", "message": "Failed to retrieve order"}, status=500)
    with pytest.raises(errors.ServerError, match="Failed to retrieve order"):
        client.get_order(1)
    assert len(httpserver.log) == FAST.max_attempts == 4
    assert sleeps == sorted(sleeps)  # exponential (jitter keeps each within its step here)


def test_429_retry_after_is_honoured_in_real_time(config, db, httpserver):
    httpserver.expect_ordered_request("/api/v1/orders").respond_with_response(
        _json(429, '{"error":"rate_limit_exceeded","message":"Too many requests. Please try again later."}', {"Retry-After": "1"}))
    httpserver.expect_ordered_request("/api/v1/orders").respond_with_json([p.order_summary()])
    client = PartnerClient(config, db, retry=FAST)
    started = time.monotonic()
    page = client.list_orders()
    elapsed = time.monotonic() - started
    assert [o.id for o in page] == [7001]
    # It waited out Retry-After: the clock is read before the first request, so the whole wait lies inside the
    # measurement, whatever the machine's load (time.sleep never returns early). No upper bound: a busy machine.
    assert elapsed >= 1.0
    assert len(httpserver.log) == 2


def test_429_blocks_the_class_for_a_caller_that_will_not_wait(client, httpserver, db, config):
    httpserver.expect_request("/api/v1/orders").respond_with_response(
        _json(429, '{"error":"rate_limit_exceeded","message":"Too many requests."}', {"Retry-After": "30"}))
    poller = client.with_budget("poller", wait=False)
    before = time.time()  # the budget's clock
    with pytest.raises(errors.RateLimited) as info:
        poller.list_orders()
    assert info.value.retry_after == 30.0 and len(httpserver.log) == 1
    # The block is persisted: another client on the same DB gets BudgetExhausted, nothing sent.
    other = PartnerClient(config, db, wait_for_budget=False)
    with pytest.raises(errors.BudgetExhausted) as blocked:
        other.get_recharge(1)
    after = time.time()
    # What is left of the 30 s block: less by no more than the time this took, however long a busy machine took.
    assert before + 30 - after <= blocked.value.retry_after <= 30 and len(httpserver.log) == 1


def _slow(delay):
    def handler(request):
        time.sleep(delay)
        return _json(200, p.as_json(p.submit_response()))
    return handler


def test_submit_is_not_resent_after_a_timeout(config, db, httpserver):
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_handler(_slow(0.6))
    sleeps: list[float] = []
    client = PartnerClient(config, db, retry=FAST, timeout=0.2, sleep=sleeps.append)
    with pytest.raises(errors.ApiTimeout) as info:
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="key-timeout-1")
    # Sent once: one attempt taken from the budget and no back-off before a second (counted by the client, so
    # not a matter of how long the server takes to log the slow request on a busy machine) ...
    assert client.budget.usage()["general"]["used"] == 1 and sleeps == []
    deadline = time.monotonic() + 30
    while not httpserver.log:
        assert time.monotonic() < deadline, "the slow request was never logged"
        time.sleep(0.05)
    assert len(httpserver.log) == 1  # ... and the one the server got
    assert info.value.idempotency_key == "key-timeout-1" and info.value.request_sent is True


def test_submit_is_not_resent_after_a_500(client, httpserver, sleeps):
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_json({"error": {"message": "boom"}}, status=500)
    with pytest.raises(errors.ServerError) as info:
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100)
    assert len(httpserver.log) == 1 and sleeps == []
    assert len(info.value.idempotency_key) == 32


def test_write_retried_on_503_with_retry_after_with_the_same_key_and_body(client, httpserver, sleeps):
    httpserver.expect_ordered_request("/api/v1/recharges", method="POST").respond_with_response(
        _json(503, '{"error":{"message":"recharge is temporarily paused for this client"}}', {"Retry-After": "0"}))
    httpserver.expect_ordered_request("/api/v1/recharges", method="POST").respond_with_json(p.submit_response(), status=202)
    result = client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100)
    (first, _), (second, _) = httpserver.log
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"] == result.idempotency_key
    assert first.get_data() == second.get_data()
    assert result.http_status == 202 and result.accepted and len(sleeps) == 1


def test_write_not_retried_on_503_without_retry_after(client, httpserver):
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_json(
        {"error": {"message": "recharge is temporarily unavailable"}}, status=503)
    with pytest.raises(errors.RechargeUnavailable):
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100)
    assert len(httpserver.log) == 1


@pytest.mark.parametrize("body", ["", "<html><body>503 Service Temporarily Unavailable</body></html>",
                                  '{"message": "Service Unavailable"}'])
def test_write_not_resent_on_a_gateways_503_even_with_retry_after(client, httpserver, sleeps, body):
    # A load balancer's 503 may come after it forwarded the request: POST /webhooks carries no Idempotency-Key,
    # so a second send would register a second webhook (every event then delivered twice).
    httpserver.expect_request("/api/v1/webhooks", method="POST").respond_with_response(
        Response(body, status=503, headers={"Retry-After": "0"}))
    with pytest.raises(errors.ServiceUnavailable) as info:
        client.create_webhook(name="n", url="https://example.test/hook", events=["order.delivered"])
    assert len(httpserver.log) == 1 and sleeps == []
    assert errors.is_ambiguous(info.value)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_retried_even_for_a_write(config, db):
    from dataclasses import replace
    cfg = replace(config, api_base_url=f"http://127.0.0.1:{_closed_port()}")
    sleeps = []
    client = PartnerClient(cfg, db, retry=FAST, sleep=sleeps.append)
    with pytest.raises(errors.TransportError) as info:
        client.create_order(product_id=7, denomination=10, quantity=1, idempotency_key="order-key-0001")
    assert info.value.request_sent is False and info.value.idempotency_key == "order-key-0001"
    assert len(sleeps) == FAST.max_attempts - 1
    assert client.budget.usage()["order_create"]["used"] == FAST.max_attempts


def test_a_retried_connection_failure_is_logged_naming_the_call_once(config, db, caplog):
    from dataclasses import replace
    cfg = replace(config, api_base_url=f"http://127.0.0.1:{_closed_port()}")
    client = PartnerClient(cfg, db, retry=FAST, sleep=lambda s: None)
    with caplog.at_level(logging.INFO, logger="partnerkit.client"), pytest.raises(errors.TransportError):
        client.list_wallets()
    retries = [r.getMessage() for r in caplog.records if r.getMessage().endswith("retrying")]
    assert retries and all(m == "GET /api/v1/wallets: connection failed before sending; retrying" for m in retries)


def test_redirects_are_not_followed(client, httpserver):
    httpserver.expect_request("/api/v1/wallets").respond_with_response(Response("", status=302, headers={"Location": "http://evil.example/"}))
    with pytest.raises(errors.ApiStatusError, match="redirect"):
        client.list_wallets()
    assert len(httpserver.log) == 1


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("call", [
    lambda c: c.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="k" * 16),
    lambda c: c.create_order(product_id=7, denomination=50, quantity=1, idempotency_key="k" * 16),
], ids=["recharge submit", "order create"])
def test_a_redirect_answering_a_write_is_not_a_refusal(client, httpserver, status, call):
    """No row of the document says a redirect means nothing was done ("303 See Other" is the usual answer to a
    POST that created something): never followed, and ambiguous, so the caller locates it or replays its key."""
    httpserver.expect_request(re.compile("/api/v1/(recharges|orders)"), method="POST").respond_with_response(
        Response("", status=status, headers={"Location": "/api/v1/recharges/100001"}))
    with pytest.raises(errors.MalformedResponse, match=f"unexpected redirect \\(HTTP {status}\\)") as info:
        call(client)
    assert errors.is_ambiguous(info.value) and info.value.status == status
    assert info.value.idempotency_key == "k" * 16  # replay it, never a new key
    assert len(httpserver.log) == 1  # not followed, not re-sent


@pytest.mark.parametrize("kwargs", [dict(max_attempts=0), dict(base=-1), dict(base=2, cap=1), dict(jitter=1.5)])
def test_retry_policy_is_validated(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_retry_policy_interval_is_pure_and_obeys_retry_after():
    policy = RetryPolicy(max_attempts=4, base=0.5, cap=4.0, jitter=0.5)
    assert [policy.interval(n, rand=1.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert policy.interval(1, rand=0.0) == 0.25
    assert policy.interval(1, retry_after=3.0, rand=1.0) == 3.0


def test_a_get_read_timeout_is_an_api_timeout_and_is_read_again(config, db, httpserver, sleeps):
    httpserver.expect_request("/api/v1/recharges/101").respond_with_handler(_slow_get(0.6))
    client = PartnerClient(config, db, retry=RetryPolicy(max_attempts=2), timeout=0.2, sleep=sleeps.append)
    with pytest.raises(errors.ApiTimeout, match="no answer within the timeout"):
        client.get_recharge(101)
    assert len(sleeps) == 1  # read twice (a GET is safe to repeat), then the timeout is raised
    # The test server answers one request at a time: wait (bounded, for a busy machine) for both to be logged.
    deadline = time.monotonic() + 30
    while len(httpserver.log) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(httpserver.log) == 2


def _slow_get(delay):
    def handler(request):
        time.sleep(delay)
        return _json(200, p.as_json(p.recharge()))
    return handler


def test_a_garbled_get_body_is_read_again(client, httpserver, sleeps):
    httpserver.expect_ordered_request("/api/v1/recharges/101").respond_with_response(_json(200, '{"id": 101, "sta'))
    httpserver.expect_ordered_request("/api/v1/recharges/101").respond_with_json(p.recharge())
    assert client.get_recharge(101).id == 101
    assert len(httpserver.log) == 2 and len(sleeps) == 1


def test_a_garbled_get_body_every_time_is_a_malformed_response(client, httpserver, sleeps):
    httpserver.expect_request("/api/v1/orders/1").respond_with_response(_json(200, "[{"))
    with pytest.raises(errors.MalformedResponse, match="body is not JSON") as info:
        client.get_order(1)
    assert info.value.status == 200 and len(httpserver.log) == FAST.max_attempts


def test_a_garbled_submit_answer_is_never_resent(client, httpserver, sleeps):
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_response(_json(202, '{"id": 5'))
    with pytest.raises(errors.MalformedResponse) as info:
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="key-garbled-1")
    assert len(httpserver.log) == 1 and sleeps == []
    assert info.value.idempotency_key == "key-garbled-1"  # the caller locates it with this key


def test_the_charge_preview_is_retried_on_500_as_its_error_table_says(client, httpserver, sleeps):
    # Errors, "Recharge charge preview": 500 "Pricing could not be resolved; retry with backoff".
    # The preview places nothing, so repeating it is as safe as a read.
    httpserver.expect_ordered_request("/api/v1/recharge/charges", method="POST").respond_with_response(_json(500, ""))
    httpserver.expect_ordered_request("/api/v1/recharge/charges", method="POST").respond_with_json(
        {"face": 100, "discount_pct": 0, "discount": 0, "payable": 100})
    assert client.preview_recharge(operator_id=1, amount=100).payable == 100
    (first, _), (second, _) = httpserver.log
    assert first.get_data() == second.get_data() and len(sleeps) == 1


def test_every_attempt_of_a_write_is_signed_again_with_its_own_timestamp(config, db, httpserver):
    # A retry after a long Retry-After would fall outside the 5-minute window (Authentication 4)
    # if it reused the first attempt's X-Timestamp.
    httpserver.expect_ordered_request("/api/v1/orders", method="POST").respond_with_json(
        {"error": "TooManyRequests", "message": "slow down"}, status=429, headers={"Retry-After": "1"})
    httpserver.expect_ordered_request("/api/v1/orders", method="POST").respond_with_json(p.order_created())
    with freeze_time("2024-05-01 10:00:00") as frozen:
        client = PartnerClient(config, db, retry=FAST, sleep=lambda s: frozen.tick(400))
        client.create_order(product_id=7, denomination=50, quantity=2, idempotency_key="order-key-resign")
    (first, _), (second, _) = httpserver.log
    assert int(second.headers["X-Timestamp"]) - int(first.headers["X-Timestamp"]) == 400
    for request in (first, second):
        ts = request.headers["X-Timestamp"]
        digest = hmac.new(p.API_SECRET.encode(), ts.encode() + b"POST/api/v1/orders" + request.get_data(),
                          hashlib.sha256).hexdigest()
        assert request.headers["X-Signature"] == f"t={ts},v1={digest}"
    assert first.get_data() == second.get_data()


def test_once_sends_each_call_once_and_never_waits_for_budget(client, httpserver, sleeps):
    """`client.once()`: for a caller bounding its own time (the locate inside `recharges submit`)."""
    httpserver.expect_request("/api/v1/recharges/101").respond_with_response(_json(500, ""))
    quick = client.once()
    with pytest.raises(errors.ServerError):
        quick.get_recharge(101)
    assert len(httpserver.log) == 1 and sleeps == []          # the client itself would have tried 4 times
    client.budget.block("general", 30)
    with pytest.raises(errors.BudgetExhausted):
        quick.get_recharge(101)                                # no room: refused at once, nothing sent
    assert len(httpserver.log) == 1 and sleeps == []
    with freeze_time(datetime.now(timezone.utc) + timedelta(seconds=31)), pytest.raises(errors.ServerError):
        client.get_recharge(101)                               # the client it came from still retries
    assert len(httpserver.log) == 1 + FAST.max_attempts
