"""Errors: the four body shapes, empty and non-JSON bodies, and every row of the document's tables."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from partnerkit import errors
from partnerkit.client import error_from_response, parse_retry_after

SUBMIT = ("POST", "/api/v1/recharges")
PREVIEW = ("POST", "/api/v1/recharge/charges")
READ = ("GET", "/api/v1/recharges/5")
ORDER_CREATE = ("POST", "/api/v1/orders")
ORDER_LIST = ("GET", "/api/v1/orders")


def _err(status, body, where=SUBMIT, headers=None):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return error_from_response(status, content, headers or {}, method=where[0], path=where[1])


# --- The four shapes -------------------------------------------------------------------------

@pytest.mark.parametrize("body, code, message", [
    ({"error": {"message": "unknown operator_id"}}, None, "unknown operator_id"),
    ({"error": "BadRequest", "message": "Invalid request body format"}, "BadRequest", "Invalid request body format"),
    ({"error": "not_found", "message": "No Matching Result Found!"}, "not_found", "No Matching Result Found!"),
    ({"error": {"name": "BadRequest", "code": "INSUFFICIENT_INVENTORY", "message": "out of stock"}},
     "INSUFFICIENT_INVENTORY", "out of stock"),
])
def test_each_body_shape(body, code, message):
    exc = _err(400, body, where=ORDER_LIST)
    assert isinstance(exc, errors.BadRequest)
    assert (exc.status, exc.code, exc.message, exc.body) == (400, code, message, body)
    assert exc.retryable is False


def test_the_message_and_code_are_printable_and_the_body_kept_as_received():
    """They reach a command's error line, a log and `partnerkit status`: an ESC or a line break is shown escaped."""
    body = {"error": {"code": "NOPE\n", "message": "\x1b[31mout of stock\r\nError: forged"}}
    exc = _err(400, body, where=ORDER_LIST)
    assert (exc.code, exc.message) == ("NOPE\\n", "\\x1b[31mout of stock\\r\\nError: forged")
    assert str(exc) == "HTTP 400 [NOPE\\n]: \\x1b[31mout of stock\\r\\nError: forged on GET /api/v1/orders"
    assert exc.body == body


@pytest.mark.parametrize("content", [b"", b"   ", b"<html>Bad Gateway</html>"])
def test_empty_and_non_json_bodies(content):
    exc = error_from_response(502, content, {"X-Trace-ID": "tr-1"}, method="GET", path="/api/v1/orders", reason="Bad Gateway")
    assert isinstance(exc, errors.ServerError) and not isinstance(exc, errors.ServiceUnavailable)
    assert exc.message == "Bad Gateway" and exc.retryable and exc.trace_id == "tr-1"
    assert exc.method == "GET" and exc.path == "/api/v1/orders"
    assert str(exc) == "HTTP 502: Bad Gateway on GET /api/v1/orders (trace tr-1)"


def test_retry_after_in_seconds_and_http_date():
    assert parse_retry_after("7") == 7.0
    now = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("Wed, 01 May 2024 10:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Wed, 01 May 2024 09:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    exc = _err(429, {"error": "rate_limit_exceeded", "message": "Too many requests. Please try again later."},
               where=ORDER_LIST, headers={"Retry-After": "3"})
    assert isinstance(exc, errors.RateLimited) and exc.retry_after == 3.0 and exc.retryable


# --- Errors, "Recharge charge preview" -------------------------------------------------------

@pytest.mark.parametrize("status, message, cls", [
    (400, "operator_id is required", errors.InvalidRecharge),
    (400, "amount must be greater than zero", errors.InvalidRecharge),
    (400, "amount must be a whole rupee", errors.InvalidRecharge),
    (400, "unknown operator_id", errors.InvalidRecharge),
    (400, "invalid request body", errors.BadRequest),
    (401, None, errors.Unauthorized),
    (500, None, errors.ServerError),
])
def test_preview_table(status, message, cls):
    exc = _err(status, {"error": {"message": message}} if message else b"", where=PREVIEW)
    assert type(exc) is cls and exc.status == status
    assert exc.retryable is (status == 500)


