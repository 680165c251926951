"""The webhook envelope and chaos without a signed API call: `PATCH /sandbox/webhooks/{id}` switches a
registered webhook, `GET /sandbox/webhooks` lists every client's, and the settings `webhook_envelope` /
`webhook_chaos` (`python -m sandbox --envelope/--chaos`) are what a webhook registered without them gets."""
from __future__ import annotations

import pytest

from sandbox import SandboxSettings
from tests.sandbox.test_sandbox_webhooks import register


def test_patch_switches_a_registered_webhooks_envelope_for_the_next_delivery(alpha, server, receiver):
    hook = register(alpha, receiver.url, ["order.delivered"])
    alpha.order(product_id=7, denomination=10)
    server.run_due()
    r = alpha.control("PATCH", f"/webhooks/{hook['id']}", {"envelope": "timestamp"})
    assert r.status_code == 200, r.text
    assert (r.json()["envelope"], r.json()["chaos"], r.json()["client"]) == ("timestamp", False, "alpha")
    assert "token" not in r.json() and r.json()["updated_at"]
    alpha.order(product_id=7, denomination=10, ref="after-switch")
    server.run_due()
    first, second = receiver.bodies()
    assert "event_type" in first and set(second) == {"event", "timestamp", "data"}
    assert second["data"]["ref"] == "after-switch"
    assert alpha.get(f"/api/v1/webhooks/{hook['id']}").json()["envelope"] == "timestamp"  # the API sees it too


def test_patch_switches_chaos_on_and_duplicates_arrive(alpha, server, receiver, sb):
    sb.settings.chaos_duplicate_rate = 1.0
    hook = register(alpha, receiver.url, ["order.delivered"])
    assert alpha.control("PATCH", f"/webhooks/{hook['id']}", {"chaos": True}).json()["chaos"] is True
    alpha.order(product_id=7, denomination=10)
    server.advance(sb.settings.chaos_max_delay_s)
    ids = [r["headers"]["X-Event-ID"] for r in receiver.requests]
    assert len(ids) == 2 and len(set(ids)) == 1                 # the same event twice


def test_the_listing_shows_every_clients_webhooks_without_tokens(alpha, beta):
    mine = register(alpha, "https://hooks.example/a", envelope="order_id")
    theirs = register(beta, "https://hooks.example/b", chaos=True)
    listed = alpha.control("GET", "/webhooks").json()
    assert [(h["id"], h["client"], h["envelope"], h["chaos"]) for h in listed] == [
        (mine["id"], "alpha", "order_id", False), (theirs["id"], "beta", "standard", True)]
    assert all("token" not in h for h in listed)


@pytest.mark.parametrize("body,status,message", [
    ({"envelope": "xml"}, 400, "envelope must be one of standard, order_id, timestamp"),
    ({"chaos": "yes"}, 400, "chaos must be a boolean"),
    ({"url": "https://elsewhere.example/h"}, 400, "only envelope and chaos change here, not url"),
    ({}, 400, "give envelope (standard, order_id, timestamp) and/or chaos (true or false)"),
])
def test_a_bad_switch_is_refused_and_changes_nothing(alpha, body, status, message):
    hook = register(alpha, "https://hooks.example/a")
    r = alpha.control("PATCH", f"/webhooks/{hook['id']}", body)
    assert r.status_code == status and r.json()["error"]["message"].startswith(message)
    after = alpha.get(f"/api/v1/webhooks/{hook['id']}").json()
    assert (after["envelope"], after["chaos"], after["url"]) == ("standard", False, "https://hooks.example/a")


def test_an_unknown_webhook_is_404(alpha):
    r = alpha.control("PATCH", "/webhooks/424242", {"chaos": True})
    assert r.status_code == 404 and r.json()["error"]["message"] == "webhook not found"


def test_the_settings_default_is_what_a_webhook_registered_without_one_gets(alpha):
    r = alpha.control("PATCH", "/settings", {"webhook_envelope": "order_id", "webhook_chaos": True})
    assert r.status_code == 200 and (r.json()["webhook_envelope"], r.json()["webhook_chaos"]) == ("order_id", True)
    defaulted = register(alpha, "https://hooks.example/d")
    chosen = register(alpha, "https://hooks.example/c", envelope="timestamp", chaos=False)
    assert (defaulted["envelope"], defaulted["chaos"]) == ("order_id", True)
    assert (chosen["envelope"], chosen["chaos"]) == ("timestamp", False)


@pytest.mark.parametrize("change,message", [
    ({"webhook_envelope": "xml"}, "webhook_envelope must be one of standard, order_id, timestamp, not 'xml'"),
    ({"webhook_chaos": 1}, "webhook_chaos must be true or false, not 1"),
])
def test_a_bad_webhook_default_is_refused_with_nothing_applied(alpha, sb, change, message):
    r = alpha.control("PATCH", "/settings", {"speed": 0, "processing_delay_s": 7, **change})
    assert r.status_code == 400 and message in r.json()["error"]["message"]
    assert (sb.settings.processing_delay_s, sb.settings.webhook_envelope, sb.settings.webhook_chaos) == (
        20, "standard", False)
    with pytest.raises(ValueError, match="must be"):
        SandboxSettings(**change)
