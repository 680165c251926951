"""POST /webhooks/partner: the receiver contract of DESIGN.md, step by step.

`handle(rx, environ)` does the work on the bare WSGI environ and returns a `Reply`; it imports
no Flask. `WebhookRoute` serves POST on the webhook path straight from it, in front of Flask
(`create_app` installs it as the app's `wsgi_app`); every other request, and every other method
on that path (405 with `Allow: POST`), goes through Flask as usual. The Flask rule stays
registered with an adapter to the same `handle`, so the app's URL map tells the truth and a
test client or server that bypasses the middleware gets the same answers.

Why a route outside Flask: the webhook is the one hot path. Flask's request context, URL
matching, signals and response object cost about as much per delivery as verifying the
signature and parsing the body together (docs/receiver.md, "Benchmark"), and the handler reads
six headers and one body: nothing Flask offers is used on the way.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Callable, Iterable

from werkzeug.wsgi import get_content_length, get_input_stream

from partnerkit.errors import PartnerKitError, StorageError, VerificationError
from partnerkit.store import inbox
from partnerkit.timeutil import utcnow

from receiver.envelope import normalise
from receiver.signature import verify
from receiver.state import Receiver

if TYPE_CHECKING:
    from flask import Blueprint

MAX_BODY = 1024 * 1024  # 1 MiB
# Headers the receiver reads; WSGI hands them over as latin-1, they must be UTF-8.
READ_HEADERS = ("X-Timestamp", "X-Signature", "X-Webhook-ID", "X-Event-ID", "X-Event-Type",
                "X-SERVICE-WEBHOOK-TOKEN")
# Their WSGI environ keys (PEP 3333: HTTP_ + upper case, "-" -> "_"), read directly.
_ENVIRON_KEYS = tuple((name, "HTTP_" + name.upper().replace("-", "_")) for name in READ_HEADERS)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
FORWARDED_FOR_LOGGED = 200  # characters of X-Forwarded-For a rejection's log line keeps

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    """What the webhook answers: status, JSON body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    def wsgi_headers(self) -> list[tuple[str, str]]:
        return [("Content-Type", "application/json"), ("Content-Length", str(len(self.body))), *self.headers]


# The acknowledgements are constants, built once.
_UNAVAILABLE = Reply(503, b'{"status":"unavailable"}\n', (("Retry-After", "60"),))
_ACKS = {outcome: Reply(200, b'{"status":"%s"}\n' % outcome.encode())
         for outcome in (inbox.ACCEPTED, inbox.DUPLICATE, inbox.IGNORED)}
_STATUS_LINES = {status: f"{status} {HTTPStatus(status).phrase}" for status in (200, 400, 401, 413, 503)}


def _request_id(environ: dict) -> str:
    """X-Request-ID when well-formed, else 32 random hex digits (a quarter of uuid4's cost)."""
    given = environ.get("HTTP_X_REQUEST_ID")
    return given if given and _REQUEST_ID.match(given) else os.urandom(16).hex()


def _decoded_headers(environ: dict) -> dict[str, str]:
    """The headers the receiver reads, as UTF-8 text; UnicodeError if any is not UTF-8."""
    decoded = {}
    for name, key in _ENVIRON_KEYS:
        value = environ.get(key)
        if value is not None:  # ASCII reads the same as latin-1 and as UTF-8: nothing to re-decode
            decoded[name] = value if value.isascii() else value.encode("latin-1").decode("utf-8")
    return decoded


def _content_length(environ: dict) -> int | None:
    """werkzeug's get_content_length: a plain Content-Length of ASCII digits without Transfer-Encoding (a body
    sent whole) is read here (0.5 us against 1.3); anything else is werkzeug's to read, as before."""
    value = environ.get("CONTENT_LENGTH")
    if value is not None and value.isdigit() and value.isascii() and "HTTP_TRANSFER_ENCODING" not in environ:
        return int(value)
    return get_content_length(environ)


def _forwarded_for(environ: dict) -> str | None:
    """X-Forwarded-For as a proxy in front set it (deploy/nginx), for the log only: behind nginx
    REMOTE_ADDR is always 127.0.0.1, and this is how a forged delivery is traced to its sender. Never
    trusted for anything (any client can send the header); cut short, since its length is the client's."""
    value = environ.get("HTTP_X_FORWARDED_FOR")
    return None if value is None else value[:FORWARDED_FOR_LOGGED]


def _reject(rx: Receiver, environ: dict, status: int, reason: str, request_id: str, started: float) -> Reply:
    rx.metrics.rejected_total(reason).inc()
    rx.refused(reason)  # for `partnerkit status`: saved within seconds, off the request (receiver.refusals)
    log.warning("webhook rejected", extra={"request_id": request_id, "reason": reason, "http_status": status,
                                           "remote": environ.get("REMOTE_ADDR"),
                                           "forwarded_for": _forwarded_for(environ),
                                           "ms": round((time.perf_counter() - started) * 1000, 2)})
    return Reply(status, json.dumps({"status": "rejected", "reason": reason}).encode() + b"\n")


