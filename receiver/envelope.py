"""Envelope normalisation: the document's three payload forms become one `Event`. Pure.

The document ("Events > Envelope") shows one envelope and says two more "must be tolerated":
  1. {event_id, event_type, created_at, data: {id, status, amount, quantity, delivered_quantity, ...}}
  2. {event_id, event, created_at, data: {order_id, status, total_amount, currency, vouchers, ...}}
  3. {event, timestamp, data: {order_id, ref, status, vouchers_ready, total_vouchers}}
A body that cannot be read (not UTF-8, not JSON, wrong types, unknown event type) still
yields an Event, with `quarantine` naming why: it is kept and acknowledged, never retried.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping

from partnerkit.money import MoneyError, to_decimal
from partnerkit.timeutil import parse_ts

# Event types of the document ("Events > Event types") and the order status each implies.
EVENT_STATUS = {
    "order.created": "PENDING",
    "order.pending": "PENDING",
    "order.processing": "PROCESSING",
    "order.partially_delivered": "PARTIALLY_DELIVERED",
    "order.delivered": "DELIVERED",
    "order.cancelled": "CANCELLED",
    "order.failed": "FAILED",
}
ORDER_STATUSES = frozenset(EVENT_STATUS.values())
# The payload of a test delivery is "not shown"; these names are treated as tests (docs/receiver.md).
TEST_EVENT_TYPES = frozenset({"test", "ping", "webhook.test", "webhook.ping", "order.test"})


@dataclass(frozen=True)
class Event:
    """One received event, whatever its envelope form."""

    event_id: str                 # the dedup key
    event_type: str | None
    order_id: int | None
    status: str | None            # upper-case order status
    occurred_at: datetime | None
    amount: Decimal | None
    delivered_quantity: int | None
    quantity: int | None
    raw: Any                      # the parsed JSON (or None when unparseable)
    quarantine: str | None = None  # why it is kept but not applied
    is_test: bool = False


def dedup_key(payload: Any, headers: Mapping[str, str], body: bytes) -> str:
    """Body event_id, else the X-Event-ID header, else "sha256:" + hex digest of the raw body."""
    if isinstance(payload, dict):
        value = payload.get("event_id")
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    lowered = {k.lower(): v for k, v in headers.items()}
    header = (lowered.get("x-event-id") or "").strip()
    if header:
        return header
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _first(data: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if data.get(name) is not None:
            return data[name]
    return None


def _int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{field} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ValueError(f"{field} is not an integer")


def _moment(value: Any) -> datetime | None:
    """ISO 8601 string or Unix seconds ("timestamp" of form 3 is untyped in the document)."""
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return datetime.fromtimestamp(int(value), timezone.utc)
    if isinstance(value, str):
        if value.strip().isdigit():
            return datetime.fromtimestamp(int(value.strip()), timezone.utc)
        return parse_ts(value)
    return None


def _loads(body: bytes) -> Any:
    return json.loads(body.decode("utf-8"), parse_float=Decimal)


def normalise(body: bytes, headers: Mapping[str, str]) -> Event:
    """Read any of the three envelope forms (raw bytes plus delivery headers) into an Event."""
    try:
        payload = _loads(body)
    except UnicodeDecodeError:
        return _quarantined(None, headers, body, "body is not UTF-8")
    except ValueError:
        return _quarantined(None, headers, body, "body is not JSON")
    if not isinstance(payload, dict):
        return _quarantined(payload, headers, body, "body is not a JSON object")
    lowered = {k.lower(): v for k, v in headers.items()}
    event_type = _first(payload, "event_type", "event")
    if event_type is None:
        event_type = lowered.get("x-event-type")  # the delivery header, when the body lacks it
    if not isinstance(event_type, str) or not event_type.strip():
        return _quarantined(payload, headers, body, "no event type")
    event_type = event_type.strip().lower()
    data = payload.get("data", {})
    if not isinstance(data, dict):
        return _quarantined(payload, headers, body, "data is not an object", event_type)
    key = dedup_key(payload, headers, body)
    try:
        occurred_at = _moment(_first(payload, "created_at", "timestamp"))
    except (ValueError, OverflowError, OSError):
        occurred_at = None  # an unreadable time does not make the event unreadable
    if event_type in TEST_EVENT_TYPES:
        return Event(key, event_type, None, None, occurred_at, None, None, None, payload, is_test=True)
    if event_type not in EVENT_STATUS:
        return _quarantined(payload, headers, body, f"unknown event type {event_type[:64]!r}", event_type)
    try:
        order_id = _int(_first(data, "id", "order_id"), "order id")
        delivered = _int(_first(data, "delivered_quantity", "vouchers_ready"), "delivered quantity")
        quantity = _int(_first(data, "quantity", "total_vouchers"), "quantity")
        amount_raw = _first(data, "amount", "total_amount")
        amount = None if amount_raw is None else to_decimal(amount_raw, field="amount")
    except (ValueError, MoneyError) as exc:
        return _quarantined(payload, headers, body, str(exc), event_type)
    if order_id is None:
        return _quarantined(payload, headers, body, "no order id in data", event_type)
    status = data.get("status")
    status = status.strip().upper() if isinstance(status, str) else None
    if status not in ORDER_STATUSES:
        status = EVENT_STATUS[event_type]  # e.g. form 3 may carry a lower-case or unknown status
    return Event(key, event_type, order_id, status, occurred_at, amount, delivered, quantity, payload)


def _quarantined(payload: Any, headers: Mapping[str, str], body: bytes, reason: str,
                 event_type: str | None = None) -> Event:
    key = dedup_key(payload, headers, body)
    return Event(key, event_type, None, None, None, None, None, None, payload, quarantine=reason)
