"""Authentication (401 per error shape), request signatures, rate limits, call counting."""
from __future__ import annotations

import time

import pytest
import requests

from tests.sandbox.sandbox_helpers import Api, hand_signature, make_settings

# (method, path, expected 401 body) - each endpoint family in its own shape (Errors).
UNAUTHORIZED_SHAPES = [
    ("GET", "/api/v1/recharges", {"error": {"message": "invalid API credentials"}}),
    ("POST", "/api/v1/recharge/charges", {"error": {"message": "invalid API credentials"}}),
    ("POST", "/api/v1/orders", {"error": "UnauthorizedAccess",
                                "message": "User is not authorised to perform this action"}),
    ("GET", "/api/v1/orders", {"error": "unauthorized",
                               "message": "Invalid or expired access token"}),
    ("GET", "/api/v1/orders/5001", {"error": "unauthorized",
                                    "message": "Invalid or expired access token"}),
    ("GET", "/api/v1/wallets", {"error": {"name": "Unauthorized", "code": "UNAUTHORIZED",
                                          "message": "invalid API credentials"}}),
    ("GET", "/api/v1/webhooks/deliveries", {"error": {"name": "Unauthorized",
                                                      "code": "UNAUTHORIZED",
                                                      "message": "invalid API credentials"}}),
]


@pytest.mark.parametrize("method,path,body", UNAUTHORIZED_SHAPES)
def test_wrong_secret_is_401_in_the_endpoint_shape(server, method, path, body):
    r = requests.request(method, server.base_url + path,
                         headers={"X-API-Key": "pk_sandbox_alpha", "X-API-Secret": "wrong"})
    assert r.status_code == 401
    assert r.json() == body


@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "pk_sandbox_alpha"},
                                     {"X-API-Secret": "sk_sandbox_alpha_3f9a1c7e5b2d4068"},
                                     {"X-API-Key": "pk_nope", "X-API-Secret": "x"}])
def test_missing_or_unknown_credentials_are_401(server, headers):
    r = requests.get(server.base_url + "/api/v1/recharges/1", headers=headers)
    assert r.status_code == 401
    assert "message" in r.json()["error"]


def test_good_signature_is_accepted(alpha):
    r = alpha.post("/api/v1/recharge/charges", {"operator_id": 1, "amount": 100})
    assert r.status_code == 200


def _signed_preview(api, *, ts=None, sig=None, secret=None, path="/api/v1/recharge/charges",
                    header=None, drop=()):
    body = b'{"operator_id": 1, "amount": 100}'
    ts = str(int(time.time())) if ts is None else ts
    sig = sig or hand_signature(secret or api.client.secret, ts, "POST",
                                path, body)
    headers = {"X-Timestamp": ts, "X-Signature": header or f"t={ts},v1={sig}"}
    for name in drop:
        headers.pop(name)
    return api.send("POST", "/api/v1/recharge/charges", raw=body, headers=headers, sign=False)


def test_signature_by_hand_is_pinned(alpha):
    # Pin the document's rule on fixed inputs: timestamp + METHOD + path + body.
    assert hand_signature("secret", "1700000000", "POST", "/api/v1/recharges", b"{}") == (
        __import__("hmac").new(b"secret", b"1700000000POST/api/v1/recharges{}",
                               "sha256").hexdigest())
    from sandbox.auth import sign_request
    assert sign_request("secret", "1700000000", "POST", "/api/v1/recharges", b"{}") == \
        hand_signature("secret", "1700000000", "POST", "/api/v1/recharges", b"{}")


