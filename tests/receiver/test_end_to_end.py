"""End to end: sandbox -> signed webhook -> gunicorn receiver -> voucher fetch -> `partnerkit vouchers --reveal`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time

import pytest

from partnerkit.client import PartnerClient
from partnerkit.config import load_config
from partnerkit.store import open_db
from partnerkit.vouchers import run_voucher_fetches
from tests.receiver.conftest import VOUCHER_KEY
from tests.receiver.servers import PARTNERKIT, ServedReceiver

sandbox_testing = pytest.importorskip("sandbox.testing")


def cli(env, *args) -> subprocess.CompletedProcess:
    result = subprocess.run([PARTNERKIT, *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def wait_for(predicate, timeout=20.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_partial_then_full_delivery_reaches_the_vouchers_command(tmp_path):
    from sandbox.settings import SandboxSettings

    settings = SandboxSettings(allow_http_webhooks=True, order_fulfilment_delay_s=2, speed=2)
    with sandbox_testing.SandboxServer(settings) as sandbox:
        alpha = sandbox.clients[0]
        env = {"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_API_BASE_URL": sandbox.base_url,
               "PARTNERKIT_API_KEY": alpha.key, "PARTNERKIT_API_SECRET": alpha.secret,
               "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY, "PARTNERKIT_LOG_LEVEL": "WARNING"}
        served = ServedReceiver(env, tmp_path / "serve.log")
        # No PARTNERKIT_WEBHOOK_TOKENS: the token saved by `webhooks register` is what the receiver accepts.
        cli(served._env, "webhooks", "register", "--url", served.base_url + "/webhooks/partner")
        with served:
            created = json.loads(cli(served._env, "orders", "create", "--product-id", "2", "--denomination", "500",
                                     "--quantity", "4", "--ref", "partial-e2e-1", "--format", "json").stdout)
            order_id = created["id"]
            config = load_config(environ=env)
            db = open_db(config.db_path)
            client = PartnerClient(config, db)

            def delivered_and_fetched():
                run_voucher_fetches(config, db, client)
                row = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
                stored = db.execute("SELECT COUNT(*) FROM vouchers WHERE order_id = ?", (order_id,)).fetchone()[0]
                return row and row[0] == "DELIVERED" and stored == 4

            wait_for(delivered_and_fetched, timeout=30, step=0.2)
        log = served.log()
        events = json.loads(cli(env, "events", "list", "--format", "json").stdout)
        revealed = json.loads(cli(env, "vouchers", str(order_id), "--reveal", "--format", "json").stdout)
        masked = cli(env, "vouchers", str(order_id)).stdout
        codes = [v.card_number for v in sandbox.sandbox.orders[order_id].vouchers]
        pins = [v.pin_code for v in sandbox.sandbox.orders[order_id].vouchers]

    kinds = {e["event_type"] for e in events if e["order_id"] == order_id}
    assert {"order.created", "order.partially_delivered", "order.delivered"} <= kinds
    assert all(e["state"] == "processed" for e in events)
    assert sorted(v["card_number"] for v in revealed) == sorted(codes)
    assert sorted(v["pin_code"] for v in revealed) == sorted(pins)
    assert not any(code in masked for code in codes)
    # Stored as ciphertext: no code or PIN in the database file (WAL folded in first).
    conn = sqlite3.connect(tmp_path / "pk.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    raw = (tmp_path / "pk.db").read_bytes()
    assert not any(code.encode() in raw for code in codes) and not any(pin.encode() in raw for pin in pins)
    assert not any(code in log for code in codes)
    assert alpha.signing_secret not in log
