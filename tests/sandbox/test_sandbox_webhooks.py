"""Webhooks: CRUD, signed deliveries, retry schedule, envelopes, chaos, the deliveries API."""
from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest

HOOKS = "/api/v1/webhooks"
DELIVERIES = "/api/v1/webhooks/deliveries"
ALL_EVENTS = ["order.created", "order.pending", "order.processing", "order.delivered",
              "order.partially_delivered", "order.failed", "order.cancelled"]


def register(api, url, events=None, **extra):
    r = api.post(HOOKS, {"name": "orders", "url": url, "events": events or ALL_EVENTS, **extra})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.mark.parametrize("body,message", [
    ({"url": "https://x.example/h", "events": ["order.created"]}, "name is required"),
    ({"name": "n", "events": ["order.created"]}, "url is required"),
    ({"name": "n", "url": "https://x.example/h"}, "events is required"),
    ({"name": "n", "url": "http://x.example/h", "events": ["order.created"]}, "url must use HTTPS"),
    ({"name": "n", "url": "https://x.example/h", "events": ["order.shipped"]}, "unknown event"),
    ({"name": "n", "url": "https://x.example/h", "events": ["order.created"],
      "envelope": "xml"}, "envelope must be one of"),
    ({"name": "n", "url": "https://x.example/h", "events": ["order.created"],
      "credential_id": 102}, "credential_id is not a credential of this client"),
])
def test_create_validation(alpha, body, message):
    r = alpha.post(HOOKS, body)
    assert r.status_code == 400
    assert r.json()["error"]["name"] == "BadRequest"
    assert r.json()["error"]["message"].startswith(message)


def test_plain_http_loopback_only_behind_the_flag(alpha, sb):
    body = {"name": "n", "url": "http://127.0.0.1:9/h", "events": ["order.created"]}
    assert alpha.post(HOOKS, body).status_code == 201
    sb.settings.allow_http_webhooks = False
    assert alpha.post(HOOKS, body).status_code == 400


def test_token_only_at_creation_and_crud(alpha, beta):
    created = register(alpha, "https://hooks.example/p", ["order.delivered"])
    assert created["token"] and created["is_active"] is True
    assert set(created) >= {"id", "name", "url", "token", "events", "is_active", "created_at"}
    hid = created["id"]
    got = alpha.get(f"{HOOKS}/{hid}").json()
    assert "token" not in got and got["url"] == "https://hooks.example/p"
    assert all("token" not in h for h in alpha.get(HOOKS).json())
    updated = alpha.put(f"{HOOKS}/{hid}", {"is_active": False, "events": ["order.failed"]}).json()
    assert updated["is_active"] is False and updated["events"] == ["order.failed"]
    assert beta.get(f"{HOOKS}/{hid}").status_code == 404
    assert beta.get(HOOKS).json() == []
    assert alpha.delete(f"{HOOKS}/{hid}").json()["success"] is True
    assert alpha.get(f"{HOOKS}/{hid}").status_code == 404


def test_credential_id_uses_the_signing_secret(alpha):
    created = register(alpha, "https://hooks.example/c", credential_id=101)
    assert created["token"] == alpha.client.signing_secret


def hand_verify(request, token):
    """The receiver's check, by hand: hex HMAC-SHA256(token, X-Timestamp + "." + raw body)."""
    ts = request["headers"]["X-Timestamp"]
    expected = hmac.new(token.encode(), ts.encode() + b"." + request["body"],
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request["headers"]["X-Signature"])


def test_signed_delivery_with_every_header(alpha, server, receiver):
    hook = register(alpha, receiver.url)
    order = alpha.order(product_id=7, denomination=10).json()
    before = int(time.time())
    server.run_due()
    after = time.time()
    assert [json.loads(r["body"])["event_type"] for r in receiver.requests] == [
        "order.created", "order.delivered"]
    req = receiver.requests[1]
    h = req["headers"]
    assert h["Content-Type"] == "application/json" and "sandbox" in h["User-Agent"]
    assert h["X-Webhook-ID"] == str(hook["id"]) and h["X-Event-Type"] == "order.delivered"
    assert h["X-SERVICE-WEBHOOK-TOKEN"] == hook["token"]
    assert before <= int(h["X-Timestamp"]) <= after  # real unix seconds of the sending, not the sandbox's clock
    assert hand_verify(req, hook["token"])
    assert not hand_verify(req, "another-token")
    body = json.loads(req["body"])
    assert h["X-Event-ID"] == body["event_id"]
    assert h["X-Request-ID"] != receiver.requests[0]["headers"]["X-Request-ID"]
    data = body["data"]
    assert data["id"] == order["id"] and data["status"] == "DELIVERED"
    assert data["amount"] == "10.00" and data["delivered_quantity"] == 1
    assert "card_number" not in req["body"].decode()          # never codes in payloads


