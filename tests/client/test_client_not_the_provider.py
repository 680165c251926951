"""A 4xx in none of the provider's error shapes is not the provider answering (Errors: every shape has `error`).

A PARTNERKIT_API_BASE_URL with a wrong path reaches a web server that answers every call with its own HTML
404, and a proxy in the way answers 403 or 407: before, each such 4xx counted as "the provider answered" and
cleared the record `partnerkit status` reads, so a kit whose every job failed looked healthy. Now it counts
as a failure (by kind, "HTTP 404 without the provider's error body"); a 4xx is still never retried, and the
provider's own 4xx (a 404 "recharge not found" in its shape), a 401 and a 429 are answers as before.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from werkzeug.wrappers import Response

from partnerkit import errors
from partnerkit.client import PartnerClient, RetryPolicy
from partnerkit.errors import not_the_providers
from partnerkit.store import open_db, provider_failures
from tests.client.client_payloads import FAST, as_json
from tests.conftest import account_of
from tests.sandbox_serving import serve_sandbox

NOT_ITS_OWN = "without the provider's error body"
HTML_404 = "<!doctype html>\n<title>404 Not Found</title>\n<h1>Not Found</h1>"


@pytest.mark.parametrize("status, body, foreign", [
    (404, HTML_404, True),                                                          # a web server's page
    (404, None, True),                                                              # empty
    (403, {"message": "Forbidden"}, True),                                          # a gateway's own JSON
    (407, "Proxy Authentication Required", True),
    (301, None, True),                                  # the document has no redirect: http:// sent to https://
    (303, "", True),
    (404, {"error": {"message": "recharge not found"}}, False),                     # recharge endpoints
    (404, {"error": "NotFound", "message": "Product not found"}, False),            # order creation
    (404, {"error": "not_found", "message": "No Matching Result Found!"}, False),    # order list and detail
    (404, {"error": {"name": "NotFound", "code": "NOT_FOUND", "message": "x"}}, False),  # general shape
    (401, None, False),      # "401 | none" (charge preview): kept by the budget as a refusal of the key
    (429, None, False),      # "429 ... with a Retry-After header": kept by the budget as a block
    (500, HTML_404, False),  # a 5xx is counted as a failure already, by its own rule
    (200, HTML_404, False),
])
def test_which_answers_are_not_the_providers(status, body, foreign):
    assert not_the_providers(status, body) is foreign


@pytest.fixture
def sandbox():
    with serve_sandbox(background=False) as server:
        yield server


def _config(server, tmp_path, base_url):
    from partnerkit.config import Config

    alpha = server.clients[0]
    return Config(db_path=tmp_path / "pk.db", api_base_url=base_url, api_key=alpha.key, api_secret=alpha.secret,
                  http_timeout_s=5)


def test_a_base_url_with_a_wrong_path_counts_as_the_provider_failing(sandbox, tmp_path):
    """The sandbox under /partner: Flask's HTML 404 for every call, as any web server at a wrong path."""
    wrong = _config(sandbox, tmp_path, sandbox.base_url + "/partner")
    db = open_db(wrong.db_path)
    account_of(db, wrong.api_key)  # known already: the calls below are the sync's own, not the account check's
    try:
        with PartnerClient(wrong, db, retry=FAST, sleep=lambda s: None, purpose="sync") as client:
            for _ in range(3):
                with pytest.raises(errors.NotFound, match="HTTP 404: NOT FOUND on GET /api/v1/wallets"):
                    client.list_wallets()
        failing = provider_failures.standing(db)
        # One failure per call, though FAST allows 4 attempts: a 4xx is still never retried.
        assert failing is not None and failing.calls == 3
        assert failing.kinds == {f"HTTP 404 {NOT_ITS_OWN}": 3}
        assert failing.kinds_text() == f"HTTP 404 {NOT_ITS_OWN} x3"
        assert failing.last_call == "GET /api/v1/wallets (sync)"

        # Fixed: the provider's own 404 ("recharge not found", in its shape) is an answer and clears the record.
        right = replace(wrong, api_base_url=sandbox.base_url)
        with PartnerClient(right, db, retry=FAST, sleep=lambda s: None) as client:
            with pytest.raises(errors.NotFound) as info:
                client.get_recharge(999_999_999)
        assert info.value.body == {"error": {"message": "recharge not found"}}
        assert provider_failures.standing(db) is None
    finally:
        db.conn.close()


