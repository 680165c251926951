"""The budget's bookkeeping about an answer never replaces the answer.

The provider (a loopback server) takes the database's write lock on a real second connection while it
answers, as a long write of another process would: the budget's write about that answer (the
X-RateLimit figures, a 429's block, a 401's record) then fails, and the caller still gets the
provider's answer, or its error. The failure is logged once per episode, not per call; the request
itself stays counted, because it was reserved before it was sent. And which failures say nothing was
done (`errors.is_ambiguous`), table by table.
"""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest
from werkzeug.wrappers import Response

from partnerkit import errors
from partnerkit.client import PartnerClient
from partnerkit.store import open_db
from tests.client.client_payloads import FAST, as_json, recharge
from tests.conftest import account_of

BOOKS_FAILED = "the request budget's bookkeeping could not be written"
BOOKS_BACK = "the request budget's bookkeeping is written again"
RATE = {"X-RateLimit-Limit": "1000", "X-RateLimit-Remaining": "990", "X-RateLimit-Reset": "60"}


@pytest.fixture
def quick_db(config, migrated_file):
    """The client's database, waiting 0.2 s for a lock (not 5 s): each failed write is quick."""
    database = open_db(migrated_file(config.db_path), busy_timeout_ms=200)
    account_of(database, config.api_key)  # the server under test answers its endpoints only, not /wallets
    yield database
    database.conn.close()


class LockingProvider:
    """Answers with `status` and `body`; while `locking`, takes the database's write lock first (held
    until `release()`), so the client meets it right after the answer arrives."""

    def __init__(self, db_path, status: int = 200, body: str = "", headers: dict | None = None) -> None:
        self.db_path, self.status, self.body, self.headers = db_path, status, body, {**RATE, **(headers or {})}
        self.locking, self.held = True, None

    def __call__(self, request) -> Response:
        if self.locking:
            self.held = sqlite3.connect(self.db_path, isolation_level=None, timeout=5, check_same_thread=False)
            self.held.execute("BEGIN IMMEDIATE")
        return Response(self.body, status=self.status, headers=self.headers, content_type="application/json")

    def release(self) -> None:
        if self.held is not None:
            self.held.execute("ROLLBACK")
            self.held.close()
            self.held = None