# --- Errors, "Recharge submit" ---------------------------------------------------------------

SUBMIT_TABLE = [
    (400, "IDEMPOTENCY_KEY_REQUIRED", errors.IdempotencyKeyError, False),
    (400, "IDEMPOTENCY_KEY_TOO_SHORT", errors.IdempotencyKeyError, False),
    (400, "insufficient wallet balance", errors.InsufficientBalance, False),
    (400, "invalid mobile number: must be 10 digits", errors.InvalidRecharge, False),
    (400, "amount must be a whole rupee greater than zero", errors.InvalidRecharge, False),
    (400, "operator_id is required", errors.InvalidRecharge, False),
    (400, "unknown operator", errors.InvalidRecharge, False),
    (400, "unknown circle", errors.InvalidRecharge, False),
    (400, "circle_id is required for this operator", errors.InvalidRecharge, False),
    (400, "operator does not support prepaid recharge", errors.InvalidRecharge, False),
    (400, "operator does not support postpaid recharge", errors.InvalidRecharge, False),
    (400, "operator does not support special recharge", errors.InvalidRecharge, False),
    (400, "operator is not mapped to the recharge vendor", errors.InvalidRecharge, False),
    (403, "recharge is not enabled for this client", errors.RechargeNotEnabled, False),
    (403, "recharge over the API is not enabled for this client", errors.RechargeNotEnabled, False),
    (403, "this recharge type is not enabled for this client", errors.RechargeNotEnabled, False),
    (403, "this operator is not enabled for this client", errors.RechargeNotEnabled, False),
    (404, "no INR wallet found for this client", errors.WalletNotFound, False),
    (409, "a matching recharge was submitted recently; resend with force=true if the repeat is intended",
     errors.DuplicateRecharge, False),
    (503, "recharge is temporarily unavailable", errors.RechargeUnavailable, True),
    (503, "recharge is temporarily paused for this client", errors.RechargeUnavailable, True),
    (500, None, errors.ServerError, True),
]


@pytest.mark.parametrize("status, message, cls, retryable", SUBMIT_TABLE)
def test_submit_table(status, message, cls, retryable):
    exc = _err(status, {"error": {"message": message}} if message else b"")
    assert type(exc) is cls
    assert exc.status == status and exc.retryable is retryable
    if message and message.startswith("IDEMPOTENCY"):
        assert exc.code == message


def test_submit_idempotency_code_in_the_general_shape():
    exc = _err(400, {"error": {"name": "BadRequest", "code": "IDEMPOTENCY_KEY_REQUIRED", "message": "header missing"}})
    assert type(exc) is errors.IdempotencyKeyError and exc.code == "IDEMPOTENCY_KEY_REQUIRED"


@pytest.mark.parametrize("status, cls", [(403, errors.RechargeNotEnabled), (409, errors.DuplicateRecharge),
                                         (503, errors.RechargeUnavailable)])
def test_submit_status_alone_names_the_error(status, cls):
    assert type(_err(status, {"error": {"message": "reworded by the provider"}})) is cls


@pytest.mark.parametrize("status, cls", [(403, errors.Forbidden), (409, errors.Conflict),
                                         (503, errors.ServiceUnavailable)])
@pytest.mark.parametrize("content", [b"", b"<html><body>503 Service Temporarily Unavailable</body></html>",
                                     b'{"message": "Service Unavailable"}'])  # a gateway's JSON, none of the four shapes
def test_submit_status_without_the_providers_body_is_not_a_table_row(status, cls, content):
    """An empty or non-JSON body is a proxy's or load balancer's page, not the provider's answer: it may come
    after the request was forwarded, so it stays ambiguous (locate it), never "recharge is temporarily
    unavailable" or "recharges not enabled", which would delete the intent of a recharge that may exist."""
    exc = error_from_response(status, content, {}, method="POST", path="/api/v1/recharges", reason="Whatever")
    assert type(exc) is cls and exc.message in ("Whatever", "Service Unavailable")
    assert errors.is_ambiguous(exc)


