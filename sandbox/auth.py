"""Authentication: key/secret, request signatures (sign next to verify), rate limits.

Request signature (Authentication 4): hex HMAC-SHA256 keyed with the API secret over
``timestamp + METHOD + path + body`` (plain concatenation), sent as
``X-Signature: t=<timestamp>,v1=<hex>`` with ``X-Timestamp`` within 5 minutes.
Webhook signature (Events, Signature): hex HMAC-SHA256 keyed with the webhook token over
``timestamp + "." + raw body``.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import time

from .models import Client


class SignatureError(Exception):
    """A write request whose signature is missing, stale or wrong (message says which)."""


def sign_request(secret: str, timestamp: str | int, method: str, path: str, body: bytes) -> str:
    """Hex HMAC-SHA256 of timestamp + METHOD + path + body (the document's rule)."""
    message = str(timestamp).encode() + method.upper().encode() + path.encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: str | int, method: str, path: str,
                     body: bytes) -> str:
    """The X-Signature value: t=<timestamp>,v1=<hex>."""
    return f"t={timestamp},v1={sign_request(secret, timestamp, method, path, body)}"


def parse_signature(value: str) -> tuple[str | None, list[str]]:
    """(t, [v1 candidates]) from "t=<timestamp>,v1=<hex>"; other parts are ignored."""
    stamp, digests = None, []
    for part in value.strip().split(","):
        name, _, item = part.strip().partition("=")
        if name == "t":
            stamp = item.strip()
        elif name == "v1":
            digests.append(item.strip().lower())
    return stamp, digests


def verify_request(secrets: list[str], headers, method: str, path: str, query: str,
                   body: bytes, *, tolerance_s: int = 300, now: float | None = None) -> None:
    """Raise SignatureError unless one secret signed this request within the window.

    Both headers are required in the document's form (Authentication 4): X-Timestamp, and
    X-Signature as t=<timestamp>,v1=<hex> with t equal to X-Timestamp. A bare hex digest (the
    webhook form) is refused: accepting it here would let a client bug pass the sandbox.
    "path" is read as the request path with the /api/v1 prefix; when a query string is
    present, a signature over path or over path + "?" + query is accepted (both readings).
    The window is checked against real time: clients send wall-clock unix seconds.
    """
    raw = headers.get("X-Signature")
    if not raw:
        raise SignatureError("missing X-Signature header")
    stamp = headers.get("X-Timestamp")
    if not stamp:
        raise SignatureError("missing X-Timestamp header")
    stamp_in_sig, digests = parse_signature(raw)
    if stamp_in_sig is None or not digests:
        raise SignatureError("X-Signature must be t=<timestamp>,v1=<hex HMAC-SHA256>")
    if stamp_in_sig != stamp:
        raise SignatureError("t= in X-Signature differs from X-Timestamp")
    try:
        stamp_value = int(stamp)
    except ValueError:
        raise SignatureError("X-Timestamp must be unix seconds") from None
    now = time.time() if now is None else now
    if abs(now - stamp_value) > tolerance_s:
        raise SignatureError("X-Timestamp is outside the 5-minute window")
    paths = [path] + ([f"{path}?{query}"] if query else [])
    for secret in secrets:
        for candidate_path in paths:
            expected = sign_request(secret, stamp, method, candidate_path, body)
            if any(hmac.compare_digest(expected, d) for d in digests):
                return
    raise SignatureError("request signature does not match")


def sign_webhook(token: str, timestamp: str | int, body: bytes) -> str:
    """Hex HMAC-SHA256 of timestamp + "." + raw body, keyed with the webhook token."""
    return hmac.new(token.encode(), str(timestamp).encode() + b"." + body,
                    hashlib.sha256).hexdigest()


def authenticate(credentials: dict[str, tuple[Client, str]], key: str | None, secret: str | None) -> Client | None:
    """The client owning this live key (`Sandbox.credentials`: key -> client and secret) with this secret,
    compared in constant time; else None."""
    found = credentials.get(key or "")
    if found is None or not hmac.compare_digest(found[1].encode(), (secret or "").encode()):
        return None
    return found[0]


def take(sb, api_key: str, bucket: str, limit: int, window_s: int) -> dict:
    """Consume one request of a fixed window on the sandbox clock; report the window state.

    Returns {allowed, limit, remaining, reset_in} where reset_in is in real seconds, so
    Retry-After and X-RateLimit-Reset make sense to a client with a normal clock.
    """
    now = sb.clock.now().timestamp()
    with sb.lock:
        start, count = sb.rate_windows.get((api_key, bucket), (0.0, 0))
        if now >= start + window_s:
            start, count = now - (now % window_s), 0
        allowed = count < limit
        if allowed:
            count += 1
        sb.rate_windows[(api_key, bucket)] = (start, count)
    reset_in = max(1, math.ceil(sb.clock.real_seconds(start + window_s - now)))
    return {"allowed": allowed, "limit": limit, "remaining": max(0, limit - count),
            "reset_in": reset_in}