def messages(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_answers_are_returned_while_the_budget_cannot_write_and_it_is_logged_once(
        config, quick_db, httpserver, caplog):
    provider = LockingProvider(config.db_path, body=as_json({"data": recharge(id=7)}))
    httpserver.expect_request("/api/v1/recharges/7").respond_with_handler(provider)
    client = PartnerClient(config, quick_db, retry=FAST)
    with caplog.at_level(logging.INFO, logger="partnerkit.client"):
        for _ in range(2):  # one episode: the second failure is not logged again
            try:
                assert client.get_recharge(7).id == 7
            finally:
                provider.release()
        assert messages(caplog, BOOKS_FAILED) == [
            f"GET /api/v1/recharges/7: {BOOKS_FAILED} (cannot start a transaction: database is locked); the "
            "provider's answer is used all the same, and each request is still counted (reserved before it was "
            "sent), but its X-RateLimit figures, 429 blocks and 401 records are missed until the database takes "
            "writes again"]
        assert client.budget.usage()["general"]["used"] == 2  # reserved before sending: counted all the same

        provider.locking = False
        assert client.get_recharge(7).id == 7
        assert messages(caplog, BOOKS_BACK) == [BOOKS_BACK]
        assert client.budget.usage()["general"]["remaining"] == 990  # the provider's figure, written now

        provider.locking = True
        try:
            client.get_recharge(7)
        finally:
            provider.release()
        assert len(messages(caplog, BOOKS_FAILED)) == 2  # a new episode


def test_a_submit_answered_while_the_budget_cannot_write_returns_the_recharge(config, quick_db, httpserver):
    provider = LockingProvider(config.db_path, status=202, body=json.dumps(
        {"id": 101, "reference_number": "RCH-101", "status": "PROCESSING", "mobile_number": "9876543210",
         "face": 100, "discount": 2, "payable": 98, "created_at": "2024-05-01T10:00:00Z"}))
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_handler(provider)
    try:
        result = PartnerClient(config, quick_db, retry=FAST).submit_recharge(
            mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="key-of-the-submit")
    finally:
        provider.release()
    assert (result.http_status, result.recharge.id, str(result.recharge.payable)) == (202, 101, "98")


@pytest.mark.parametrize("status, body, headers, raised", [
    (429, {"success": False, "message": "Too many requests"}, {"Retry-After": "30", "X-RateLimit-Remaining": "0"},
     errors.RateLimited),
    (401, {"success": False, "message": "Invalid API credentials"}, {}, errors.Unauthorized),
])
def test_an_error_answer_is_raised_as_itself_when_the_budget_cannot_record_it(
        config, quick_db, httpserver, status, body, headers, raised):
    """A 429's block and a 401's record are bookkeeping too: the caller hears the provider, not the database."""
    provider = LockingProvider(config.db_path, status=status, body=json.dumps(body), headers=headers)
    httpserver.expect_request("/api/v1/wallets").respond_with_handler(provider)
    client = PartnerClient(config, quick_db, retry=FAST, wait_for_budget=False)
    try:
        with pytest.raises(raised) as caught:
            client.list_wallets()
    finally:
        provider.release()
    assert caught.value.status == status
    if status == 429:
        assert caught.value.retry_after == 30


def test_a_budget_the_store_cannot_take_is_raised_before_anything_is_sent(config, quick_db, httpserver):
    client = PartnerClient(config, quick_db, retry=FAST)
    held = sqlite3.connect(config.db_path, isolation_level=None, timeout=5)
    held.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(errors.StorageError) as caught:
            client.create_order(product_id=7, denomination=10, quantity=1, idempotency_key="order-key-0001")
    finally:
        held.execute("ROLLBACK")
        held.close()
    assert caught.value.request_sent is False and not errors.is_ambiguous(caught.value)
    assert httpserver.log == []


def unsent(exc: errors.StorageError) -> errors.StorageError:
    exc.request_sent = False  # as the client marks a budget it could not take
    return exc


# errors.is_ambiguous: may a write that raised this have taken effect?
@pytest.mark.parametrize("exc, ambiguous", [
    (errors.ApiTimeout("no answer", request_sent=True), True),
    (errors.TransportError("reset after sending", request_sent=True), True),
    (errors.TransportError("connection refused", request_sent=False), False),
    (errors.ServerError("Failed to create order", status=500), True),
    (errors.ServiceUnavailable("bare 503", status=503), True),
    (errors.RechargeUnavailable("temporarily unavailable", status=503), False),
    (errors.MalformedResponse("a 2xx cut on the way", status=200), True),
    (errors.BadRequest("insufficient wallet balance", status=400,
                       body={"error": {"message": "insufficient wallet balance"}}), False),
    (errors.DuplicateRecharge("duplicate guard", status=409, body={"error": "duplicate"}), False),
    # A 4xx in none of the provider's shapes (a proxy's page) may come after the proxy forwarded the write.
    (errors.ApiStatusError("Request Timeout", status=408, body=None), True),
    (errors.NotFound("NOT FOUND", status=404, body="<html>404</html>"), True),
    (errors.RateLimited("too many", status=429), False),
    (errors.BudgetExhausted("no room"), False),
    (errors.ReplayMismatch("the key answers another order"), False),
    # A local error once the request left says nothing of what the provider did ...
    (errors.StorageError("database is locked"), True),
    (errors.PartnerKitError("anything else in flight"), True),
    # ... unless the client raised it before the request left.
    (unsent(errors.StorageError("cannot take the budget")), False),
])
def test_is_ambiguous_is_definite_only_when_nothing_was_sent_or_the_provider_said_no(exc, ambiguous):
    assert errors.is_ambiguous(exc) is ambiguous
