"""GET /healthz (process up), /readyz (database writable, tokens readable), /metrics (Prometheus text)."""

from __future__ import annotations

import logging
import sqlite3

from flask import Blueprint, Response, current_app, jsonify

from partnerkit.errors import PartnerKitError, StorageError
from partnerkit.store import inbox

bp = Blueprint("health", __name__)
log = logging.getLogger(__name__)


@bp.get("/healthz")
def healthz():
    """The process is up and serving."""
    return jsonify(status="ok")


@bp.get("/readyz")
def readyz():
    """Deliveries can be taken: the database takes a write lock and commits a write (inbox.probe_write),
    and the accepted tokens can be read (a saved token sealed with a key this process cannot read makes
    every delivery a 503; `Receiver.tokens` logs why, once)."""
    rx = current_app.extensions["partnerkit_receiver"]
    try:
        inbox.probe_write(rx.db())
    except StorageError as exc:
        log.warning("not ready: %s", exc)
        rx.reopen_later()  # ready again as soon as the file can be written, without a restart
        return jsonify(status="unavailable", reason="database not writable"), 503
    try:
        tokens = rx.tokens()
    except (PartnerKitError, sqlite3.Error):
        return jsonify(status="unavailable", reason="cannot read accepted webhook tokens"), 503
    if not tokens:  # every one deleted (`webhooks delete`, `webhooks token forget`) since start
        return jsonify(status="unavailable", reason="no webhook token accepted"), 503
    return jsonify(status="ready")


@bp.get("/metrics")
def metrics():
    """Prometheus text; unauthenticated by design, so it carries counts only, never secrets."""
    rx = current_app.extensions["partnerkit_receiver"]
    return Response(rx.metrics.render(), mimetype="text/plain; version=0.0.4; charset=utf-8")
