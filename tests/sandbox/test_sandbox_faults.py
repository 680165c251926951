"""Provider faults (sandbox/faults.py): each one switched on through the control API, then off."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from decimal import Decimal

import pytest
import requests

from sandbox import SandboxSettings
from tests.sandbox.sandbox_helpers import Api, make_settings
from tests.sandbox_serving import serve_sandbox

RECHARGES, ORDERS, TXNS, WALLETS = ("/api/v1/recharges", "/api/v1/orders", "/api/v1/transactions",
                                    "/api/v1/wallets")


def switch(api: Api, name: str, **spec):
    r = api.control("PUT", f"/faults/{name}", spec)
    assert r.status_code == 200, r.text
    return r.json()


def off(api: Api, name: str | None = None):
    r = api.control("DELETE", f"/faults/{name}" if name else "/faults")
    assert r.status_code == 200, r.text


# ---- settings shape -------------------------------------------------------------------------
def test_old_names_and_new_mapping_are_both_accepted(alpha, sb):
    sb.settings.faults = frozenset({"order_detail"})          # the first version's form
    assert alpha.control("GET", "/faults").json() == {"order_detail": {"scope": ["all"],
                                                                       "rate": 1.0}}
    spec = {"http_500": {"scope": "recharges", "rate": 0.25},
            "slow": {"scope": ["wallet", "GET /api/v1/orders/:id"], "seconds": 2}}
    got = alpha.control("PATCH", "/settings", {"faults": spec}).json()["faults"]
    assert got == {"http_500": {"scope": ["recharges"], "rate": 0.25},
                   "slow": {"scope": ["wallet", "GET /api/v1/orders/:id"], "rate": 1.0,
                            "seconds": 2.0}}
    # what GET shows is accepted back unchanged
    again = alpha.control("PATCH", "/settings", {"faults": got}).json()["faults"]
    assert again == got
    assert alpha.control("PATCH", "/settings", {"faults": []}).json()["faults"] == {}
    assert SandboxSettings(faults=["pricing"]).faults["pricing"].scope == ("all",)


@pytest.mark.parametrize("faults,message", [
    ({"nope": {}}, "unknown fault 'nope'"),
    ({"http_500": {"rate": 2}}, "rate must be a number from 0 to 1"),
    ({"http_500": {"scope": "moon"}}, "unknown fault scope 'moon'"),
    ({"slow": {"seconds": -1}}, "seconds must be a number >= 0"),
    ({"slow": {"sekonds": 1}}, "unknown keys sekonds"),
    (["http_500", "gremlins"], "unknown fault 'gremlins'"),
    ({"rate_limit": {"omit": ["X-Nope"]}}, "omit must list headers among Retry-After"),
    ({"rate_limit": {"omit": "Retry-After, X-RateLimit-Reset"}}, "omit must list headers among"),
    ({"slow": {"omit": ["Retry-After"]}}, "fault slow: omit applies to rate_limit only"),
])
def test_invalid_fault_settings_are_400_and_change_nothing(alpha, sb, faults, message):
    r = alpha.control("PATCH", "/settings", {"faults": faults, "hourly_limit": 7})
    assert r.status_code == 400 and message in r.json()["error"]["message"]
    assert sb.settings.faults == {} and sb.settings.hourly_limit == 1000


def test_put_and_delete_one_fault_leave_the_others(alpha):
    switch(alpha, "http_500", scope="orders")
    assert set(switch(alpha, "rate_limit", scope="wallet", seconds=3)) == {"http_500",
                                                                           "rate_limit"}
    off(alpha, "http_500")
    assert list(alpha.control("GET", "/faults").json()) == ["rate_limit"]
    assert alpha.control("DELETE", "/faults/gremlins").status_code == 404
    assert alpha.control("PUT", "/faults/gremlins", {}).status_code == 400
    off(alpha)
    assert alpha.control("GET", "/faults").json() == {}


# ---- http_500 ---------------------------------------------------------------------------------
def test_http_500_on_submit_commits_nothing_and_the_key_still_works(alpha, sb):
    before = alpha.balance()
    switch(alpha, "http_500", scope="recharges")
    r = alpha.recharge(mobile="9000000001", key="fault-key-0001")
    assert (r.status_code, r.json()) == (500, {"error": {"message": "internal server error"}})
    assert sb.recharges == {}
    assert alpha.get(WALLETS).status_code == 200              # out of scope
    off(alpha)
    assert alpha.balance() == before
    r = alpha.recharge(mobile="9000000001", key="fault-key-0001")
    assert r.status_code == 200 and "Idempotent-Replayed" not in r.headers
    assert len(sb.recharges) == 1


@pytest.mark.parametrize("method,path,body", [
    ("GET", ORDERS, {"error": "internal_error", "message": "Failed to retrieve order"}),
    ("POST", ORDERS, {"error": "InternalServerError", "message": "Failed to create order"}),
    ("GET", TXNS, {"error": {"name": "InternalServerError", "code": "INTERNAL_SERVER_ERROR",
                             "message": "internal server error"}}),
    ("GET", RECHARGES, {"error": {"message": "internal server error"}}),
])
def test_http_500_uses_each_endpoint_error_shape(alpha, sb, method, path, body):
    switch(alpha, "http_500")
    r = alpha.get(path) if method == "GET" else alpha.order()
    assert (r.status_code, r.json()) == (500, body)
    assert r.headers["X-Sandbox-Reason"] == "fault 'http_500' is set"
    assert sb.orders == {}
    assert alpha.control("GET", "/stats").json()["faults_injected"] == {"http_500": 1}


def test_http_500_rate_is_a_seeded_fraction(settings):
    def outcomes():
        with serve_sandbox(make_settings(), background=False) as srv:
            api = Api(srv, srv.clients[0])
            switch(api, "http_500", scope="wallet", rate=0.5)
            return [api.get(WALLETS).status_code for _ in range(40)]
    first = outcomes()
    assert 5 < first.count(500) < 35 and set(first) == {200, 500}
    assert outcomes() == first                                  # same seed, same draws


# ---- rate_limit -------------------------------------------------------------------------------
def test_rate_limit_is_429_with_retry_after_and_does_not_use_the_window(alpha, sb):
    switch(alpha, "rate_limit", scope="orders", seconds=7)
    r = alpha.get(ORDERS)
    assert (r.status_code, r.json()) == (429, {"error": "rate_limit_exceeded",
                                               "message": "Too many requests. "
                                                          "Please try again later."})
    assert r.headers["Retry-After"] == "7"
    assert (r.headers["X-RateLimit-Limit"], r.headers["X-RateLimit-Remaining"]) == ("1000", "0")
    assert int(r.headers["X-RateLimit-Reset"]) > 0
    assert alpha.get(WALLETS).headers["X-RateLimit-Remaining"] == "999"   # out of scope
    off(alpha)
    assert alpha.get(ORDERS).headers["X-RateLimit-Remaining"] == "998"
    stats = alpha.control("GET", "/stats").json()
    assert stats["faults_injected"] == {"rate_limit": 1} and stats["total"] == 3


def test_rate_limit_can_leave_out_the_retry_after_the_document_promises(alpha):
    # Errors, "Other" promises Retry-After on a 429; a provider may still send only the
    # X-RateLimit-* headers (Limits), or none at all.
    shown = switch(alpha, "rate_limit", scope="wallet", seconds=7, omit=["retry-after"])
    assert shown["rate_limit"]["omit"] == ["Retry-After"]       # canonical spelling, accepted back
    before = int(time.time())
    r = alpha.get(WALLETS)
    assert r.status_code == 429 and "Retry-After" not in r.headers
    assert before + 7 <= int(r.headers["X-RateLimit-Reset"]) <= int(time.time()) + 7
    assert r.headers["X-RateLimit-Remaining"] == "0"
    switch(alpha, "rate_limit", scope="wallet", omit=["Retry-After", "X-RateLimit-Reset"])
    r = alpha.get(WALLETS)
    assert r.status_code == 429 and "Retry-After" not in r.headers and "X-RateLimit-Reset" not in r.headers
    assert r.headers["X-RateLimit-Limit"] == "1000"
    off(alpha)
    assert "X-RateLimit-Reset" in alpha.get(WALLETS).headers      # answers after the fault are whole


# ---- slow -------------------------------------------------------------------------------------
def test_slow_answer_passes_the_client_timeout_but_the_work_is_done(alpha, sb):
    switch(alpha, "slow", scope="recharges", seconds=1.5)
    body = json.dumps({"mobile_number": "9000000002", "operator_id": 1, "amount": 100})
    with pytest.raises(requests.ReadTimeout):
        # the signed request of the helper, with a read timeout shorter than the hold
        prepared = alpha.session.prepare_request(requests.Request(
            "POST", alpha.base + RECHARGES, data=body.encode(),
            headers=_signed_headers(alpha, "POST", RECHARGES, body.encode(), "slow-key-0001")))
        alpha.session.send(prepared, timeout=(2, 0.3))
    # The client gave up 0.3 s after sending, which on a busy machine can be before the sandbox got to the
    # request at all: the sandbox counts the fault once its answer is made (the recharge committed) and
    # before it holds it back, so wait for the count, not for an amount of time.
    deadline = time.monotonic() + 30
    while sb.faults_injected.get("slow", 0) < 1:
        assert time.monotonic() < deadline, "the slow request was never answered"
        time.sleep(0.01)
    off(alpha)
    found = alpha.get(RECHARGES, {"search": "9000000002"}).json()
    assert [rc["status"] for rc in found] == ["SUCCESS"]       # committed before the hold
    assert alpha.get(WALLETS, ).status_code == 200


def _signed_headers(api: Api, method, path, data: bytes, key: str) -> dict:
    import time

    from tests.sandbox.sandbox_helpers import hand_signature
    ts = str(int(time.time()))
    sig = hand_signature(api.client.secret, ts, method, path, data)
    return api.headers({"Content-Type": "application/json", "X-Timestamp": ts,
                        "X-Signature": f"t={ts},v1={sig}", "Idempotency-Key": key})


# ---- malformed_json ---------------------------------------------------------------------------
def test_malformed_json_cuts_2xx_bodies_after_the_commit(alpha, sb):
    switch(alpha, "malformed_json", scope="orders")
    r = alpha.order(key="malformed-order-1")
    assert r.status_code == 200
    with pytest.raises(ValueError):
        json.loads(r.content)
    assert len(sb.orders) == 1                                 # the order exists
    bad = alpha.get(ORDERS, {"status": "nope"})                # "[]" cut -> "["
    assert bad.status_code == 200 and bad.content == b"["
    assert alpha.order(product_id=99).json()["error"] == "NotFound"   # errors stay whole
    off(alpha)
    replayed = alpha.order(key="malformed-order-1")
    assert replayed.json()["id"] == next(iter(sb.orders))     # the key replays the real answer


# ---- missing_fields ---------------------------------------------------------------------------
def _three_recharges(alpha):
    return [alpha.recharge(mobile=f"900000000{d}").json()["id"] for d in (0, 1, 2)]


def test_missing_fields_drops_required_fields_of_chosen_records(alpha):
    ids = _three_recharges(alpha)
    switch(alpha, "missing_fields", scope="recharges", ids=[ids[1]])
    page = {rc["id"]: rc for rc in alpha.get(RECHARGES).json()}
    assert "status" not in page[ids[1]] and "reference_number" not in page[ids[1]]
    assert {"status", "reference_number"} <= set(page[ids[0]]) & set(page[ids[2]])
    assert "status" not in alpha.get(f"{RECHARGES}/{ids[1]}").json()
    assert "status" in alpha.get(f"{RECHARGES}/{ids[0]}").json()
    off(alpha)
    assert all("status" in rc for rc in alpha.get(RECHARGES).json())


def test_missing_fields_rate_picks_the_same_records_every_read(alpha):
    for d in range(10):
        alpha.recharge(mobile=f"90000001{d}0")
    switch(alpha, "missing_fields", scope="recharges", rate=0.5, fields=["status"])
    first = [("status" in rc) for rc in alpha.get(RECHARGES).json()]
    assert True in first and False in first                   # a page mixes good and bad
    assert [("status" in rc) for rc in alpha.get(RECHARGES).json()] == first


@pytest.mark.parametrize("path,fields,kind_check", [
    (TXNS, None, lambda rec: "amount" not in rec),
    (WALLETS, None, lambda rec: "balance" not in rec),
    (ORDERS, None, lambda rec: "status" not in rec),
])
def test_missing_fields_defaults_per_record_kind(alpha, path, fields, kind_check):
    alpha.order(product_id=7, denomination=10)
    switch(alpha, "missing_fields")
    records = alpha.get(path).json()
    assert records and all(kind_check(rec) for rec in records)


def test_missing_voucher_code_in_order_detail(alpha):
    oid = alpha.order(product_id=8, denomination=10, quantity=2).json()["id"]
    switch(alpha, "missing_fields", scope="GET /api/v1/orders/:id", fields=["card_number"])
    detail = alpha.get(f"{ORDERS}/{oid}").json()
    assert detail["status"] == "DELIVERED" and len(detail["vouchers"]) == 2
    assert all("card_number" not in v and v["pin_code"] for v in detail["vouchers"])
    assert all("status" in o for o in alpha.get(ORDERS).json())   # the list is out of scope


# ---- money_precision --------------------------------------------------------------------------
def test_money_precision_adds_a_third_decimal_to_strings_and_numbers(alpha):
    rid = alpha.recharge(mobile="9000000003", amount=100).json()["id"]
    alpha.order(product_id=7, denomination=10)
    switch(alpha, "money_precision")
    raw = alpha.get(f"{RECHARGES}/{rid}").text
    assert re.search(r'"face":100\.005[,}]', raw) and re.search(r'"payable":97\.505[,}]', raw)
    txn = alpha.get(TXNS).json()[0]
    assert txn["amount"] == "10.005" and Decimal(txn["balance_after"]).as_tuple().exponent == -3
    assert alpha.get(ORDERS).json()[0]["amount"] == "10.005"
    assert alpha.get(WALLETS).json()[0]["balance"].endswith("5")
    off(alpha)
    assert alpha.get(TXNS).json()[0]["amount"] == "10.00"


def test_the_sandbox_still_imports_none_of_the_kit():
    code = ("import sys, sandbox, sandbox.faults, sandbox.app; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('partnerkit', 'receiver', 'reconcile')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
