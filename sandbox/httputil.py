"""Small helpers shared by the blueprints: state access, JSON I/O, paging, idempotency."""
from __future__ import annotations

import math
import re
from datetime import date, datetime, time, timedelta, timezone

from flask import Response, current_app, g, request

from .errors import ApiError
from .money import BadJSON, dumps, loads

# Query parameters as the document writes them: integers in ASCII digits (Python's int() also
# takes "1_0" and other scripts' digits), dates exactly YYYY-MM-DD (date.fromisoformat also takes
# ISO week dates such as 2025-W11-1, the same length).
_INTEGER = re.compile(r"-?[0-9]+")
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def sandbox():
    """The Sandbox of the current app."""
    return current_app.extensions["sandbox"]


def client():
    """The authenticated client of this request."""
    return g.client


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON response with Decimal amounts rendered as 2-decimal numbers."""
    return Response(dumps(obj), status=status, headers=headers or {},
                    mimetype="application/json")


def json_body(message: str = "invalid request body") -> dict:
    """The request body as a JSON object (floats as Decimal), else ApiError(400, message).

    "JSON bodies use Content-Type application/json" (Endpoints; "required" on recharge submit):
    a body sent under another type is refused like a malformed one, so a client that forgets
    the header fails here and not first in production.
    """
    if request.mimetype != "application/json":
        raise ApiError(400, message, detail="Content-Type must be application/json")
    raw = request.get_data(cache=True)
    try:
        body = loads(raw or b"")
    except BadJSON as exc:
        raise ApiError(400, message, detail="malformed JSON") from exc
    if not isinstance(body, dict):
        raise ApiError(400, message, detail="the body must be a JSON object")
    return body


def int_arg(name: str, default: int | None, message: str | None = None,
            lo: int | None = None, hi: int | None = None, clamp: bool = False) -> int | None:
    """An integer query parameter; out of [lo, hi] -> 400 `message`, or clamped."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not _INTEGER.fullmatch(raw.strip()):
        if clamp:
            return default
        raise ApiError(400, message or f"{name} must be an integer")
    value = int(raw)
    if clamp:
        if lo is not None:
            value = max(lo, value)
        if hi is not None:
            value = min(hi, value)
        return value
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ApiError(400, message or f"{name} must be between {lo} and {hi}")
    return value


def date_arg(name: str, end_of_day: bool = False) -> datetime | None:
    """A YYYY-MM-DD parameter as the UTC start of that day (or the start of the next)."""
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        if not _DAY.fullmatch(raw):
            raise ValueError(raw)
        day = date.fromisoformat(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be a date in YYYY-MM-DD format") from None
    start = datetime.combine(day, time.min, tzinfo=timezone.utc)
    return start + timedelta(days=1) if end_of_day else start


def page_headers(page: int, per_page: int, total: int, *, has_more: bool = True,
                 per_page_name: str = "X-Per-Page") -> dict:
    """The pagination headers (X-Total-Pages is 0 when nothing matches)."""
    pages = math.ceil(total / per_page) if per_page else 0
    headers = {"X-Page": str(page), per_page_name: str(per_page),
               "X-Total-Count": str(total), "X-Total-Pages": str(pages)}
    if has_more:
        headers["X-Has-More"] = "true" if page * per_page < total else "false"
    return headers


def idempotency_key(required_message: str, too_short_message: str,
                    too_long_message: str) -> str:
    """The Idempotency-Key header, 8 to 256 characters (Limits)."""
    key = request.headers.get("Idempotency-Key")
    if key is None or key.strip() == "":
        raise ApiError(400, required_message, code="IDEMPOTENCY_KEY_REQUIRED")
    if len(key) < 8:
        raise ApiError(400, too_short_message, code="IDEMPOTENCY_KEY_TOO_SHORT")
    if len(key) > 256:
        raise ApiError(400, too_long_message, code="IDEMPOTENCY_KEY_TOO_LONG")
    return key


def replay(sb, scope: str, key: str) -> Response | None:
    """The stored original response for (client, scope, key), if still retained."""
    record = sb.idempotency.get((g.client.key, scope, key))
    if record is None or record.expires_at <= sb.clock.now():
        return None
    headers = dict(record.headers, **{"Idempotent-Replayed": "true"})
    return Response(record.body, status=record.status, headers=headers,
                    mimetype="application/json")


def remember(sb, scope: str, key: str, response: Response) -> None:
    """Retain a response for replay during idempotency_ttl_s (sandbox clock)."""
    from .state import IdempotencyRecord
    expires = sb.clock.now() + timedelta(seconds=sb.settings.idempotency_ttl_s)
    sb.idempotency[(g.client.key, scope, key)] = IdempotencyRecord(
        response.status_code, response.get_data(as_text=True), {}, expires)
