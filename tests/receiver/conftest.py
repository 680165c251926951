"""Fixtures: a real SQLite file per test, the Flask app and test client, signed requests."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from partnerkit.client import PartnerClient, RetryPolicy
from partnerkit.config import Config, WebhookToken
from partnerkit.crypto import Cipher
from partnerkit.store import open_db
from receiver.app import create_app
from receiver.signature import sign
from tests.conftest import account_of

TOKEN = "whsec_test_token_one"
OTHER_TOKEN = "whsec_test_token_two"
VOUCHER_KEY = "dGVzdC12b3VjaGVyLWtleS0zMi1ieXRlcy1sb25nISE"  # base64 of 32 bytes, tests only
CIPHER = Cipher(b"tests-only-inbox-cipher-32-bytes")  # for inbox.record called without a receiver


@pytest.fixture
def config(tmp_path, migrated_file) -> Config:
    config = Config(db_path=tmp_path / "pk.db", webhook_tokens=(WebhookToken(TOKEN),), voucher_key=VOUCHER_KEY,
                    api_base_url="http://127.0.0.1:9", api_key="k", api_secret="s", log_level="WARNING")
    # The database already serves the account of key "k" (partnerkit.account): the provider these tests fake
    # (pytest-httpserver, or nothing on port 9) answers the endpoint under test, not the wallet list.
    db = open_db(migrated_file(config.db_path))
    account_of(db, config.api_key)
    db.conn.close()
    return config


@pytest.fixture
def app(config):
    app = create_app(config)
    app.config["TESTING"] = True
    yield app
    app.extensions["partnerkit_receiver"].close()  # stop the WAL checkpoint thread


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def db(config, app):
    database = open_db(config.db_path)
    yield database
    database.conn.close()


def signed_headers(body: bytes, *, token: str = TOKEN, timestamp: int | None = None, **extra: str) -> dict:
    """Headers of a delivery signed by the document's rule."""
    ts = int(time.time()) if timestamp is None else timestamp
    headers = {"Content-Type": "application/json", "X-Timestamp": str(ts), "X-Signature": sign(token, ts, body)}
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def envelope(event_id: str = "evt_1", event_type: str = "order.delivered", order_id: int = 101,
             status: str = "DELIVERED", quantity: int = 2, delivered: int | None = None,
             created_at: str = "2024-05-01T10:00:00Z") -> bytes:
    """A body in the document's main envelope form."""
    data = {"id": order_id, "reference_code": "REF-1", "status": status, "sub_status": "",
            "product_name": "Gift Card", "denomination": "500.00", "quantity": quantity, "amount": "1000.00",
            "delivered_quantity": quantity if delivered is None else delivered, "delivered_on": None,
            "created_at": created_at}
    return json.dumps({"event_id": event_id, "event_type": event_type, "created_at": created_at,
                       "data": data}).encode()


def post(client, body: bytes, path: str = "/webhooks/partner", **kwargs):
    """POST a correctly signed delivery."""
    return client.post(path, data=body, headers=signed_headers(body, **kwargs))


def with_tokens(config: Config, *tokens: WebhookToken) -> Config:
    return replace(config, webhook_tokens=tuple(tokens))


# A store and a configuration whose provider is a pytest-httpserver (the voucher fetch's and the order sync's tests,
# which answer each read by hand): `api_config`, `store` on it, and `api`, a client of it that does not retry.

@pytest.fixture
def api_config(config, httpserver):
    return replace(config, api_base_url=httpserver.url_for("/").rstrip("/"))


@pytest.fixture
def store(api_config):
    db = open_db(api_config.db_path)
    yield db
    db.conn.close()


@pytest.fixture
def api(api_config, store):
    return PartnerClient(api_config, store, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None)
