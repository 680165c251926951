"""Webhook delivery engine: queue events, attempt on the 0/1/2/4/8-minute schedule, record.

Attempts are collected under the state lock (take_due), POSTed without it (send_batch),
then recorded under it again.  Chaos webhooks get random initial delays (reordering) and
duplicated sends, drawn from the seeded RNG.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests

from . import envelopes
from .auth import sign_webhook
from .clock import iso
from .models import Delivery, Order, Webhook
from .money import dumps


@dataclass(slots=True)
class Attempt:
    """One delivery attempt to make outside the lock."""

    delivery_id: int
    webhook_id: int
    url: str
    token: str
    event_id: str
    event_type: str
    body: bytes
    duplicate: bool


def new_event_id(sb) -> str:
    """A fresh event id, stable across every retry of its deliveries."""
    return f"evt_{sb.rng.getrandbits(96):024x}"


def emit(sb, order: Order, event_type: str) -> list[Delivery]:
    """Queue one event of an order to every active webhook of its client subscribed to it."""
    now = sb.clock.now()
    event_id = new_event_id(sb)
    product = sb.products[order.product_id]
    out = []
    for hook in list(sb.webhooks.values()):
        if hook.client_key != order.client_key or not hook.is_active:
            continue
        if event_type not in hook.events:
            continue
        payload = envelopes.order_payload(hook.envelope, event_type, event_id, now, order, product)
        out.append(queue(sb, hook, order.id, event_type, event_id, payload, now))
    return out


def queue(sb, hook: Webhook, order_id: int | None, event_type: str, event_id: str,
          payload: dict, now: datetime) -> Delivery:
    """Create a pending delivery; its body is serialised once and kept for every attempt."""
    first = now
    if hook.chaos:
        first = now + timedelta(seconds=sb.rng.uniform(0, sb.settings.chaos_max_delay_s))
    delivery = Delivery(sb.next_id("delivery"), hook.client_key, hook.id, order_id, event_type,
                        event_id, payload, dumps(payload).encode(), now, first,
                        max_attempts=sb.settings.webhook_max_attempts)
    sb.deliveries[delivery.id] = delivery
    sb.pending_deliveries.add(delivery.id)
    return delivery


def take_due(sb, now: datetime) -> list[Attempt]:
    """Mark every due pending delivery in flight and return the attempts (lock held)."""
    plain, chaotic = [], []
    for did in sorted(sb.pending_deliveries):
        d = sb.deliveries[did]
        if d.in_flight or d.next_attempt_at is None or d.next_attempt_at > now:
            continue
        hook = sb.webhooks.get(d.webhook_id)
        if hook is None:
            d.status, d.last_error, d.next_attempt_at = "failed", "webhook deleted", None
            sb.pending_deliveries.discard(did)
            continue
        if not hook.is_active:
            continue          # held while the webhook is inactive
        d.in_flight = True
        duplicate = hook.chaos and sb.rng.random() < sb.settings.chaos_duplicate_rate
        attempt = Attempt(did, hook.id, hook.url, hook.token, d.event_id, d.event_type,
                          d.body, duplicate)
        (chaotic if hook.chaos else plain).append(attempt)
    sb.rng.shuffle(chaotic)
    return plain + chaotic


def send_batch(sb, batch: list[Attempt]) -> int:
    """POST each attempt (no lock held) and record its outcome."""
    for attempt in batch:
        result = post(sb, attempt)
        if attempt.duplicate and result["ok"]:
            post(sb, attempt)   # chaos: the same event again, same event_id, new request id
        with sb.lock:
            record(sb, attempt.delivery_id, result)
    return len(batch)


def post(sb, attempt: Attempt) -> dict:
    """One signed HTTP POST with every delivery header of the document."""
    stamp = str(int(time.time()))            # real unix seconds: receivers use their clock
    request_id = str(uuid.uuid4())
    headers = {"Content-Type": "application/json", "User-Agent": sb.settings.user_agent,
               "X-Webhook-ID": str(attempt.webhook_id), "X-Event-ID": attempt.event_id,
               "X-Event-Type": attempt.event_type, "X-Timestamp": stamp,
               "X-Signature": sign_webhook(attempt.token, stamp, attempt.body),
               "X-Request-ID": request_id, "X-SERVICE-WEBHOOK-TOKEN": attempt.token}
    timeout = sb.settings.webhook_timeout_s
    started = time.monotonic()
    try:
        response = requests.post(attempt.url, data=attempt.body, headers=headers,
                                 timeout=timeout, allow_redirects=False)
    except Exception as exc:   # any failure to deliver is a failed attempt, never a crash
        elapsed = int((time.monotonic() - started) * 1000)
        return {"ok": False, "status": None, "ms": elapsed, "body": None,
                "error": f"{type(exc).__name__}: {exc}"[:300], "request_id": request_id}
    elapsed = int((time.monotonic() - started) * 1000)
    ok = 200 <= response.status_code < 300 and elapsed <= timeout * 1000
    return {"ok": ok, "status": response.status_code, "ms": elapsed,
            "body": response.text[:2000], "request_id": request_id,
            "error": None if ok else f"receiver answered {response.status_code}"}


def record(sb, delivery_id: int, result: dict) -> None:
    """Apply an attempt's outcome: delivered, or retry per Delivery rules, or failed."""
    d = sb.deliveries.get(delivery_id)
    if d is None:
        return
    now = sb.clock.now()
    d.in_flight = False
    d.attempt_count += 1
    d.response_status, d.response_time_ms = result["status"], result["ms"]
    d.response_body, d.last_error = result["body"], result["error"]
    d.attempts.append({"attempt": d.attempt_count, "at": iso(now),
                       "request_id": result["request_id"], "response_status": result["status"],
                       "response_time_ms": result["ms"], "error": result["error"]})
    if result["ok"]:
        d.status, d.delivered_at, d.next_attempt_at = "delivered", now, None
        sb.pending_deliveries.discard(d.id)
    elif d.attempt_count >= d.max_attempts:
        d.status, d.next_attempt_at = "failed", None      # permanently failed
        sb.pending_deliveries.discard(d.id)
    else:
        delays = sb.settings.webhook_retry_delays_s
        delay = delays[min(d.attempt_count - 1, len(delays) - 1)]
        d.next_attempt_at = now + timedelta(seconds=delay)


