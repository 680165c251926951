"""What a call sends, checked against the document before anything is sent.

The Idempotency-Key (generated, or checked against Limits), ids, status filters as each list writes
them, YYYY-MM-DD days, page limits, amounts (never float) and the filters a walk over every page
takes. Each raises ValueError (TypeError for a float amount) naming the field: nothing is sent.
"""

from __future__ import annotations

import re
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping

from partnerkit import money, timeutil

# Limits: Idempotency-Key length 8 to 256 characters (order creation, recharge submit).
_KEY_MIN, _KEY_MAX = 8, 256
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")  # fullmatch: "$" would let a final newline through


def new_idempotency_key() -> str:
    """A fresh Idempotency-Key: uuid4 hex, 32 characters."""
    return uuid.uuid4().hex


def check_idempotency_key(key: str | None) -> str:
    """The key to send: generated when None; ValueError unless 8-256 visible ASCII characters."""
    if key is None:
        return new_idempotency_key()
    if not isinstance(key, str) or not _KEY_MIN <= len(key) <= _KEY_MAX:
        raise ValueError(f"Idempotency-Key must be {_KEY_MIN} to {_KEY_MAX} characters (Limits)")
    if not _VISIBLE_ASCII.fullmatch(key):
        raise ValueError("Idempotency-Key must be visible ASCII without spaces (it is sent as a header)")
    return key


def _id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


def _optional_id(value: Any, what: str) -> int | None:
    """An id filter or optional id field: None, or a positive integer (never a string sent as is)."""
    return None if value is None else _id(value, what)


# The status filter values of each list as the document writes them (Endpoints): recharges upper-case
# (SUCCESS also matches the legacy DELIVERED / RECHARGED), deliveries lower-case; the order list takes
# either case ("case-insensitive"), so an order status is checked but sent as given.
RECHARGE_STATUSES = ("PROCESSING", "SUCCESS", "FAILED", "REVERSED")
ORDER_STATUSES = ("PENDING", "PROCESSING", "DELIVERED", "PARTIALLY_DELIVERED", "FAILED", "CANCELLED")
DELIVERY_STATUSES = ("pending", "delivered", "failed")


def _status(value: Any, allowed: tuple[str, ...], what: str, *, send: Callable[[str], str]) -> str | None:
    """A status filter: None, or one of `allowed` (compared case-insensitively), as `send` writes it."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else None
    if text is None or text.upper() not in {a.upper() for a in allowed}:
        raise ValueError(f"{what} status must be one of {', '.join(allowed)}, got {value!r}")
    return send(text)


def _day(value: date | str | None, what: str) -> str | None:
    """A YYYY-MM-DD filter; a datetime is sent as its UTC day (naive ones are UTC, as on the wire)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        # The local date of an aware datetime can be a day off the UTC day that contains it,
        # which would start a from_date late or end a to_date early and miss records.
        value = (value.astimezone(timezone.utc) if value.tzinfo else value).date()
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, str) or len(value) != 10:
        raise ValueError(f"{what} must be YYYY-MM-DD, got {value!r}")
    return timeutil.parse_day(value).isoformat()


def _limit(value: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValueError(f"{what} must be 1 to {high} (Limits), got {value!r}")
    return value


def _amount(value: int | Decimal | str) -> int | Decimal | str:
    if isinstance(value, float) or isinstance(value, bool):
        raise TypeError("amounts are int, Decimal or str, never float")
    return value


def _number(value: int | Decimal | str, what: str) -> Decimal:
    """An amount the document types as a JSON number: read exactly (a string too) and sent as a number."""
    return money.to_decimal(_amount(value), field=what, strict=True, typed=True)


def _walk_filters(filters: Mapping[str, Any], what: str) -> None:
    """ValueError for a status filter on a walk over every page (docs/client.md, "Walking lists").

    A record that leaves the status filter during the walk (a PROCESSING recharge settles, a
    PENDING order is delivered) moves every later record up one place, and the next page, read by
    offset, starts one record late: that record is never seen. The other filters (dates, search,
    ids, product, type) select on fields that never change, so a walk under them is complete.
    """
    if filters.get("status") is not None:
        raise ValueError(f"{what} takes no status filter: a record that changes status during the walk shifts "
                         "the pages after it and another record is skipped. Walk by date and test .status on "
                         "each record; list_*(status=...) reads one page, for display.")
