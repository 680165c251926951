"""create_app(): the Flask app of the sandbox, with auth, signatures, limits and stats."""
from __future__ import annotations

import re
import time
import uuid

from flask import Flask, g, request
from werkzeug.exceptions import HTTPException

from . import api_catalog, api_orders, api_recharges, api_webhooks, control
from .auth import SignatureError, authenticate, take, verify_request
from .errors import ApiError, render, shape_for
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
    me = authenticate(sb.clients, key, secret)
    if me is None:
        raise ApiError(401, "invalid API credentials", code="UNAUTHORIZED",
                       detail="unknown key or wrong secret")
    g.client = me
    if request.method in SIGNED_METHODS and sb.settings.require_signatures:
        try:
            verify_request([me.secret, me.signing_secret], request.headers, request.method,
                           request.path, request.query_string.decode("latin-1"),
                           request.get_data(cache=True),
                           tolerance_s=sb.settings.signature_tolerance_s)
        except SignatureError as exc:
            raise ApiError(401, f"invalid request signature: {exc}", code="INVALID_SIGNATURE",
                           detail=str(exc)) from exc
    if request.endpoint == "orders.create":     # Limits: its own 100 per minute
        state = take(sb, me.key, "order_create", sb.settings.order_create_per_minute, 60)
    else:                                        # Limits: general 1000 per hour
        state = take(sb, me.key, "general", sb.settings.hourly_limit, 3600)
    g.ratelimit = state
    if not state["allowed"]:
        with sb.lock:
            sb.rate_limited += 1
        raise ApiError(429, "rate limit exceeded", code="RATE_LIMIT_EXCEEDED",
                       headers={"Retry-After": str(state["reset_in"])})
    return None


def app_sandbox() -> Sandbox:
    """The Sandbox of the current app."""
    from flask import current_app
    return current_app.extensions["sandbox"]


def _decorate(response):
    state = g.get("ratelimit")
    if state is not None:
        response.headers["X-RateLimit-Limit"] = str(state["limit"])
        response.headers["X-RateLimit-Remaining"] = str(state["remaining"])
        response.headers["X-RateLimit-Reset"] = str(int(time.time()) + state["reset_in"])
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
