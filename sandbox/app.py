"""create_app(): the Flask app of the sandbox, with auth, signatures, limits and stats."""
from __future__ import annotations

import math
import re
import time
import uuid

from flask import Flask, g, request
from werkzeug.exceptions import HTTPException

from . import api_catalog, api_orders, api_recharges, api_webhooks, control, faults
from .auth import SignatureError, authenticate, take, verify_request
from .errors import ApiError, render, shape_for
from .money import BadJSON, dumps, loads
from .settings import SandboxSettings
from .state import Sandbox

API_PREFIX = "/api/v1"
SIGNED_METHODS = ("POST", "PUT", "DELETE")      # Authentication 4: write requests
_CONVERTER = re.compile(r"<(?:[^:<>]+:)?[^<>]+>")


def create_app(settings: SandboxSettings | None = None) -> Flask:
    """Build the sandbox app; its state is app.extensions["sandbox"]."""
    app = Flask("sandbox")
    sb = Sandbox(settings)
    app.extensions["sandbox"] = sb
    for blueprint in (api_recharges.bp, api_orders.bp, api_catalog.bp, api_webhooks.bp,
                      control.bp):
        app.register_blueprint(blueprint)
    app.before_request(_guard)
    app.after_request(_decorate)
    app.after_request(_inject_after)       # runs first: after_request runs in reverse
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    return app


def path_template(method: str) -> str:
    """'GET /api/v1/recharges/:id' for the matched rule of this request."""
    rule = request.url_rule.rule if request.url_rule is not None else "(unmatched)"
    return f"{method} {_CONVERTER.sub(':id', rule)}"


def _guard():
    """Count, authenticate, check the signature, then the rate limit, for every /api/v1 call."""
    if not request.path.startswith(API_PREFIX):
        return None
    sb = app_sandbox()
    with sb.lock:
        sb.calls[path_template(request.method)] += 1
    key, secret = request.headers.get("X-API-Key"), request.headers.get("X-API-Secret")
    if not key or not secret:
        raise ApiError(401, "missing API credentials", code="UNAUTHORIZED",
                       detail="X-API-Key and X-API-Secret are required")
    me = authenticate(sb.credentials, key, secret)
    if me is None:
        raise ApiError(401, "invalid API credentials", code="UNAUTHORIZED",
                       detail="unknown key or wrong secret")
    g.client = me
    g.faults = active = _draw_faults(sb, request.endpoint, path_template(request.method))
    if request.method in SIGNED_METHODS and sb.settings.require_signatures:
        try:
            # The secret of the key this request came with (a rotated key has its own), or the signing secret.
            verify_request([secret, me.signing_secret], request.headers, request.method,
                           request.path, request.query_string.decode("latin-1"),
                           request.get_data(cache=True),
                           tolerance_s=sb.settings.signature_tolerance_s)
        except SignatureError as exc:
            raise ApiError(401, f"invalid request signature: {exc}", code="INVALID_SIGNATURE",
                           detail=str(exc)) from exc
    if request.endpoint == "orders.create":     # Limits: its own 100 per minute
        bucket, limit, window = "order_create", sb.settings.order_create_per_minute, 60
    else:                                        # Limits: general 1000 per hour
        bucket, limit, window = "general", sb.settings.hourly_limit, 3600
    if "rate_limit" in active:                   # injected: refused before the window counts it
        fault = active["rate_limit"]
        seconds = max(1, math.ceil(fault.seconds or 0))
        g.ratelimit = {"allowed": False, "limit": limit, "remaining": 0, "reset_in": seconds,
                       "omit": fault.omit}
        _count_fault(sb, "rate_limit")
        raise ApiError(429, "rate limit exceeded", code="RATE_LIMIT_EXCEEDED",
                       headers={} if "Retry-After" in fault.omit else {"Retry-After": str(seconds)},
                       detail="fault 'rate_limit' is set")
    state = take(sb, me.key, bucket, limit, window)
    g.ratelimit = state
    if not state["allowed"]:
        with sb.lock:
            sb.rate_limited += 1
        raise ApiError(429, "rate limit exceeded", code="RATE_LIMIT_EXCEEDED",
                       headers={"Retry-After": str(state["reset_in"])})
    if "http_500" in active:                     # before the view: nothing is written
        _count_fault(sb, "http_500")
        raise ApiError(500, _FAULT_500_MESSAGES.get(request.endpoint, "internal server error"),
                       detail="fault 'http_500' is set")
    return None


_FAULT_500_MESSAGES = {"orders.create": "Failed to create order",      # Errors tables
                       "orders.get_order": "Failed to retrieve order",
                       "orders.list_orders": "Failed to retrieve order",
                       "recharges.preview": "pricing could not be resolved"}


def _draw_faults(sb: Sandbox, endpoint: str | None, template: str) -> dict:
    """The general faults that hit this request: in scope, and drawn under their rate.

    Record-level faults are not drawn here (they pick records, see faults.Fault.picks).
    """
    hit = {}
    current = sb.settings.faults
    for name, fault in current.items():
        if name not in faults.GENERAL_FAULTS or not fault.applies_to(endpoint, template):
            continue
        if name not in faults.RECORD_FAULTS and fault.rate < 1:
            with sb.lock:
                if sb.fault_rng.random() >= fault.rate:
                    continue
        hit[name] = fault
    return hit


def _count_fault(sb: Sandbox, name: str) -> None:
    with sb.lock:
        sb.faults_injected[name] += 1


def _inject_after(response):
    """Answer-side faults: damaged records, a cut body, a late answer (work already done)."""
    active = g.get("faults")
    if not active:
        return response
    sb = app_sandbox()
    ok = 200 <= response.status_code < 300
    record_faults = [f for n, f in active.items() if n in faults.RECORD_FAULTS]
    if ok and record_faults and request.endpoint in faults.READ_RECORDS:
        try:
            body = loads(response.get_data())
        except BadJSON:
            body = None
        applied = set() if body is None else faults.damage_body(
            body, request.endpoint, record_faults, sb.settings.seed)
        if applied:
            response.set_data(dumps(body))
            for name in sorted(applied):
                _count_fault(sb, name)
    if ok and "malformed_json" in active:
        data = response.get_data()
        response.set_data(data[: len(data) // 2] if len(data) > 1 else b"{")
        _count_fault(sb, "malformed_json")
    if "slow" in active:
        _count_fault(sb, "slow")
        time.sleep(active["slow"].seconds or 0)
    return response


def app_sandbox() -> Sandbox:
    """The Sandbox of the current app."""
    from flask import current_app
    return current_app.extensions["sandbox"]


def _decorate(response):
    state = g.get("ratelimit")
    if state is not None:
        headers = {"X-RateLimit-Limit": str(state["limit"]),
                   "X-RateLimit-Remaining": str(state["remaining"]),
                   "X-RateLimit-Reset": str(int(time.time()) + state["reset_in"])}
        for name, value in headers.items():
            if name not in state.get("omit", ()):
                response.headers[name] = value
    if request.path.startswith(API_PREFIX):
        response.headers.setdefault("X-Trace-ID", uuid.uuid4().hex)
    return response


def _api_error(err: ApiError):
    return render(err, shape_for(request.endpoint))


def _http_error(exc: HTTPException):
    if not request.path.startswith(API_PREFIX) and not request.path.startswith("/sandbox"):
        return exc
    message = {404: "no such endpoint", 405: "method not allowed"}.get(
        exc.code or 500, exc.description or "error")
    return render(ApiError(exc.code or 500, message), shape_for(request.endpoint))