def handle(rx: Receiver, environ: dict) -> Reply:
    """Verify, normalise, deduplicate, persist, acknowledge; never call the provider from here."""
    started = time.perf_counter()
    request_id = _request_id(environ)
    # Steps as DESIGN.md, "Receiver (contract)", numbers them (docs/receiver.md, "The request, step by step").
    # 1. Size first, both declared and actually read (chunked bodies have no Content-Length).
    declared = _content_length(environ)
    if declared is not None and declared > MAX_BODY:
        return _reject(rx, environ, 413, "body_too_large", request_id, started)
    # A server that ends the body itself (gunicorn: wsgi.input_terminated) hands over a stream werkzeug would return
    # as it is, after parsing Content-Length a second time.
    stream = environ["wsgi.input"] if environ.get("wsgi.input_terminated") else get_input_stream(environ)
    body = stream.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        return _reject(rx, environ, 413, "body_too_large", request_id, started)
    try:
        headers = _decoded_headers(environ)
    except UnicodeError:
        return _reject(rx, environ, 400, "header_not_utf8", request_id, started)
    # 1 (the headers present), 2. the timestamp window, 3. the signature: before anything is parsed.
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
        return _reject(rx, environ, 401, exc.reason, request_id, started)
    except (PartnerKitError, sqlite3.Error):  # the saved tokens cannot be read: Receiver.tokens logged why, once
        rx.metrics.outcome("unavailable").inc()
        return _UNAVAILABLE
    # 4. Parse and normalise; 5. one transaction: inbox row under a unique key, order state, fetch job.
    event = None
    try:
        event = normalise(body, headers)
        recorded = inbox.record(rx.writer(), event, body, cipher=rx.cipher, now=now, request_id=request_id,
                                webhook_id=headers.get("X-Webhook-ID"))
    except (StorageError, sqlite3.Error) as exc:
        rx.metrics.outcome("unavailable").inc()
        rx.reopen_later()  # a connection opened while the file was read-only stays read-only
        log.error("webhook not stored", extra={"request_id": request_id, "event_id": getattr(event, "event_id", None),
                                               "error": str(exc)[:200], "http_status": 503})
        return _UNAVAILABLE
    except Exception:  # a bug on a signed event: 503 so the provider retries; never a 500, never a 200
        rx.metrics.outcome("unavailable").inc()
        log.exception("webhook not stored: unexpected error", extra={
            "request_id": request_id, "event_id": getattr(event, "event_id", None), "http_status": 503})
        return _UNAVAILABLE
    elapsed = time.perf_counter() - started
    rx.metrics.outcome(recorded.outcome).inc()
    rx.metrics.ack_seconds.observe(elapsed)
    # Accepted and duplicate deliveries are the normal case: each is already a row of the inbox
    # (`partnerkit events list`, with its request id) and a line of the access log, so their JSON
    # line is DEBUG; at INFO it cost a worker about a tenth of its time per delivery. A body kept
    # but quarantined needs someone to look: WARNING.
    if event.dropped and recorded.outcome != inbox.DUPLICATE:
        # A figure of the event (a hint: amount, quantity, delivered count) that could not be read was left out and the
        # event applied without it; once per stored event, naming the key in data and why (the body keeps the value).
        log.warning("webhook figure dropped", extra={
            "request_id": request_id, "event_id": event.event_id, "event_type": event.event_type,
            "order_id": event.order_id, "dropped": dict(event.dropped)})
    level = logging.WARNING if recorded.outcome == inbox.IGNORED else logging.DEBUG
    if log.isEnabledFor(level):
        log.log(level, "webhook", extra={
            "request_id": request_id, "event_id": event.event_id, "outcome": recorded.outcome,
            "event_type": event.event_type, "order_id": event.order_id, "order_status": recorded.order_status,
            "fetch_queued": recorded.fetch_queued, "reason": recorded.reason or event.quarantine, "ms": round(elapsed * 1000, 2)})
    return _ACKS[recorded.outcome]


class WebhookRoute:
    """WSGI middleware: POST on the webhook path is answered by `handle`; anything else goes to `app`."""

    def __init__(self, app: Callable, path: str, receiver: Receiver) -> None:
        self.app = app
        self.path = path
        self.receiver = receiver

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != self.path or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        try:
            reply = handle(self.receiver, environ)
        except Exception:  # outside handle's own guards (a bug): still never a 500 to the provider
            log.exception("webhook not handled: unexpected error", extra={"http_status": 503})
            reply = _UNAVAILABLE
        start_response(_STATUS_LINES[reply.status], reply.wsgi_headers())
        return [reply.body]


def blueprint(path: str) -> Blueprint:
    """The webhook rule on Flask's URL map (405 for other methods), answering through `handle` too."""
    from flask import Blueprint, Response, current_app, request  # noqa: F811 (the run-time import)

    def receive() -> Response:
        reply = handle(current_app.extensions["partnerkit_receiver"], request.environ)
        return Response(reply.body, reply.status, list(reply.headers), mimetype="application/json")

    bp = Blueprint("webhooks", __name__)
    bp.add_url_rule(path, "receive", receive, methods=["POST"])
    return bp
