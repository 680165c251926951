"""Webhook configuration and delivery endpoints (general error shape)."""
from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from flask import Blueprint, request

from . import envelopes, webhooks
from .errors import ApiError
from .httputil import client, int_arg, json_body, json_response, page_headers, sandbox
from .models import Webhook

bp = Blueprint("webhooks", __name__, url_prefix="/api/v1")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _bad(message: str, code: str = "VALIDATION_ERROR") -> ApiError:
    return ApiError(400, message, code=code)


def validate_config(sb, body: dict, creating: bool) -> dict:
    """Checked fields of a create or update body (only those present on update)."""
    out = {}
    for name in ("name", "url", "events"):
        if creating and body.get(name) in (None, "", []):
            raise _bad(f"{name} is required")
    if "name" in body:
        if not isinstance(body["name"], str) or not body["name"].strip() or len(body["name"]) > 100:
            raise _bad("name must be a non-empty string of at most 100 characters")
        out["name"] = body["name"].strip()
    if "url" in body:
        out["url"] = _check_url(sb, body["url"])
    if "events" in body:
        events = body["events"]
        if (not isinstance(events, list) or not events
                or not all(isinstance(e, str) for e in events)):
            raise _bad("events must be a non-empty array of event types")
        unknown = [e for e in events if e not in envelopes.EVENT_TYPES]
        if unknown:
            raise _bad(f"unknown event types: {', '.join(unknown)}", "INVALID_EVENT_TYPE")
        out["events"] = list(dict.fromkeys(events))
    for name in ("is_active", "chaos"):
        if name in body:
            if not isinstance(body[name], bool):
                raise _bad(f"{name} must be a boolean")
            out[name] = body[name]
    if "envelope" in body:
        if body["envelope"] not in envelopes.FORMS:
            raise _bad("envelope must be one of standard, order_id, timestamp")
        out["envelope"] = body["envelope"]
    return out


def _check_url(sb, url) -> str:
    if not isinstance(url, str):
        raise _bad("url must be a string", "INVALID_URL")
    parts = urlsplit(url)
    if not parts.hostname:
        raise _bad("url must be an absolute HTTPS URL", "INVALID_URL")
    if parts.scheme == "https":
        return url
    if (parts.scheme == "http" and sb.settings.allow_http_webhooks
            and parts.hostname in LOOPBACK):
        return url          # sandbox-only exception: plain http to loopback, behind a flag
    raise _bad("url must use HTTPS; plain HTTP is rejected", "INVALID_URL")


def _own_webhook(sb, wid: int) -> Webhook:
    hook = sb.webhooks.get(wid)
    if hook is None or hook.client_key != client().key:
        raise ApiError(404, "webhook not found", code="WEBHOOK_NOT_FOUND")
    return hook


@bp.get("/webhooks")
def list_webhooks():
    """The client's webhooks (never with their tokens)."""
    sb = sandbox()
    with sb.lock:
        return json_response([webhooks.webhook_json(h) for h in sb.webhooks.values()
                              if h.client_key == client().key])


@bp.post("/webhooks")
def create_webhook():
    """Register a webhook; the token is returned once, here."""
    sb = sandbox()
    body = json_body()
    fields = validate_config(sb, body, creating=True)
    me = client()
    credential_id = body.get("credential_id")
    with sb.lock:
        if credential_id is not None:
            if isinstance(credential_id, bool) or credential_id != me.credential_id:
                raise _bad("credential_id is not a credential of this client",
                           "INVALID_CREDENTIAL")
            token = me.signing_secret   # Authentication 5: the credential's signing secret
        else:
            token = "whk_" + secrets.token_hex(24)
        hook = Webhook(sb.next_id("webhook"), me.key, fields["name"], fields["url"], token,
                       fields["events"], sb.clock.now(), is_active=fields.get("is_active", True),
                       credential_id=credential_id,
                       envelope=fields.get("envelope", sb.settings.webhook_envelope),
                       chaos=fields.get("chaos", sb.settings.webhook_chaos))
        sb.webhooks[hook.id] = hook
        body_out = webhooks.webhook_json(hook, token=True)
    for listener in list(sb.webhook_listeners):
        listener(hook, token)
    return json_response(body_out, 201)