@pytest.mark.parametrize("case,kwargs,reason", [
    ("wrong secret", {"secret": "sk_wrong"}, "does not match"),
    ("wrong path", {"path": "/recharge/charges"}, "does not match"),
    ("stale by 6 minutes", {"ts_offset": -360}, "5-minute window"),
    ("future by 6 minutes", {"ts_offset": 360}, "5-minute window"),
    ("missing signature", {"drop": ("X-Signature",)}, "missing X-Signature"),
    # Authentication 4 sends both headers, the signature as t=<ts>,v1=<hex>: nothing less passes.
    ("missing timestamp", {"drop": ("X-Timestamp",)}, "missing X-Timestamp"),
    ("bare hex digest", {"bare": True}, "t=<timestamp>,v1="),
    ("sha256= prefix", {"bare": "sha256="}, "t=<timestamp>,v1="),
    ("t= without v1=", {"header": "t={ts}"}, "t=<timestamp>,v1="),
    ("t= differs", {"header": "t=1,v1={sig}"}, "differs from X-Timestamp"),
    ("garbage digest", {"sig": "00" * 32}, "does not match"),
])
def test_bad_signatures_are_401(alpha, case, kwargs, reason):
    kwargs = dict(kwargs)
    if "ts_offset" in kwargs:             # computed now, not at collection time
        kwargs["ts"] = str(int(time.time()) + kwargs.pop("ts_offset"))
    if "bare" in kwargs or "header" in kwargs:
        ts = kwargs["ts"] = str(int(time.time()))
        sig = hand_signature(alpha.client.secret, ts, "POST", "/api/v1/recharge/charges",
                             b'{"operator_id": 1, "amount": 100}')
        prefix = kwargs.pop("bare", None)
        kwargs["header"] = (kwargs.get("header") or "{prefix}{sig}").format(
            ts=ts, sig=sig, prefix=prefix if isinstance(prefix, str) else "")
    r = _signed_preview(alpha, **kwargs)
    assert r.status_code == 401, case
    assert r.json()["error"]["message"].startswith("invalid request signature")
    assert reason in r.headers["X-Sandbox-Reason"]


def test_the_credentials_signing_secret_is_accepted_as_well_as_the_api_secret(alpha):
    # Authentication 4 keys the HMAC with the API secret, 5 with the credential's signing secret.
    assert _signed_preview(alpha).status_code == 200
    assert _signed_preview(alpha, secret=alpha.client.signing_secret).status_code == 200


def test_signature_with_or_without_query_string(alpha):
    body = b'{"name":"h","url":"https://example.com/h","events":["order.created"]}'
    path = "/api/v1/webhooks"
    for signed_path in (path, path + "?x=1"):
        ts = str(int(time.time()))
        sig = hand_signature(alpha.client.secret, ts, "POST", signed_path, body)
        r = alpha.send("POST", path + "?x=1", raw=body, sign=False,
                       headers={"X-Timestamp": ts, "X-Signature": f"t={ts},v1={sig}"})
        assert r.status_code == 201, signed_path


def test_reads_need_no_signature_and_switch_turns_check_off(alpha, sb):
    assert alpha.get("/api/v1/recharges").status_code == 200
    assert alpha.post("/api/v1/recharge/charges", {"operator_id": 1, "amount": 1},
                      sign=False).status_code == 401
    sb.settings.require_signatures = False
    assert alpha.post("/api/v1/recharge/charges", {"operator_id": 1, "amount": 1},
                      sign=False).status_code == 200


@pytest.mark.parametrize("settings", [make_settings(hourly_limit=3)])
def test_general_hourly_limit_429_with_retry_after(alpha, server, settings):
    first = alpha.get("/api/v1/wallets")
    assert first.headers["X-RateLimit-Limit"] == "3"
    assert first.headers["X-RateLimit-Remaining"] == "2"
    assert int(first.headers["X-RateLimit-Reset"]) > time.time()
    alpha.get("/api/v1/recharges")
    alpha.get("/api/v1/orders/1")
    r = alpha.get("/api/v1/recharges")
    assert r.status_code == 429
    assert r.json() == {"error": {"message": "rate limit exceeded"}}
    assert 1 <= int(r.headers["Retry-After"]) <= 3600
    listing = alpha.get("/api/v1/orders")
    assert listing.status_code == 429
    assert listing.json() == {"error": "rate_limit_exceeded",
                              "message": "Too many requests. Please try again later."}
    # order creation has its own allowance, untouched by the hourly budget
    assert alpha.order(product_id=7, denomination=10).status_code == 200
    server.clock.advance(3600)
    assert alpha.get("/api/v1/recharges").status_code == 200
    assert server.sandbox.rate_limited == 2