def test_only_subscribed_events_and_active_hooks(alpha, server, receiver):
    hook = register(alpha, receiver.url, ["order.delivered"])
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    assert [r["headers"]["X-Event-Type"] for r in receiver.requests] == ["order.delivered"]
    alpha.put(f"{HOOKS}/{hook['id']}", {"is_active": False})
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    assert len(receiver.requests) == 1


def test_every_order_event_is_delivered(alpha, server, receiver):
    register(alpha, receiver.url)
    alpha.order(ref="partial-x", quantity=4)
    alpha.order(ref="fail-x", quantity=2)
    alpha.order(ref="cancel-x", quantity=2)
    server.run_due()
    server.advance(30)
    server.advance(30)
    types = {r["headers"]["X-Event-Type"] for r in receiver.requests}
    assert types == set(ALL_EVENTS)


def test_retry_schedule_0_1_2_4_8_minutes_then_failed(alpha, server, receiver):
    hook = register(alpha, receiver.url, ["order.created"])
    receiver.statuses = [500] * 10
    alpha.order(product_id=7, denomination=10)
    start = server.clock.now()
    server.run_due()
    attempts_at = [0]
    for minute in range(1, 16):
        server.advance(60)
        if len(receiver.requests) > len(attempts_at):
            attempts_at.append(minute)
    assert attempts_at == [0, 1, 3, 7, 15]
    d = alpha.get(DELIVERIES).json()["data"]["deliveries"][0]
    assert (d["status"], d["attempt_count"], d["max_attempts"], d["response_status"]) == (
        "failed", 5, 5, 500)
    server.advance(3600)
    assert len(receiver.requests) == 5
    event_ids = {r["headers"]["X-Event-ID"] for r in receiver.requests}
    assert len(event_ids) == 1                                 # same event across retries
    assert len({r["headers"]["X-Request-ID"] for r in receiver.requests}) == 5
    assert all(hand_verify(r, hook["token"]) for r in receiver.requests)
    assert (server.clock.now() - start).total_seconds() > 15 * 60


def test_recovering_receiver_marks_delivered(alpha, server, receiver):
    register(alpha, receiver.url, ["order.created"])
    receiver.statuses = [503, 404]
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    server.advance(60)
    server.advance(120)
    d = alpha.get(DELIVERIES).json()["data"]["deliveries"][0]
    assert (d["status"], d["attempt_count"], d["response_status"]) == ("delivered", 3, 200)
    assert d["delivered_at"] is not None


def test_unreachable_receiver_counts_as_failure(alpha, server, sb):
    sb.settings.webhook_timeout_s = 1
    register(alpha, "http://127.0.0.1:9/closed", ["order.created"])
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    d = alpha.get(f"{DELIVERIES}/1").json()["data"]
    assert (d["status"], d["attempt_count"], d["response_status"]) == ("pending", 1, None)
    assert "ConnectionError" in d["last_error"]


def test_standard_envelope(alpha, server, receiver):
    register(alpha, receiver.url, ["order.pending"])
    order = alpha.order(quantity=12, email="x@y.in").json()
    server.run_due()
    body = receiver.bodies()[0]
    assert set(body) == {"event_id", "event_type", "created_at", "data"}
    assert body["data"] == {"id": order["id"], "reference_code": order["ref"],
                            "status": "PENDING", "sub_status": "",
                            "product_name": "Amazon Pay Gift Card", "denomination": "100.00",
                            "quantity": 12, "amount": "1176.00", "delivered_quantity": 0,
                            "delivered_on": None, "created_at": order["placed_at"]}