@pytest.mark.parametrize("status, content, where, provider_cls, foreign_cls", [
    (400, b'{"message": "insufficient funds"}', SUBMIT, errors.InsufficientBalance, errors.BadRequest),
    (400, b'{"message": "duplicate reference code ABC"}', ORDER_CREATE, errors.DuplicateOrderReference,
     errors.BadRequest),
    (404, b'{"message": "wallet service: no route"}', ("GET", "/api/v1/wallets/INR"), errors.WalletNotFound,
     errors.NotFound),
    (503, b'{"message": "Recharge is temporarily unavailable"}', SUBMIT, errors.RechargeUnavailable,
     errors.ServiceUnavailable),
])
def test_the_tables_words_count_only_in_the_providers_own_shape(status, content, where, provider_cls, foreign_cls):
    """A gateway's JSON (no `error` key, none of the four shapes) that happens to use a row's words gets no
    meaning from them: "insufficient funds" from a proxy is not the provider refusing a recharge, and on a
    submit a 503 that is not the provider's stays ambiguous (the intent is located, never deleted)."""
    said = json.loads(content)
    said["error"] = "x"
    assert type(_err(status, said, where)) is provider_cls
    foreign = _err(status, content, where)
    assert type(foreign) is foreign_cls
    if where == SUBMIT and status == 503:
        assert errors.is_ambiguous(foreign)


# --- Errors, "Recharge reads" ----------------------------------------------------------------

@pytest.mark.parametrize("status, message, cls", [
    (400, "invalid recharge id", errors.BadRequest),
    (401, "unauthorized", errors.Unauthorized),
    (404, "recharge not found", errors.NotFound),
])
def test_recharge_reads_table(status, message, cls):
    assert type(_err(status, {"error": {"message": message}}, where=READ)) is cls


# --- Errors, "Order creation" ----------------------------------------------------------------

@pytest.mark.parametrize("status, name, message, cls", [
    (400, "BadRequest", "Invalid request body format", errors.BadRequest),
    (400, "BadRequest", "Invalid Quantity: min", errors.BadRequest),
    (400, "BadRequest", "Insufficient funds in your wallet", errors.InsufficientBalance),
    (400, "BadRequest", "Invalid quantity, allowed max quantity: 1000", errors.BadRequest),
    (400, "BadRequest", "Denomination not available for this product", errors.BadRequest),
    (400, "BadRequest", "Duplicate reference code", errors.DuplicateOrderReference),
    (401, "UnauthorizedAccess", "User is not authorised to perform this action", errors.Unauthorized),
    (404, "NotFound", "Product not found", errors.NotFound),
    (404, "NotFound", "Wallet not found", errors.WalletNotFound),
    (500, "InternalServerError", "Failed to create order", errors.ServerError),
])
def test_order_creation_table(status, name, message, cls):
    exc = _err(status, {"error": name, "message": message}, where=ORDER_CREATE)
    assert type(exc) is cls and exc.code == name and exc.message == message


# --- Errors, "Order list and order detail" ---------------------------------------------------

@pytest.mark.parametrize("status, name, message, cls", [
    (401, "unauthorized", "Invalid or expired access token", errors.Unauthorized),
    (404, "not_found", "No Matching Result Found!", errors.NotFound),
    (429, "rate_limit_exceeded", "Too many requests. Please try again later.", errors.RateLimited),
    (500, "internal_error", "Failed to retrieve order", errors.ServerError),
])
def test_order_read_table(status, name, message, cls):
    exc = _err(status, {"error": name, "message": message}, where=ORDER_LIST)
    assert type(exc) is cls and exc.code == name and exc.message == message


def test_secret_never_in_error_text(client, httpserver):
    httpserver.expect_request("/api/v1/orders/1").respond_with_json({"error": "unauthorized", "message": "nope"}, status=401)
    with pytest.raises(errors.Unauthorized) as info:
        client.get_order(1)
    from tests.client.client_payloads import API_SECRET
    assert API_SECRET not in str(info.value) and API_SECRET not in repr(info.value) and API_SECRET not in repr(client)
