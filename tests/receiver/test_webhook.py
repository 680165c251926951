"""POST /webhooks/partner through the Flask app, against a real SQLite file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from datetime import datetime, timezone

import pytest
import sqlite_utils
from freezegun import freeze_time

from partnerkit.config import ConfigError, WebhookToken
from partnerkit.crypto import load_cipher
from partnerkit.errors import StorageError
from partnerkit.store import inbox
from partnerkit.store.db import connect
from receiver.app import create_app
from receiver.signature import sign
from tests.receiver.conftest import OTHER_TOKEN, TOKEN, envelope, post, signed_headers, with_tokens

NOW = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
NOW_TS = int(NOW.timestamp())


def inbox_rows(db):
    return db.execute("SELECT dedup_key, state, reason, duplicate_count FROM inbox ORDER BY id").fetchall()


def test_accepted_and_stored(client, db):
    response = post(client, envelope())
    assert response.status_code == 200 and response.get_json() == {"status": "accepted"}
    assert inbox_rows(db) == [("evt_1", "processed", None, 0)]
    assert db.execute("SELECT status, quantity, delivered_quantity FROM orders WHERE id = 101").fetchone() == ("DELIVERED", 2, 2)
    assert db.execute("SELECT state, expected_count FROM jobs WHERE order_id = 101").fetchall() == [("pending", 2)]


@pytest.mark.parametrize("mutate, status, reason", [
    (lambda h: h.pop("X-Timestamp"), 401, "missing_timestamp"),
    (lambda h: h.pop("X-Signature"), 401, "missing_signature"),
    (lambda h: h.update({"X-Signature": "g" * 64}), 401, "malformed_signature"),
    (lambda h: h.update({"X-Signature": h["X-Signature"][:-1]}), 401, "malformed_signature"),
    (lambda h: h.update({"X-Timestamp": "soon"}), 401, "malformed_timestamp"),
    (lambda h: h.update({"X-Signature": sign("not-our-token", h["X-Timestamp"], envelope())}), 401, "signature_mismatch"),
    (lambda h: h.update({"X-SERVICE-WEBHOOK-TOKEN": "nope"}), 401, "service_token_mismatch"),
    (lambda h: (h.pop("X-Signature"), h.update({"X-SERVICE-WEBHOOK-TOKEN": TOKEN})), 401, "missing_signature"),
    # The request-signing shape (Authentication 4): its t must be X-Timestamp, its v1 entries 64 hex digits.
    (lambda h: h.update({"X-Signature": f"t={int(h['X-Timestamp']) + 1},v1={h['X-Signature']}"}), 401,
     "signature_timestamp_mismatch"),
    (lambda h: h.update({"X-Signature": f"t={h['X-Timestamp']},v1={h['X-Signature'][:63]}"}), 401,
     "malformed_signature"),
    (lambda h: h.update({"X-Signature": f"t={h['X-Timestamp']},v1={'0' * 64}"}), 401, "signature_mismatch"),
    (lambda h: h.update({"X-Signature": f"t={h['X-Timestamp']},v1={h['X-Signature']}"}) or h.pop("X-Timestamp"),
     401, "missing_timestamp"),
])
def test_rejections_store_nothing(client, db, mutate, status, reason):
    body = envelope()
    headers = signed_headers(body)
    mutate(headers)
    response = client.post("/webhooks/partner", data=body, headers=headers)
    assert response.status_code == status
    assert response.get_json() == {"status": "rejected", "reason": reason}
    assert inbox_rows(db) == [] and db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 0


def test_header_that_is_not_utf8_is_400_not_500(client, db):
    body = envelope()
    environ = {"HTTP_X_TIMESTAMP": "\xff\xfe"}  # raw latin-1 bytes that are not UTF-8
    response = client.post("/webhooks/partner", data=body, headers=signed_headers(body), environ_overrides=environ)
    assert response.status_code == 400 and response.get_json()["reason"] == "header_not_utf8"
    assert inbox_rows(db) == []


@pytest.fixture
def frozen_client(clock, app):
    """A client of an app made on the clock frozen at NOW, and closed before it is let go: a freeze_time entered and
    left while the app's housekeeping thread runs races it (freezegun's stop is not atomic: test_refusals.py)."""
    return app.test_client()


@pytest.fixture
def clock():
    with freeze_time(NOW) as frozen:
        yield frozen


@pytest.mark.parametrize("skew, expected", [(300, 200), (-300, 200), (301, 401), (-301, 401)])
def test_tolerance_edge_with_a_frozen_clock(frozen_client, db, skew, expected):
    body = envelope()
    response = frozen_client.post("/webhooks/partner", data=body,
                                  headers=signed_headers(body, timestamp=NOW_TS + skew))
    assert response.status_code == expected
    if expected == 401:
        assert response.get_json()["reason"] == "timestamp_out_of_tolerance"


def test_oversize_body_413_declared_and_streamed(client, db):
    body = b"{" + b" " * (1024 * 1024) + b"}"
    response = client.post("/webhooks/partner", data=body, headers=signed_headers(body))
    assert response.status_code == 413
    # Without Content-Length (chunked), the read itself is capped.
    environ = {"CONTENT_LENGTH": "", "wsgi.input_terminated": True}
    response = client.post("/webhooks/partner", data=body, headers=signed_headers(body), environ_overrides=environ)
    assert response.status_code == 413
    assert inbox_rows(db) == []


def test_exactly_one_mib_is_allowed(client):
    payload = json.loads(envelope())
    payload["pad"] = ""
    base = len(json.dumps(payload).encode())
    payload["pad"] = "x" * (1024 * 1024 - base)
    body = json.dumps(payload).encode()
    assert len(body) == 1024 * 1024
    assert post(client, body).status_code == 200


def test_non_canonical_json_is_verified_on_raw_bytes(client, db, config):
    body = ('{ "data" : {"status":"DELIVERED", "id" : 7,"quantity":1},\n  "event_type":"order.delivered",'
            '"event_id":"evt_\\u00e9\\u4e2d", "note": "caf\\u00e9"   }').encode()
    response = post(client, body)
    assert response.get_json() == {"status": "accepted"}
    key, = db.execute("SELECT dedup_key FROM inbox").fetchone()
    assert key == "evt_\u00e9\u4e2d"
    assert inbox.body_of(db, load_cipher(config), key) == body  # kept byte for byte (sealed)


def test_sequential_duplicate(client, db):
    assert post(client, envelope()).get_json() == {"status": "accepted"}
    # A provider retry: new timestamp, same event id.
    assert post(client, envelope(), timestamp=int(time.time()) + 1).get_json() == {"status": "duplicate"}
    assert post(client, envelope()).get_json() == {"status": "duplicate"}
    assert inbox_rows(db) == [("evt_1", "processed", None, 2)]
    assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 1


def test_unknown_event_type_ignored_but_kept(client, db):
    body = json.dumps({"event_id": "evt_x", "event_type": "order.refunded_somehow", "data": {"id": 5}}).encode()
    assert post(client, body).get_json() == {"status": "ignored"}
    assert inbox_rows(db) == [("evt_x", "quarantined", "unknown event type 'order.refunded_somehow'", 0)]
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 0


def test_signed_garbage_is_kept_quarantined_and_acknowledged(client, db):
    body = b"\x00\xffnot json at all"
    response = post(client, body, X_Event_ID="hdr-evt")
    assert response.get_json() == {"status": "ignored"}
    assert inbox_rows(db) == [("hdr-evt", "quarantined", "body is not UTF-8", 0)]
    assert post(client, body, X_Event_ID="hdr-evt").get_json() == {"status": "duplicate"}


@pytest.mark.parametrize("data, key", [
    ('"order_id": 301, "status": "DELIVERED", "total_amount": 150.123, "currency": "INR"', "total_amount"),
    ('"order_id": 301, "status": "DELIVERED", "total_amount": -5, "currency": "INR"', "total_amount"),
    ('"id": 301, "status": "DELIVERED", "amount": "1000.00", "quantity": "two", "delivered_quantity": 2', "quantity"),
    ('"order_id": 301, "status": "delivered", "vouchers_ready": -1, "total_vouchers": 2', "vouchers_ready"),
])
def test_an_unreadable_figure_is_dropped_the_event_applied_and_the_drop_logged(client, db, config, caplog, data, key):
    # Webhook figures are hints (orders.apply fills only NULL fields): one that cannot be read no longer holds the
    # whole event back until the catch-up walk; the order moves and its voucher fetch is queued now.
    import logging

    caplog.set_level(logging.WARNING, logger="receiver")
    body = b'{"event_id": "evt_fig", "event": "order.delivered", "data": {' + data.encode() + b'}}'
    response = post(client, body, X_SERVICE_WEBHOOK_TOKEN=TOKEN)
    assert response.status_code == 200 and response.get_json() == {"status": "accepted"}
    assert inbox_rows(db) == [("evt_fig", "processed", None, 0)]
    assert db.execute("SELECT status FROM orders WHERE id = 301").fetchone() == ("DELIVERED",)
    assert db.execute("SELECT state FROM jobs WHERE order_id = 301").fetchall() == [("pending",)]
    assert inbox.body_of(db, load_cipher(config), "evt_fig") == body  # the value as sent, kept with the event
    dropped = [r for r in caplog.records if r.getMessage() == "webhook figure dropped"]
    assert [(r.levelname, r.event_id, r.order_id, list(r.dropped)) for r in dropped] == [
        ("WARNING", "evt_fig", 301, [key])]
    assert TOKEN not in str(dropped[0].__dict__)
    assert post(client, body).get_json() == {"status": "duplicate"}  # logged once, for the stored event
    assert len([r for r in caplog.records if r.getMessage() == "webhook figure dropped"]) == 1


def test_an_unreadable_order_id_is_still_a_quarantine(client, db):
    body = b'{"event_id": "evt_noid", "event": "order.delivered", "data": {"order_id": 1.5, "total_amount": 150.123}}'
    assert post(client, body).get_json() == {"status": "ignored"}
    assert inbox_rows(db) == [("evt_noid", "quarantined", "order id is not an integer: Decimal('1.5')", 0)]
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 0


def test_test_event_accepted_without_an_order(client, db):
    body = json.dumps({"event_id": "t1", "event_type": "webhook.test", "data": {}}).encode()
    assert post(client, body).get_json() == {"status": "accepted"}
    assert inbox_rows(db) == [("t1", "test", None, 0)]


def test_out_of_order_delivered_before_created(client, db):
    post(client, envelope("e2", "order.delivered", status="DELIVERED"))
    post(client, envelope("e1", "order.created", status="PENDING"))
    post(client, envelope("e0", "order.processing", status="PROCESSING"))
    assert db.execute("SELECT status FROM orders WHERE id = 101").fetchone() == ("DELIVERED",)
    assert len(inbox_rows(db)) == 3  # every event is still kept


def test_stale_processing_after_partial_then_delivered(client, db):
    post(client, envelope("p", "order.partially_delivered", status="PARTIALLY_DELIVERED", quantity=4, delivered=2))
    assert db.execute("SELECT status, delivered_quantity FROM orders").fetchone() == ("PARTIALLY_DELIVERED", 2)
    post(client, envelope("s", "order.processing", status="PROCESSING", quantity=4, delivered=0))
    assert db.execute("SELECT status, delivered_quantity FROM orders").fetchone() == ("PARTIALLY_DELIVERED", 2)
    post(client, envelope("d", "order.delivered", status="DELIVERED", quantity=4))
    post(client, envelope("c", "order.cancelled", status="CANCELLED", quantity=4))  # final is final
    assert db.execute("SELECT status, delivered_quantity FROM orders").fetchone() == ("DELIVERED", 4)
    assert db.execute("SELECT state, expected_status, expected_count FROM jobs").fetchall() == [("pending", "DELIVERED", 4)]


def test_failed_is_terminal(client, db):
    post(client, envelope("f", "order.failed", status="FAILED"))
    post(client, envelope("d", "order.delivered", status="DELIVERED"))
    assert db.execute("SELECT status FROM orders").fetchone() == ("FAILED",)


def test_locked_database_answers_503_and_stores_nothing(app, client, config, db):
    rx = app.extensions["partnerkit_receiver"]
    rx.busy_timeout_ms = 100
    rx.tokens()  # read the tokens before the lock (they are cached)
    blocker = sqlite3.connect(config.db_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        response = post(client, envelope())
        assert response.status_code == 503 and response.get_json() == {"status": "unavailable"}
        assert client.get("/readyz").status_code == 503
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert inbox_rows(db) == []
    assert post(client, envelope()).get_json() == {"status": "accepted"}  # the provider's retry
    assert client.get("/readyz").status_code == 200


def test_readyz_names_the_status_first_as_documented(app, client, config):
    """docs/receiver.md: `503 {"status":"unavailable","reason":...}`. Flask 3 sorts a JSON body's keys unless
    `app.json.sort_keys` says not to (the JSON_SORT_KEYS setting it replaced is ignored): reason came first."""
    rx = app.extensions["partnerkit_receiver"]
    rx.busy_timeout_ms = 100
    rx.tokens()
    blocker = sqlite3.connect(config.db_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        response = client.get("/readyz")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert response.status_code == 503
    assert response.get_data(as_text=True).strip() == '{"status":"unavailable","reason":"database not writable"}'


def test_read_only_database_answers_503(app, config):
    rx = app.extensions["partnerkit_receiver"]
    rx.tokens()
    # As if the file had been made read-only (tests run as root, where chmod does not bite).
    readonly = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False)
    # Both of the thread's connections: reads and readiness (db) and the webhook's writes (writer).
    rx._local.db = rx._local.writer = sqlite_utils.Database(readonly)
    rx._local.pid = os.getpid()
    client = app.test_client()
    assert post(client, envelope()).status_code == 503
    # The file itself is writable: the next request opens new connections and is stored. A connection
    # SQLite opened read-only stays read-only, and kept, it made every delivery a 503 until a restart.
    assert client.get("/readyz").status_code == 200
    assert post(client, envelope()).get_json() == {"status": "accepted"}  # the provider's retry
    rx._local.db = rx._local.writer = sqlite_utils.Database(
        sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False))
    rx._local.pid = os.getpid()
    assert client.get("/readyz").status_code == 503  # readiness reopens too
    assert client.get("/readyz").status_code == 200


def test_a_file_that_cannot_be_written_is_refused_at_open_not_opened_read_only(tmp_path):
    # SQLite would open it read-only without a word, for the connection's whole life.
    path = tmp_path / "pk.db"
    connect(path).conn.close()
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root on a filesystem with immutable flags")
    try:
        with pytest.raises(StorageError, match="the file cannot be written by this user"):
            connect(path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    db = connect(path)
    db.conn.execute("CREATE TABLE written (x)")  # writable again: opened read-write
    db.conn.close()


def test_no_token_refuses_to_start(config):
    with pytest.raises(ConfigError, match="refuses to start"):
        create_app(with_tokens(config))


def test_second_token_for_rotation(config):
    app = create_app(with_tokens(config, WebhookToken(TOKEN), WebhookToken(OTHER_TOKEN)))
    client = app.test_client()
    assert post(client, envelope("a"), token=TOKEN).status_code == 200
    assert post(client, envelope("b"), token=OTHER_TOKEN).status_code == 200


def test_a_delivery_signed_in_the_request_shape_is_accepted_and_a_refused_one_counted(client, db):
    # One signing secret per credential signs requests and deliveries (Authentication 5): a provider that sends its
    # request shape `t=<ts>,v1=<hex>` on a delivery, over the webhook rule, is accepted like the bare digest.
    body = envelope()
    headers = signed_headers(body)
    headers["X-Signature"] = f"t={headers['X-Timestamp']}, v1={headers['X-Signature']}"
    response = client.post("/webhooks/partner", data=body, headers=headers)
    assert response.status_code == 200 and response.get_json() == {"status": "accepted"}
    assert inbox_rows(db) == [("evt_1", "processed", None, 0)]
    headers["X-Signature"] = headers["X-Signature"].replace("t=", "t=9", 1)
    refused = client.post("/webhooks/partner", data=envelope("evt_2"), headers=headers)
    assert refused.get_json() == {"status": "rejected", "reason": "signature_timestamp_mismatch"}
    text = client.get("/metrics").get_data(as_text=True)
    assert 'partnerkit_webhook_rejected_total{reason="signature_timestamp_mismatch"} 1.0' in text
    assert [row[0] for row in inbox_rows(db)] == ["evt_1"]


def test_healthz_readyz_metrics(client):
    post(client, envelope())
    post(client, envelope())
    client.post("/webhooks/partner", data=b"{}", headers={"X-Timestamp": "1"})
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").get_json() == {"status": "ready"}
    text = client.get("/metrics").get_data(as_text=True)
    assert 'partnerkit_webhook_events_total{outcome="accepted"} 1.0' in text
    assert 'partnerkit_webhook_events_total{outcome="duplicate"} 1.0' in text
    assert 'partnerkit_webhook_rejected_total{reason="missing_signature"} 1.0' in text
    assert "partnerkit_webhook_ack_seconds_bucket" in text
    assert 'partnerkit_voucher_fetch_jobs{state="pending"} 1.0' in text
    assert TOKEN not in text


def test_logs_carry_ids_but_no_secrets(client, caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="receiver")
    body = envelope()
    headers = signed_headers(body, X_Request_ID="req-123", X_SERVICE_WEBHOOK_TOKEN=TOKEN)
    client.post("/webhooks/partner", data=body, headers=headers)
    client.post("/webhooks/partner", data=body, headers={**headers, "X-Signature": "0" * 64})
    lines = [r for r in caplog.records if r.name.startswith("receiver")]
    assert any(getattr(r, "request_id", None) == "req-123" and getattr(r, "event_id", None) == "evt_1" for r in lines)
    text = " ".join(str(r.__dict__) for r in lines)
    assert TOKEN not in text and headers["X-Signature"] not in text


def test_each_delivery_is_logged_at_debug_a_quarantined_one_at_warning(client, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="receiver")
    post(client, envelope(event_id="evt_quiet"))           # accepted
    post(client, envelope(event_id="evt_quiet"))           # duplicate
    post(client, b'{"event_id": "evt_odd", "event_type": "order.renamed", "data": {}}')  # kept, quarantined
    delivery_lines = [r for r in caplog.records if r.getMessage() == "webhook"]
    assert [(r.levelname, r.event_id, r.outcome) for r in delivery_lines] == [("WARNING", "evt_odd", "ignored")]
    assert "unknown event type" in delivery_lines[0].reason

    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="receiver")
    post(client, envelope(event_id="evt_loud", order_id=102))
    post(client, envelope(event_id="evt_loud", order_id=102))
    assert [(r.levelname, r.outcome) for r in caplog.records if r.getMessage() == "webhook"] == [
        ("DEBUG", "accepted"), ("DEBUG", "duplicate")]