def test_the_providers_own_404_is_never_counted(sandbox, tmp_path):
    config = _config(sandbox, tmp_path, sandbox.base_url)
    db = open_db(config.db_path)
    try:
        with PartnerClient(config, db, retry=FAST, sleep=lambda s: None) as client:
            for _ in range(3):
                with pytest.raises(errors.NotFound):
                    client.get_recharge(999_999_999)
        assert provider_failures.standing(db) is None
    finally:
        db.conn.close()


@pytest.mark.parametrize("status, content, content_type", [
    (403, "<html><body><h1>403 Forbidden</h1>Request blocked by policy</body></html>", "text/html"),
    (407, "", "text/plain"),
    (404, as_json({"message": "no Route matched with those values"}), "application/json"),  # a gateway's JSON
])
def test_a_proxys_refusal_counts_and_is_not_retried(client, db, httpserver, status, content, content_type):
    httpserver.expect_request("/api/v1/recharges/5").respond_with_response(
        Response(content, status=status, content_type=content_type))
    with pytest.raises(errors.ApiStatusError) as info:
        client.get_recharge(5)
    assert info.value.status == status
    assert len(httpserver.log) == 1, "a 4xx is never retried, the provider's or not"
    failing = provider_failures.standing(db)
    assert failing is not None and failing.kinds == {f"HTTP {status} {NOT_ITS_OWN}": 1}


@pytest.mark.parametrize("status, content", [
    (404, {"error": {"message": "recharge not found"}}),
    (400, {"error": {"message": "invalid recharge id"}}),
    (403, {"error": {"name": "Forbidden", "code": "FORBIDDEN", "message": "not allowed"}}),
    (401, None),   # the key refused, however it is said: the budget keeps it (`provider_refused`)
    (429, None),   # rate limited, however it is said: the budget blocks the class
])
def test_the_providers_answers_and_401_429_still_clear_the_record(config, db, httpserver, status, content):
    provider_failures.failed(db, kind="HTTP 503", method="GET", path="/api/v1/recharges", purpose="poller")
    headers = {"Retry-After": "1"} if status == 429 else {}
    httpserver.expect_request("/api/v1/recharges/5").respond_with_response(
        Response("" if content is None else as_json(content), status=status, headers=headers,
                 content_type="application/json"))
    with PartnerClient(config, db, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None) as client:
        with pytest.raises(errors.ApiStatusError) as info:
            client.get_recharge(5)
    assert info.value.status == status
    assert provider_failures.standing(db) is None


def test_a_redirect_counts_and_a_writes_stays_ambiguous(client, db, httpserver):
    """An http:// base URL that the host sends to https://: every call a redirect, never followed."""
    moved = Response("", status=301, headers={"Location": "https://provider.example/api/v1/recharges/5"})
    httpserver.expect_request("/api/v1/recharges/5").respond_with_response(moved)
    with pytest.raises(errors.ApiStatusError, match="redirect"):
        client.get_recharge(5)
    httpserver.expect_request("/api/v1/recharges", method="POST").respond_with_response(
        Response("", status=303, headers={"Location": "/api/v1/recharges/100001"}))
    with pytest.raises(errors.MalformedResponse, match="unexpected redirect") as info:
        client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100, idempotency_key="k" * 16)
    assert errors.is_ambiguous(info.value)  # as before: located or replayed, never taken for a refusal
    assert len(httpserver.log) == 2  # neither followed nor re-sent
    failing = provider_failures.standing(db)
    assert failing is not None
    assert failing.kinds == {f"HTTP 301 {NOT_ITS_OWN}": 1, f"HTTP 303 {NOT_ITS_OWN}": 1}
