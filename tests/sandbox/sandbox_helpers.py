"""Helpers for the sandbox suite: a signed API client, settings, a webhook receiver.

Request signatures are computed here by hand from the document's rule (Authentication 4),
not with sandbox.auth, so that a mistake there cannot be mirrored by the tests.
(A uniquely named module, not conftest, so that test modules can import it safely.)
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import datetime, timezone
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from sandbox import SandboxServer, SandboxSettings
from tests.sandbox_serving import POLL_S

START = datetime(2025, 3, 10, 10, 0, 0, tzinfo=timezone.utc)


def hand_signature(secret: str, ts: str, method: str, path: str, body: bytes) -> str:
    """hex HMAC-SHA256(secret, timestamp + METHOD + path + body), computed by hand."""
    msg = ts.encode() + method.encode() + path.encode() + body
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


class Api:
    """A tiny signed client for one seeded credential."""

    def __init__(self, server: SandboxServer, client):
        self.server, self.client = server, client
        self.base = server.base_url
        self.session = requests.Session()

    def headers(self, extra=None):
        h = {"X-API-Key": self.client.key, "X-API-Secret": self.client.secret}
        h.update(extra or {})
        return h

    def get(self, path, params=None, headers=None):
        return self.session.get(self.base + path, params=params, headers=self.headers(headers))

    def send(self, method, path, body=None, headers=None, sign=True, raw: bytes | None = None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        h = self.headers({"Content-Type": "application/json"})
        if sign:
            ts = str(int(time.time()))
            sig = hand_signature(self.client.secret, ts, method, path.split("?")[0], data)
            h.update({"X-Timestamp": ts, "X-Signature": f"t={ts},v1={sig}"})
        h.update(headers or {})
        return self.session.request(method, self.base + path, data=data, headers=h)

    def post(self, path, body=None, **kw):
        return self.send("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.send("PUT", path, body, **kw)

    def delete(self, path, **kw):
        return self.send("DELETE", path, None, **kw)

    def recharge(self, mobile="9876543210", amount=100, key=None, **fields):
        body = {"mobile_number": mobile, "operator_id": fields.pop("operator_id", 1),
                "amount": amount, **fields}
        key = key or f"idem-{time.monotonic_ns()}"
        return self.post("/api/v1/recharges", body, headers={"Idempotency-Key": key})

    def order(self, product_id=1, denomination=100, quantity=1, key=None, **fields):
        body = {"product_id": product_id, "denomination": denomination, "quantity": quantity,
                **fields}
        key = key or f"order-{time.monotonic_ns()}"
        return self.post("/api/v1/orders", body, headers={"Idempotency-Key": key})

    def balance(self, currency="INR") -> Decimal:
        wallets = self.get("/api/v1/wallets").json()
        return Decimal(next(w["balance"] for w in wallets if w["currency"] == currency))

    def control(self, method, path, body=None, **params):
        return requests.request(method, self.base + "/sandbox" + path, json=body, params=params)


def make_settings(**overrides) -> SandboxSettings:
    """Deterministic settings: frozen clock at START, http webhooks to loopback allowed."""
    base = dict(speed=0, start=START, allow_http_webhooks=True, processing_delay_s=20,
                order_fulfilment_delay_s=30)
    base.update(overrides)
    return SandboxSettings(**base)


class Receiver:
    """A webhook receiver on 127.0.0.1 recording every request; answers from a script."""

    def __init__(self):
        self.requests: list[dict] = []
        self.statuses: list[int] = []      # consumed one per request; default 200
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                with outer.lock:
                    outer.requests.append({"headers": dict(self.headers), "body": body,
                                           "path": self.path})
                    status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status":"ok"}' if status < 300 else b'{"status":"nope"}')

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                       kwargs={"poll_interval": POLL_S})  # stopped at once
        self.thread.start()

    def bodies(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
