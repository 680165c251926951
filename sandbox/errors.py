"""ApiError and the four error body shapes of the document (section Errors).

    shape           body                                          used by
    recharge        {"error": {"message"}}                        recharge endpoints
    order_create    {"error": "BadRequest"|..., "message"}        POST /api/v1/orders
    order_read      {"error": "not_found"|..., "message"}         order list and detail
    general         {"error": {"name", "code", "message"}}        everything else

A view raises ApiError(status, message); the app renders it in the shape of the endpoint.
"""
from __future__ import annotations

from .money import dumps

RECHARGE, ORDER_CREATE, ORDER_READ, GENERAL = "recharge", "order_create", "order_read", "general"

# Errors: order creation names.  429 has no documented name: TooManyRequests is our choice.
_ORDER_CREATE_NAMES = {400: "BadRequest", 401: "UnauthorizedAccess", 404: "NotFound",
                       429: "TooManyRequests", 500: "InternalServerError"}
_ORDER_CREATE_FIXED = {401: "User is not authorised to perform this action"}
# Errors: order list and order detail values and their fixed messages.
_ORDER_READ_CODES = {401: "unauthorized", 404: "not_found", 429: "rate_limit_exceeded",
                     500: "internal_error"}
_ORDER_READ_FIXED = {401: "Invalid or expired access token",
                     404: "No Matching Result Found!",
                     429: "Too many requests. Please try again later."}
_GENERAL_NAMES = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                  405: "MethodNotAllowed", 409: "Conflict", 429: "TooManyRequests",
                  500: "InternalServerError", 503: "ServiceUnavailable"}

_ENDPOINT_SHAPES = {"orders.create": ORDER_CREATE, "orders.list_orders": ORDER_READ,
                    "orders.get_order": ORDER_READ}


class ApiError(Exception):
    """An error answer: HTTP status, message, optional machine code and extra headers."""

    def __init__(self, status: int, message: str = "", *, code: str | None = None,
                 headers: dict | None = None, detail: str | None = None, empty: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})
        self.detail = detail          # sandbox-only explanation, sent as X-Sandbox-Reason
        self.empty = empty            # a bare status with no body (service fault)


def shape_for(endpoint: str | None) -> str:
    """The error shape used by a Flask endpoint name."""
    if endpoint is None:
        return GENERAL
    if endpoint.startswith("recharges."):
        return RECHARGE
    return _ENDPOINT_SHAPES.get(endpoint, GENERAL)


def error_body(err: ApiError, shape: str) -> dict:
    """The JSON body of `err` in `shape`."""
    status = err.status
    if shape == RECHARGE:
        return {"error": {"message": err.message}}
    if shape == ORDER_CREATE:
        fallback = "BadRequest" if status < 500 else "InternalServerError"
        name = _ORDER_CREATE_NAMES.get(status, fallback)
        return {"error": name, "message": _ORDER_CREATE_FIXED.get(status, err.message)}
    if shape == ORDER_READ:
        code = _ORDER_READ_CODES.get(status, "internal_error" if status >= 500 else "bad_request")
        return {"error": code, "message": _ORDER_READ_FIXED.get(status, err.message)}
    name = _GENERAL_NAMES.get(status, "Error")
    code = err.code or _snake(name)
    return {"error": {"name": name, "code": code, "message": err.message}}


def render(err: ApiError, shape: str) -> tuple[str, int, dict]:
    """(body text, status, headers) for `err` in `shape`."""
    headers = {"Content-Type": "application/json", **err.headers}
    if err.detail:
        headers["X-Sandbox-Reason"] = err.detail
    if err.empty:
        return "", err.status, {k: v for k, v in headers.items() if k != "Content-Type"}
    return dumps(error_body(err, shape)), err.status, headers


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.upper())
    return "".join(out)
