"""The Flask application factory: `create_app(config)`, and the app's JSON error answers."""

from __future__ import annotations

import json
import logging
import re

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, InternalServerError

from partnerkit import status
from partnerkit.config import Config, load_config
from partnerkit.crypto import load_cipher
from partnerkit.logs import configure_logging
from partnerkit.store import open_db

from receiver import health, views
from receiver.budget import remaining_budget
from receiver.metrics import Metrics
from receiver.state import RECEIVER_BUSY_TIMEOUT_MS, Receiver
from receiver.tokens import require_tokens, unbound_left_out

log = logging.getLogger(__name__)


def create_app(config: Config | None = None, *, warn: bool = True) -> Flask:
    """Build the receiver; refuse (ConfigError) when no webhook token is accepted.

    `warn`: log the start-up warnings (an unbound token that is never tried); the gunicorn master
    logs them once and builds its workers' apps without."""
    config = load_config() if config is None else config
    redactor = configure_logging(config)
    db = open_db(config.db_path)  # migrates; the views use their own per-thread connections
    try:
        cipher = load_cipher(config)  # after the database opened: no key file beside a wrong path
        tokens = require_tokens(config, db, cipher)
    finally:
        db.conn.close()
    redactor.add(*(t.token for t in tokens))
    left_out = unbound_left_out(tokens)
    if warn and left_out:
        log.warning(left_out)

    app = Flask(__name__, static_folder=None)  # no /static/<path> route: four endpoints, nothing else
    app.json.sort_keys = False  # bodies as written, "status" first (Flask 3 ignores the old JSON_SORT_KEYS)
    metrics = Metrics()
    receiver = Receiver(config, cipher, metrics, RECEIVER_BUSY_TIMEOUT_MS, on_tokens=redactor.add)
    metrics.attach_database(receiver.db, lambda db: remaining_budget(config, db),
                            lambda db: status.gauges(config, db))
    app.extensions["partnerkit_receiver"] = receiver
    app.register_blueprint(views.blueprint(config.webhook_path))
    app.register_blueprint(health.bp)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    app.wsgi_app = views.WebhookRoute(app.wsgi_app, config.webhook_path, receiver)  # the hot path, see views
    return app


def _http_error(exc: HTTPException) -> Response:
    """Any HTTP error as the webhook answers: `{"status":"not_found"}`, werkzeug's headers (Allow) kept."""
    response = exc.get_response()  # status and headers (Allow on 405); its HTML body is replaced
    response.set_data(json.dumps({"status": status_word(exc.name)}, separators=(",", ":")) + "\n")
    response.content_type = "application/json"
    return response


def _unexpected_error(exc: Exception) -> Response:
    """A bug outside the webhook's own guards: logged once, answered 500 in JSON, never a traceback."""
    # Method and path only: headers, query string and body can carry tokens. The formatter's
    # redactor still guards the traceback's text.
    log.error("request failed: unexpected error", exc_info=exc,
              extra={"method": request.method, "path": request.path, "http_status": 500})
    return _http_error(InternalServerError())


def status_word(name: str) -> str:
    """An HTTP status's name in snake case, the `status` of every error answer: "Method Not Allowed" ->
    "method_not_allowed" (also gunicorn's own refusals: receiver.gunicorn_app.error_answer)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
