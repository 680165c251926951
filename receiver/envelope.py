"""Envelope normalisation: the document's three payload forms become one `Event`. Pure.

The document ("Events > Envelope") shows one envelope and says two more "must be tolerated":
  1. {event_id, event_type, created_at, data: {id, status, amount, quantity, delivered_quantity, ...}}
  2. {event_id, event, created_at, data: {order_id, status, total_amount, currency, vouchers, ...}}
  3. {event, timestamp, data: {order_id, ref, status, vouchers_ready, total_vouchers}}
A body that cannot be read (not UTF-8, not JSON, nested too deeply, wrong types, an order id out of
range, text that is not valid Unicode, unknown event type) still yields an Event, with
`quarantine` naming why: it is kept and acknowledged, never retried. A figure that cannot be read
(an amount, quantity or delivered count of the wrong type, negative, out of range or with more than
2 decimals) quarantines nothing: it is a hint, dropped from the Event and named in `dropped`.
`normalise` never raises, and every Event it returns can be stored: its texts encode as UTF-8, its
integers fit SQLite's 64-bit INTEGER, its amount has at most 2 decimals and fits in paise.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping

from partnerkit.money import MoneyError, cents, to_decimal
from partnerkit.timeutil import parse_ts

MAX_ID = 2 ** 63 - 1       # SQLite's INTEGER; a larger order id cannot be stored, so it is refused
MAX_QUANTITY = 2 ** 31 - 1  # far above any order (the document's example maximum is 1000)
MAX_REASON = 200           # a quarantine reason quotes the offending value, shortened
# Unix seconds that datetime can represent (years 1970..9999); anything else is an unreadable time.
_MAX_UNIX_S = 253_402_300_799

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
    # What the event shows of the order that never changes, compared with the stored order holding its id but not
    # stored from it (partnerkit.store.orders.another_order): the ref (form 1's reference_code, form 3's ref) and the
    # per-voucher denomination in cents. None where the form has none or it is unreadable: the event is read as
    # before. Not form 1's data.created_at: the document does not say it is the order's placed_at (the list's
    # field), and a wrong guess would turn every event of an order away; the order sync compares placed_at.
    reference_code: str | None = None
    denomination_cents: int | None = None
    # Figures of data that could not be read, as (the key in data, why): the event is applied without them (they are
    # hints) and the receiver logs a WARNING naming them; the body kept in the inbox holds them as sent.
    dropped: tuple[tuple[str, str], ...] = ()


def _is_text(value: Any) -> bool:
    """A str that SQLite and the logs can take: valid Unicode (no lone surrogates from a \\ud800 escape)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _body_event_id(payload: Any) -> str | None:
    if isinstance(payload, dict):
        value = payload.get("event_id")
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if _is_text(value) and value.strip():
            return value.strip()
    return None


def dedup_key(payload: Any, headers: Mapping[str, str], body: bytes) -> str:
    """Body event_id, else the X-Event-ID header, else "sha256:" + hex digest of the raw body."""
    from_body = _body_event_id(payload)
    if from_body is not None:
        return from_body
    header = _header(headers, "x-event-id")
    if header:
        return header
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """One header's stripped text (names compared case-insensitively), None when absent or not text."""
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == name:
            return value.strip() if _is_text(value) else None
    return None


