"""POST /webhooks/partner: the receiver contract of DESIGN.md, step by step."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time

from flask import Blueprint, Response, current_app, jsonify, request

from partnerkit.errors import PartnerKitError, StorageError, VerificationError
from partnerkit.store import inbox
from partnerkit.timeutil import utcnow

from receiver.envelope import normalise
from receiver.signature import verify
from receiver.state import Receiver

MAX_BODY = 1024 * 1024  # 1 MiB
# Headers the receiver reads; WSGI hands them over as latin-1, they must be UTF-8.
READ_HEADERS = ("X-Timestamp", "X-Signature", "X-Webhook-ID", "X-Event-ID", "X-Event-Type",
                "X-SERVICE-WEBHOOK-TOKEN")
# Their WSGI environ keys (PEP 3333: HTTP_ + upper case, "-" -> "_"), read directly: cheaper
# than going through request.headers once per header on the hot path.
_ENVIRON_KEYS = tuple((name, "HTTP_" + name.upper().replace("-", "_")) for name in READ_HEADERS)
# The acknowledgements are constants: built once instead of serialised by jsonify per request.
_ACK_BODIES = {outcome: b'{"status":"%s"}\n' % outcome.encode() for outcome in
               (inbox.ACCEPTED, inbox.DUPLICATE, inbox.IGNORED)}
_UNAVAILABLE_BODY = b'{"status":"unavailable"}\n'
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

log = logging.getLogger(__name__)


def _receiver() -> Receiver:
    return current_app.extensions["partnerkit_receiver"]


def _request_id(environ: dict) -> str:
    """X-Request-ID when well-formed, else 32 random hex digits (a quarter of uuid4's cost)."""
    given = environ.get("HTTP_X_REQUEST_ID", "")
    return given if _REQUEST_ID.match(given) else os.urandom(16).hex()


def _decoded_headers(environ: dict) -> dict[str, str]:
    """The headers the receiver reads, as UTF-8 text; UnicodeError if any is not UTF-8."""
    decoded = {}
    for name, key in _ENVIRON_KEYS:
        value = environ.get(key)
        if value is not None:
            decoded[name] = value.encode("latin-1").decode("utf-8")
    return decoded


def _json(body: bytes, status: int, headers: dict | None = None) -> Response:
    return Response(body, status, headers, mimetype="application/json")


def _unavailable() -> Response:
    return _json(_UNAVAILABLE_BODY, 503, {"Retry-After": "60"})


def _reject(rx: Receiver, status: int, reason: str, request_id: str, started: float):
    rx.metrics.rejected_total(reason).inc()
    log.warning("webhook rejected", extra={"request_id": request_id, "reason": reason, "http_status": status,
                                           "remote": request.remote_addr,
                                           "ms": round((time.perf_counter() - started) * 1000, 2)})
    return jsonify(status="rejected", reason=reason), status


def receive():
    """Verify, normalise, deduplicate, persist, acknowledge; never call the provider from here."""
    started = time.perf_counter()
    rx = _receiver()
    environ = request.environ
    request_id = _request_id(environ)
    # 1. Size first, both declared and actually read (chunked bodies have no Content-Length).
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _reject(rx, 413, "body_too_large", request_id, started)
    body = request.stream.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        return _reject(rx, 413, "body_too_large", request_id, started)
    try:
        headers = _decoded_headers(environ)
    except UnicodeError:
        return _reject(rx, 400, "header_not_utf8", request_id, started)
    # 2-3. Timestamp window and signature, before anything is parsed.
    now = utcnow()
    try:
        try:
            verify(headers, body, rx.tokens(), now=now.timestamp(), tolerance_s=rx.config.tolerance_s)
        except VerificationError as exc:
            if exc.reason not in ("signature_mismatch", "no_token"):
                raise
            # A token registered moments ago may not be cached yet: re-read once, then decide.
            now = utcnow()
            verify(headers, body, rx.tokens(refresh=True), now=now.timestamp(), tolerance_s=rx.config.tolerance_s)
    except VerificationError as exc:
        return _reject(rx, 401, exc.reason, request_id, started)
    except (PartnerKitError, sqlite3.Error):  # the saved tokens cannot be read or decrypted
        log.exception("cannot read accepted tokens", extra={"request_id": request_id})
        rx.metrics.outcome("unavailable").inc()
        return _unavailable()
    # 4. Normalise; 5. one transaction: inbox row under a unique key, order state, fetch job.
    event = None
    try:
        event = normalise(body, headers)
        recorded = inbox.record(rx.db(), event, body, now=now, request_id=request_id,
                                webhook_id=headers.get("X-Webhook-ID"))
    except (StorageError, sqlite3.Error) as exc:
        rx.metrics.outcome("unavailable").inc()
        log.error("webhook not stored", extra={"request_id": request_id, "event_id": getattr(event, "event_id", None),
                                               "error": str(exc)[:200], "http_status": 503})
        return _unavailable()
    except Exception:  # a bug on a signed event: 503 so the provider retries; never a 500, never a 200
        rx.metrics.outcome("unavailable").inc()
        log.exception("webhook not stored: unexpected error", extra={
            "request_id": request_id, "event_id": getattr(event, "event_id", None), "http_status": 503})
        return _unavailable()
    elapsed = time.perf_counter() - started
    rx.metrics.outcome(recorded.outcome).inc()
    rx.metrics.ack_seconds.observe(elapsed)
    log.info("webhook", extra={"request_id": request_id, "event_id": event.event_id, "outcome": recorded.outcome,
                               "event_type": event.event_type, "order_id": event.order_id,
                               "order_status": recorded.order_status, "fetch_queued": recorded.fetch_queued,
                               "reason": event.quarantine, "ms": round(elapsed * 1000, 2)})
    return _json(_ACK_BODIES[recorded.outcome], 200)


def blueprint(path: str) -> Blueprint:
    """The webhook blueprint, mounted at the configured path (default /webhooks/partner)."""
    bp = Blueprint("webhooks", __name__)
    bp.add_url_rule(path, "receive", receive, methods=["POST"])
    return bp