def test_order_id_envelope(alpha, server, receiver):
    register(alpha, receiver.url, ["order.delivered"], envelope="order_id")
    order = alpha.order(product_id=8, denomination=50, quantity=2).json()
    server.run_due()
    body = receiver.bodies()[0]
    assert set(body) == {"event", "event_id", "created_at", "data"}
    assert body["event"] == "order.delivered"
    data = body["data"]
    assert (data["order_id"], data["status"], data["total_amount"], data["currency"]) == (
        order["id"], "DELIVERED", "95.00", "INR")
    assert data["fulfilled_from"] == "realtime"
    assert data["vouchers"] == [{"product_id": 8, "expiry": v["expires_at"]}
                                for v in order["vouchers"]]


def test_timestamp_envelope(alpha, server, receiver):
    register(alpha, receiver.url, ["order.delivered"], envelope="timestamp")
    order = alpha.order(product_id=7, denomination=10, quantity=3, ref="ts-ref").json()
    server.run_due()
    body = receiver.bodies()[0]
    assert set(body) == {"event", "timestamp", "data"}
    assert body["data"] == {"order_id": order["id"], "ref": "ts-ref", "status": "DELIVERED",
                            "vouchers_ready": 3, "total_vouchers": 3}
    assert receiver.requests[0]["headers"]["X-Event-ID"].startswith("evt_")


def test_chaos_duplicates_and_reorders(alpha, server, receiver, sb):
    sb.settings.chaos_duplicate_rate = 1.0
    register(alpha, receiver.url, ["order.created", "order.delivered"], chaos=True)
    for _ in range(4):
        alpha.order(product_id=7, denomination=10)
    server.advance(sb.settings.chaos_max_delay_s)
    ids = [r["headers"]["X-Event-ID"] for r in receiver.requests]
    assert len(ids) == 16 and len(set(ids)) == 8                # every event twice
    first_seen = list(dict.fromkeys(ids))
    emitted = [d["event_id"] for d in sorted(
        alpha.get(DELIVERIES).json()["data"]["deliveries"], key=lambda d: d["id"])]
    assert first_seen != emitted                                # not in emission order
    deliveries = alpha.get(DELIVERIES).json()["data"]["deliveries"]
    assert all(d["status"] == "delivered" and d["attempt_count"] == 1 for d in deliveries)


def test_test_event(alpha, server, receiver):
    hook = register(alpha, receiver.url, ["order.created"])
    r = alpha.post(f"{HOOKS}/{hook['id']}/test")
    assert r.status_code == 200 and r.json()["success"] is True
    server.run_due()
    body = receiver.bodies()[0]
    assert body["event_type"] == "webhook.test" and body["data"]["webhook_id"] == hook["id"]
    assert hand_verify(receiver.requests[0], hook["token"])


def test_deliveries_list_filters_and_headers(alpha, beta, server, receiver):
    hook = register(alpha, receiver.url)
    orders = [alpha.order(product_id=7, denomination=10).json()["id"] for _ in range(3)]
    server.run_due()
    r = alpha.get(DELIVERIES, {"limit": 4})
    assert r.json()["success"] is True
    assert len(r.json()["data"]["deliveries"]) == 4
    assert (r.headers["X-Page"], r.headers["X-Total-Count"], r.headers["X-Total-Pages"],
            r.headers["X-Page-Size"]) == ("1", "6", "2", "4")
    by_order = alpha.get(DELIVERIES, {"order_id": orders[0]}).json()["data"]["deliveries"]
    assert {d["event_type"] for d in by_order} == {"order.created", "order.delivered"}
    assert set(by_order[0]) == {"id", "webhook_url_id", "order_id", "event_type", "event_id",
                                "payload", "status", "attempt_count", "max_attempts",
                                "response_status", "response_time_ms", "delivered_at",
                                "created_at"}
    typed = alpha.get(DELIVERIES, {"event_type": "order.created"}).json()["data"]["deliveries"]
    assert len(typed) == 3
    assert len(alpha.get(DELIVERIES, {"status": "delivered", "webhook_url_id": hook["id"]})
               .json()["data"]["deliveries"]) == 6
    assert alpha.get(DELIVERIES, {"status": "failed"}).json()["data"]["deliveries"] == []
    assert alpha.get(DELIVERIES, {"limit": 1000}).headers["X-Page-Size"] == "100"
    assert alpha.get(DELIVERIES).headers["X-Page-Size"] == "20"
    assert beta.get(DELIVERIES).json()["data"]["deliveries"] == []