@bp.get("/webhooks/<int:wid>")
def get_webhook(wid: int):
    """One webhook (without its token)."""
    sb = sandbox()
    with sb.lock:
        return json_response(webhooks.webhook_json(_own_webhook(sb, wid)))


@bp.put("/webhooks/<int:wid>")
def update_webhook(wid: int):
    """Update name, url, events, is_active (and the sandbox's envelope, chaos)."""
    sb = sandbox()
    body = json_body()
    with sb.lock:
        hook = _own_webhook(sb, wid)
        for name, value in validate_config(sb, body, creating=False).items():
            setattr(hook, name, value)
        hook.updated_at = sb.clock.now()
        return json_response(webhooks.webhook_json(hook))


@bp.delete("/webhooks/<int:wid>")
def delete_webhook(wid: int):
    """Delete a webhook; its pending deliveries fail with "webhook deleted"."""
    sb = sandbox()
    with sb.lock:
        hook = _own_webhook(sb, wid)
        del sb.webhooks[hook.id]
    return json_response({"success": True, "data": {"message": "webhook deleted", "id": wid}})


@bp.post("/webhooks/<int:wid>/test")
def test_webhook(wid: int):
    """Queue a webhook.test event to this webhook (sent by the scheduler at once)."""
    sb = sandbox()
    with sb.lock:
        hook = _own_webhook(sb, wid)
        now = sb.clock.now()
        event_id = webhooks.new_event_id(sb)
        payload = envelopes.test_payload(hook.envelope, event_id, now, hook)
        delivery = webhooks.queue(sb, hook, None, envelopes.TEST_EVENT, event_id, payload, now)
    return json_response({"success": True, "data": {"message": "test delivery queued",
                                                    "delivery_id": delivery.id,
                                                    "event_id": event_id}})


@bp.get("/webhooks/deliveries")
def list_deliveries():
    """The client's deliveries, newest first, filterable; paging in headers."""
    sb = sandbox()
    page = int_arg("page", 1, lo=1, clamp=True)
    limit = int_arg("limit", 20, lo=1, hi=100, clamp=True)      # maximum 100
    status = (request.args.get("status") or "").lower() or None
    event_type = request.args.get("event_type") or None
    order_id = int_arg("order_id", None)
    webhook_id = int_arg("webhook_url_id", None)
    me = client().key
    with sb.lock:
        found = [d for d in sorted(sb.deliveries.values(), key=lambda d: d.id, reverse=True)
                 if d.client_key == me and (status is None or d.status == status)
                 and (event_type is None or d.event_type == event_type)
                 and (order_id is None or d.order_id == order_id)
                 and (webhook_id is None or d.webhook_id == webhook_id)]
        chunk = [webhooks.delivery_json(d) for d in found[(page - 1) * limit: page * limit]]
    headers = page_headers(page, limit, len(found), has_more=False, per_page_name="X-Page-Size")
    return json_response({"success": True, "data": {"deliveries": chunk}}, headers=headers)


@bp.get("/webhooks/deliveries/stats")
def delivery_stats():
    """Aggregate delivery counts of the client."""
    sb = sandbox()
    with sb.lock:
        return json_response({"success": True, "data": webhooks.stats(sb, client().key)})


def _own_delivery(sb, did: int):
    found = sb.deliveries.get(did)
    if found is None or found.client_key != client().key:
        raise ApiError(404, "delivery not found", code="DELIVERY_NOT_FOUND")
    return found


@bp.get("/webhooks/deliveries/<int:did>")
def get_delivery(did: int):
    """One delivery with its complete payload, response body and attempt log."""
    sb = sandbox()
    with sb.lock:
        return json_response({"success": True,
                              "data": webhooks.delivery_json(_own_delivery(sb, did), full=True)})


@bp.post("/webhooks/deliveries/<int:did>/retry")
def retry_delivery(did: int):
    """Re-queue a failed delivery (one more attempt, up to the sandbox's attempt cap)."""
    sb = sandbox()
    with sb.lock:
        delivery = _own_delivery(sb, did)
        try:
            webhooks.retry(sb, delivery)
        except ValueError as exc:
            code = "ATTEMPTS_EXHAUSTED" if "exhausted" in str(exc) else "DELIVERY_NOT_FAILED"
            raise ApiError(400, str(exc), code=code) from exc
    return json_response({"success": True, "data": {"message": "delivery re-queued",
                                                    "delivery_id": did}})