def retry(sb, d: Delivery) -> None:
    """Manual re-queue of a failed delivery: grants one more attempt, up to the cap."""
    if d.status != "failed":
        raise ValueError("only failed deliveries can be retried")
    if d.attempt_count >= sb.settings.manual_retry_attempt_cap:
        raise ValueError("delivery attempts exhausted")
    d.max_attempts = d.attempt_count + 1
    d.status, d.next_attempt_at = "pending", sb.clock.now()
    sb.pending_deliveries.add(d.id)


def delivery_json(d: Delivery, full: bool = False) -> dict:
    """Webhook delivery record; `full` adds the response body and the attempt log."""
    out = {"id": d.id, "webhook_url_id": d.webhook_id, "order_id": d.order_id,
           "event_type": d.event_type, "event_id": d.event_id, "payload": d.payload,
           "status": d.status, "attempt_count": d.attempt_count, "max_attempts": d.max_attempts,
           "response_status": d.response_status, "response_time_ms": d.response_time_ms,
           "delivered_at": iso(d.delivered_at), "created_at": iso(d.created_at)}
    if full:
        out.update(response_body=d.response_body, last_error=d.last_error,
                   next_attempt_at=iso(d.next_attempt_at), attempts=list(d.attempts))
    return out


def stats(sb, client_key: str) -> dict:
    """Delivery counts of a client, overall and over the last 24 hours (sandbox clock)."""
    since = sb.clock.now() - timedelta(hours=24)
    out = dict.fromkeys(("total_count", "pending_count", "delivered_count", "failed_count",
                         "last_24h_total", "last_24h_delivered", "last_24h_failed"), 0)
    for d in sb.deliveries.values():
        if d.client_key != client_key:
            continue
        out["total_count"] += 1
        out[f"{d.status}_count"] += 1
        if d.created_at >= since:
            out["last_24h_total"] += 1
            if d.status in ("delivered", "failed"):
                out[f"last_24h_{d.status}"] += 1
    return out


def webhook_json(hook: Webhook, token: bool = False) -> dict:
    """Webhook configuration; the token only in the create response."""
    out = {"id": hook.id, "name": hook.name, "url": hook.url}
    if token:
        out["token"] = hook.token
    out.update(events=list(hook.events), is_active=hook.is_active)
    if hook.credential_id is not None:
        out["credential_id"] = hook.credential_id
    out.update(envelope=hook.envelope, chaos=hook.chaos, created_at=iso(hook.created_at))
    if hook.updated_at is not None:
        out["updated_at"] = iso(hook.updated_at)
    return out
