"""Error responses to exceptions: the four body shapes and the document's error tables (Errors).

Body shapes, all read by `parse_error_body`:

    {"error": {"message": ...}}                      recharge endpoints
    {"error": "BadRequest", "message": ...}          order creation (names)
    {"error": "not_found", "message": ...}           order list / detail (lower-case names)
    {"error": {"name": ..., "code": ..., "message": ...}}   the partner reference's general shape

plus an empty or non-JSON body, which becomes an error named after the HTTP status.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Mapping

from partnerkit import errors, money
from partnerkit.errors import provider_said
from partnerkit.printable import printable

# Status -> the class used when no row of a table below is more specific.
_BY_STATUS: dict[int, type[errors.ApiStatusError]] = {
    400: errors.BadRequest,
    401: errors.Unauthorized,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.Conflict,
    429: errors.RateLimited,
    503: errors.ServiceUnavailable,
}

# Errors, "Recharge submit" and "Order creation": (status, pattern on code or message, class).
# Matched case-insensitively against the code and the message; first match wins.
_RULES: tuple[tuple[int, str, type[errors.ApiStatusError]], ...] = (
    (400, r"^IDEMPOTENCY_KEY_", errors.IdempotencyKeyError),
    (400, r"insufficient wallet balance|insufficient funds", errors.InsufficientBalance),
    (400, r"^invalid mobile number", errors.InvalidRecharge),
    (400, r"^amount must be", errors.InvalidRecharge),
    (400, r"^operator_id is required", errors.InvalidRecharge),
    (400, r"^unknown (operator|circle)", errors.InvalidRecharge),
    (400, r"^circle_id is required", errors.InvalidRecharge),
    (400, r"^operator does not support", errors.InvalidRecharge),
    (400, r"^operator is not mapped", errors.InvalidRecharge),
    (400, r"^duplicate reference code", errors.DuplicateOrderReference),
    (403, r"recharge is not enabled|recharge over the api is not enabled"
          r"|recharge type is not enabled|operator is not enabled", errors.RechargeNotEnabled),
    (404, r"wallet", errors.WalletNotFound),
    (409, r"matching recharge was submitted recently", errors.DuplicateRecharge),
    (503, r"^recharge is temporarily", errors.RechargeUnavailable),
)

# On POST /api/v1/recharges a status alone is enough for these (Errors, "Recharge submit"), when the
# provider said it: a body in one of its error shapes (each has `error`), its message reworded. An empty,
# non-JSON or other body (`{"message": "Service Unavailable"}`) is a proxy's or load balancer's page, not
# a row of the table: a bare 503 there may have come after
# the request was forwarded (the recharge may exist), so it stays a plain ServiceUnavailable, which
# `partnerkit.errors.is_ambiguous` calls ambiguous: the intent is kept and located, never deleted.
_SUBMIT_BY_STATUS: dict[int, type[errors.ApiStatusError]] = {
    403: errors.RechargeNotEnabled,
    409: errors.DuplicateRecharge,
    503: errors.RechargeUnavailable,
}

# Retry column of the recharge submit table: these refusals never clear on their own.
_NEVER_RETRYABLE = (errors.InsufficientBalance, errors.DuplicateRecharge, errors.IdempotencyKeyError)

_UPPER_CODE = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")


def _http_date(value: str | None) -> datetime | None:
    """An HTTP-date (RFC 9110 5.6.7) as an aware datetime; None if absent or unreadable."""
    if value is None or not value.strip():
        return None
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when


def parse_retry_after(value: str | None, *, now: datetime | None = None, sent_at: str | None = None) -> float | None:
    """Seconds to wait from a Retry-After value: delta-seconds or an HTTP-date (RFC 9110 10.2.3).

    An HTTP-date is counted from the response's own `Date` header (`sent_at`) when it has one, so
    the provider's clock meets itself (as RFC 9111 4.2.1 counts Expires from Date): a provider
    clock ahead of ours would otherwise lengthen every wait by the difference. Without a readable
    Date, from `now` (ours). How long a 429 may block is the budget's rule (at most one window).
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        when = _http_date(text)
        if when is None:
            return None
        moment = _http_date(sent_at) or now or datetime.now(timezone.utc)
        return max(0.0, (when - moment).total_seconds())
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def parse_error_body(content: bytes) -> tuple[Any, str | None, str | None]:
    """(parsed body or raw text, code, message) for any of the four shapes; (None, None, None) if empty."""
    if not content or not content.strip():
        return None, None, None
    try:
        body = money.loads(content)
    except ValueError:
        return content.decode("utf-8", "replace")[:2000], None, None
    if not isinstance(body, dict):
        return body, None, None
    error, code, message = body.get("error"), None, body.get("message")
    if isinstance(error, dict):
        code = error.get("code") or error.get("name")
        message = error.get("message", message)
    elif isinstance(error, str):
        code = error
    message = None if message is None else str(message)
    code = None if code is None else str(code)
    if code is None and message and _UPPER_CODE.match(message):
        code = message  # {error: {message: "IDEMPOTENCY_KEY_REQUIRED"}}: the message is the code
    if message is None and code is not None:
        message = code
    return body, code, message


def error_from_response(
    status: int,
    content: bytes,
    headers: Mapping[str, str],
    *,
    method: str,
    path: str,
    reason: str = "",
) -> errors.ApiStatusError:
    """The exception for one error response, carrying everything the response said.

    Its message and code are the provider's text made printable (`partnerkit.printable`): they end up in
    a command's error line, a log line and `partnerkit status`, where a control character the provider
    sent (a line break, an ESC sequence) would start another line or drive the terminal. The body is
    kept as received, for JSON output, which escapes it.
    """
    body, code, message = parse_error_body(content)
    said = provider_said(body)
    if message is None:
        message = reason or f"HTTP {status}"
    cls = _classify(status, code, message, method=method, path=path, said=said)
    retryable = status == 429 or status >= 500
    if issubclass(cls, _NEVER_RETRYABLE):
        retryable = False
    return cls(
        printable(message),
        status=status,
        code=None if code is None else printable(code),
        retryable=retryable,
        retry_after=parse_retry_after(headers.get("Retry-After"), sent_at=headers.get("Date")),
        trace_id=headers.get("X-Trace-ID"),
        body=body,
        method=method,
        path=path,
    )


def _classify(status: int, code: str | None, message: str, *, method: str, path: str,
              said: bool = True) -> type[errors.ApiStatusError]:
    # The rules read the provider's own words: a proxy's or web server's page that happens to say "wallet" or
    # "insufficient funds" is no answer of the provider's (errors.not_the_providers) and gets no meaning from it.
    for rule_status, pattern, cls in _RULES if said else ():
        if status == rule_status and any(re.search(pattern, text, re.IGNORECASE) for text in (code, message) if text):
            return cls
    if said and method == "POST" and path.endswith("/api/v1/recharges") and status in _SUBMIT_BY_STATUS:
        return _SUBMIT_BY_STATUS[status]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return errors.ServerError
    return errors.ApiStatusError