def _first(data: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if data.get(name) is not None:
            return data[name]
    return None


def _int(value: Any, field: str, low: int, high: int) -> int | None:
    """An integer field: a JSON integer, an integral number or a string of ASCII digits, in [low, high]."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{field} is not an integer: {value!r}")
    if isinstance(value, Decimal) and value.is_finite() and low <= value <= high and value == value.to_integral_value():
        value = int(value)  # compared first: int() of 1E+999999999 would build a billion digits
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) <= 20:
        value = int(value.strip())  # isdigit() alone also takes "²" and Arabic-Indic digits
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{field} is not an integer: {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{field} is out of range: {value}")
    return value


def _moment(value: Any) -> datetime | None:
    """ISO 8601 string or Unix seconds ("timestamp" of form 3 is untyped in the document)."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip()) if len(value.strip()) <= 20 else None
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        if isinstance(value, Decimal) and not value.is_finite():
            return None
        if not 0 <= value <= _MAX_UNIX_S:
            return None
        return datetime.fromtimestamp(int(value), timezone.utc)
    if _is_text(value):
        return parse_ts(value)
    return None


class _NotJson(ValueError):
    """A body Python's json would read but RFC 8259 does not allow."""


def _no_constants(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


# NaN and Infinity are Python's extensions, not JSON: refused rather than turned into floats. One decoder for
# every body: json.loads(text, parse_float=..., parse_constant=...) builds a decoder and its scanner per call,
# two thirds of the 12 us it took for a webhook's body; the same decoder's decode() is what json.loads runs.
_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constants)


def _loads(body: bytes) -> Any:
    # One UTF-8 byte order mark is tolerated (RFC 8259 allows a reader to ignore it), as the utf-8-sig codec
    # strips it (in Python, and a tenth of its cost); the signature was already checked over the raw bytes, BOM
    # included. A second BOM is a character json refuses, as before.
    if body.startswith(codecs.BOM_UTF8):
        body = body[3:]
    return _DECODER.decode(body.decode("utf-8"))


def _amount(value: Any) -> Decimal | None:
    """An order total: number or 2-decimal string, not negative, at most 2 decimals (never rounded)."""
    if value is None:
        return None
    amount = to_decimal(value, field="amount", strict=True)  # also refuses |amount| >= MONEY_LIMIT
    if amount < 0:
        raise MoneyError(f"amount: {amount} is negative")
    return amount


def normalise(body: bytes, headers: Mapping[str, str]) -> Event:
    """Read any of the three envelope forms (raw bytes plus delivery headers) into an Event."""
    try:
        payload = _loads(body)
    except UnicodeDecodeError:
        return _quarantined(None, headers, body, "body is not UTF-8")
    except RecursionError:  # json's C scanner recurses once per nesting level
        return _quarantined(None, headers, body, "body is nested too deeply")
    except _NotJson as exc:
        return _quarantined(None, headers, body, f"body is not JSON: {exc}")
    except ValueError:  # JSONDecodeError, and integers longer than sys.get_int_max_str_digits()
        return _quarantined(None, headers, body, "body is not JSON")
    if not isinstance(payload, dict):
        return _quarantined(payload, headers, body, "body is not a JSON object")
    event_type = _first(payload, "event_type", "event")
    if event_type is None:
        event_type = _header(headers, "x-event-type")  # the delivery header, when the body lacks it
    if not _is_text(event_type) or not event_type.strip():
        return _quarantined(payload, headers, body, "no event type (or not a string)")
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
        order_id = _int(_first(data, "id", "order_id"), "order id", 1, MAX_ID)
    except ValueError as exc:
        return _quarantined(payload, headers, body, str(exc), event_type)
    if order_id is None:
        return _quarantined(payload, headers, body, "no order id in data", event_type)
    # The figures are hints (orders.apply fills only what the order lacks; the order sync and the detail the voucher
    # fetch reads are the truth): one that cannot be read is dropped, and the event applied without it.
    dropped: list[tuple[str, str]] = []
    delivered = _hint(data, ("delivered_quantity", "vouchers_ready"), dropped, _delivered)
    quantity = _hint(data, ("quantity", "total_vouchers"), dropped, _quantity)
    amount = _hint(data, ("amount", "total_amount"), dropped, _amount)
    status = data.get("status")
    status = status.strip().upper() if isinstance(status, str) else None
    if status not in ORDER_STATUSES:
        status = EVENT_STATUS[event_type]  # e.g. form 3 may carry a lower-case or unknown status
    ref = _first(data, "reference_code", "ref")
    return Event(key, event_type, order_id, status, occurred_at, amount, delivered, quantity, payload,
                 reference_code=ref if _is_text(ref) and ref else None, denomination_cents=_cents(data.get("denomination")),
                 dropped=tuple(dropped))


def _delivered(value: Any) -> int | None:
    return _int(value, "delivered quantity", 0, MAX_QUANTITY)


def _quantity(value: Any) -> int | None:
    return _int(value, "quantity", 0, MAX_QUANTITY)


def _hint(data: Mapping[str, Any], names: tuple[str, ...], dropped: list[tuple[str, str]],
          read: Callable[[Any], Any]) -> Any:
    """The first of `names` present in data, read; None when it cannot be read, with (name, why) added to `dropped`."""
    for name in names:
        value = data.get(name)
        if value is not None:
            try:
                return read(value)
            except (ValueError, ArithmeticError) as exc:  # MoneyError is a ValueError
                dropped.append((name, _shortened(str(exc))))
                return None
    return None


def _shortened(reason: str) -> str:
    """A reason quoting a value, cut to MAX_REASON: a 1 MiB value must not reach the logs."""
    return reason if len(reason) <= MAX_REASON else reason[:MAX_REASON - 3] + "..."


def _cents(value: Any) -> int | None:
    """A per-voucher denomination in cents, to compare only: None when absent or unreadable (never a refusal)."""
    if value is None:
        return None
    try:
        return cents(to_decimal(value, field="denomination", strict=True))
    except (MoneyError, ValueError, ArithmeticError):
        return None


def _quarantined(payload: Any, headers: Mapping[str, str], body: bytes, reason: str,
                 event_type: str | None = None) -> Event:
    key = dedup_key(payload, headers, body)
    return Event(key, event_type, None, None, None, None, None, None, payload, quarantine=_shortened(reason))