def test_stats_get_and_retry(alpha, server, receiver, sb):
    register(alpha, receiver.url, ["order.created"])
    receiver.statuses = [200] + [500] * 5          # first delivery succeeds, second never
    alpha.order(product_id=7, denomination=10)
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    for delay in (60, 120, 240, 480):
        server.advance(delay)
    stats = alpha.get(f"{DELIVERIES}/stats").json()
    assert stats == {"success": True, "data": {
        "total_count": 2, "pending_count": 0, "delivered_count": 1, "failed_count": 1,
        "last_24h_total": 2, "last_24h_delivered": 1, "last_24h_failed": 1}}
    failed = alpha.get(DELIVERIES, {"status": "failed"}).json()["data"]["deliveries"][0]
    detail = alpha.get(f"{DELIVERIES}/{failed['id']}").json()["data"]
    assert detail["payload"]["event_type"] == "order.created"
    assert detail["response_body"] == '{"status":"nope"}' and len(detail["attempts"]) == 5
    delivered = alpha.get(DELIVERIES, {"status": "delivered"}).json()["data"]["deliveries"][0]
    r = alpha.post(f"{DELIVERIES}/{delivered['id']}/retry")
    assert r.status_code == 400 and r.json()["error"]["code"] == "DELIVERY_NOT_FAILED"
    r = alpha.post(f"{DELIVERIES}/{failed['id']}/retry")
    assert r.json() == {"success": True, "data": {"message": "delivery re-queued",
                                                  "delivery_id": failed["id"]}}
    assert alpha.get(f"{DELIVERIES}/{failed['id']}").json()["data"]["status"] == "pending"
    server.run_due()
    again = alpha.get(f"{DELIVERIES}/{failed['id']}").json()["data"]
    assert (again["status"], again["attempt_count"], again["max_attempts"]) == ("delivered", 6, 6)
    assert alpha.get(f"{DELIVERIES}/999").status_code == 404


def test_retry_is_refused_once_the_attempt_cap_is_used(alpha, server, receiver, sb):
    sb.settings.manual_retry_attempt_cap = 6
    register(alpha, receiver.url, ["order.created"])
    receiver.statuses = [500] * 6
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    for delay in (60, 120, 240, 480):
        server.advance(delay)
    assert alpha.post(f"{DELIVERIES}/1/retry").status_code == 200
    server.run_due()
    r = alpha.post(f"{DELIVERIES}/1/retry")
    assert r.status_code == 400 and r.json()["error"]["code"] == "ATTEMPTS_EXHAUSTED"


def test_background_thread_delivers_without_run_due(receiver):
    from tests.sandbox.sandbox_helpers import make_settings
    from sandbox import SandboxServer
    with SandboxServer(make_settings(speed=1.0, start=None), background=True) as srv:
        from tests.sandbox.sandbox_helpers import Api
        api = Api(srv, srv.clients[0])
        register(api, receiver.url, ["order.created"])
        api.order(product_id=7, denomination=10)
        deadline = time.monotonic() + 30  # a generous bound: the pass runs in a thread of a busy machine
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(receiver.requests) == 1


def test_a_pass_asked_for_while_another_is_sending_returns_after_that_send(alpha, server, sb):
    """advance() or POST /sandbox/run-due racing the background pass: the background pass has taken the due
    deliveries and is sending them; the pass asked for must not return (finding nothing due) before they are
    recorded, or a test reading the deliveries right after advance() sees them still pending."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    entered, release = threading.Event(), threading.Event()

    class Held(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            entered.set()
            release.wait(60)  # the test sets it (its finally too): the bound only ends a broken run
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Held)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        register(alpha, f"http://127.0.0.1:{httpd.server_port}/hook", ["order.created"])
        alpha.order(product_id=7, denomination=10)
        background = threading.Thread(target=server.run_due)  # plays the background thread's pass
        background.start()
        assert entered.wait(30)
        asked_done = threading.Event()
        asked = threading.Thread(target=lambda: (server.run_due(), asked_done.set()))
        asked.start()
        assert not asked_done.wait(0.3)  # waits for the pass that is sending
        release.set()
        background.join(30)
        asked.join(30)
        assert asked_done.is_set()
        assert [d.status for d in sb.deliveries.values()] == ["delivered"]
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()