@pytest.mark.parametrize("settings", [make_settings(order_create_per_minute=2)])
def test_order_creation_per_minute_limit(alpha, server, settings):
    assert alpha.order(product_id=7, denomination=10).status_code == 200
    assert alpha.order(product_id=7, denomination=10).status_code == 200
    r = alpha.order(product_id=7, denomination=10)
    assert r.status_code == 429
    assert r.json()["error"] == "TooManyRequests"
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert alpha.get("/api/v1/wallets").status_code == 200      # general budget unaffected
    server.clock.advance(60)
    assert alpha.order(product_id=7, denomination=10).status_code == 200


def test_limits_are_per_api_key(server, alpha, beta, sb):
    sb.settings.hourly_limit = 1
    assert alpha.get("/api/v1/wallets").status_code == 200
    assert alpha.get("/api/v1/wallets").status_code == 429
    assert beta.get("/api/v1/wallets").status_code == 200


def test_stats_count_calls_per_path_template(alpha, server):
    alpha.get("/api/v1/recharges")
    alpha.get("/api/v1/recharges/123")
    alpha.get("/api/v1/recharges/456")
    requests.get(server.base_url + "/api/v1/wallets")            # 401 still counts
    stats = alpha.control("GET", "/stats").json()
    assert stats["calls"] == {"GET /api/v1/recharges": 1, "GET /api/v1/recharges/:id": 2,
                              "GET /api/v1/wallets": 1}
    assert stats["total"] == 4
    alpha.control("POST", "/stats/reset")
    assert alpha.control("GET", "/stats").json()["total"] == 0


def test_unknown_api_path_is_404_general_shape(alpha):
    r = alpha.get("/api/v1/nothing-here")
    assert r.status_code == 404
    assert r.json()["error"]["name"] == "NotFound"


def test_a_rotated_key_is_the_same_client_until_the_old_one_is_revoked(server, alpha):
    """Authentication 2: keys are "rotatable on request". The new key sees the same wallets and records,
    signs with its own secret, and the old key is refused once revoked."""
    from types import SimpleNamespace

    made = alpha.recharge(mobile="9811111110", amount=100)
    assert made.status_code == 200
    issued = alpha.control("POST", "/clients/alpha/keys", {})
    assert issued.status_code == 201 and issued.json()["client"] == "alpha"
    rotated = Api(server, SimpleNamespace(key=issued.json()["key"], secret=issued.json()["secret"]))
    assert rotated.get("/api/v1/wallets").json() == alpha.get("/api/v1/wallets").json()
    assert [w["id"] for w in rotated.get("/api/v1/wallets").json()] == [1, 2]
    assert rotated.get(f"/api/v1/recharges/{made.json()['id']}").status_code == 200
    assert rotated.post("/api/v1/recharge/charges", {"operator_id": 1, "amount": 100}).status_code == 200
    listed = alpha.control("GET", "/clients").json()
    assert next(c for c in listed if c["name"] == "alpha")["keys"] == ["pk_sandbox_alpha", issued.json()["key"]]

    assert alpha.control("DELETE", "/clients/alpha/keys/pk_sandbox_alpha").json()["keys"] == [issued.json()["key"]]
    assert alpha.get("/api/v1/wallets").status_code == 401
    assert rotated.get("/api/v1/wallets").status_code == 200
    assert alpha.control("DELETE", f"/clients/alpha/keys/{issued.json()['key']}").status_code == 409  # its last
    assert alpha.control("DELETE", "/clients/beta/keys/pk_sandbox_alpha").status_code == 404  # not beta's
    assert alpha.control("POST", "/clients/beta/keys", {"key": issued.json()["key"]}).status_code == 409
