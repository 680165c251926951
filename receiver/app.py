"""The Flask application factory: `create_app(config)`."""

from __future__ import annotations

from flask import Flask

from partnerkit.config import Config, load_config
from partnerkit.crypto import load_cipher
from partnerkit.logs import configure_logging
from partnerkit.store import open_db

from receiver import health, views
from receiver.budget import remaining_budget
from receiver.metrics import Metrics
from receiver.state import RECEIVER_BUSY_TIMEOUT_MS, Receiver
from receiver.tokens import require_tokens


def create_app(config: Config | None = None) -> Flask:
    """Build the receiver; refuse (ConfigError) when no webhook token is accepted."""
    config = load_config() if config is None else config
    redactor = configure_logging(config)
    db = open_db(config.db_path)  # migrates; the views use their own per-thread connections
    try:
        cipher = load_cipher(config)  # after the database opened: no key file beside a wrong path
        tokens = require_tokens(config, db, cipher)
    finally:
        db.conn.close()
    redactor.add(*(t.token for t in tokens))

    app = Flask(__name__, static_folder=None)  # no /static/<path> route: four endpoints, nothing else
    app.config["JSON_SORT_KEYS"] = False
    metrics = Metrics()
    receiver = Receiver(config, cipher, metrics, RECEIVER_BUSY_TIMEOUT_MS, on_tokens=redactor.add)
    metrics.attach_database(receiver.db, lambda db: remaining_budget(config, db))
    app.extensions["partnerkit_receiver"] = receiver
    app.register_blueprint(views.blueprint(config.webhook_path))
    app.register_blueprint(health.bp)
    app.wsgi_app = views.WebhookRoute(app.wsgi_app, config.webhook_path, receiver)  # the hot path, see views
    return app
