"""The window's rules, pure functions of their inputs: the classes and their limits, a ticket, the
provider's view of a class, how long a 429 blocks, and how long until one more request fits."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Sequence

GENERAL = "general"
ORDER_CREATE = "order_create"
# Classes a request of a class also spends. The Limits table's first row says the 1000 per hour are
# "shared by all /api/v1 endpoints" in its Value column and apply to "all endpoints without a
# dedicated allowance" in the next: the safe reading counts an order creation in both (README,
# choices). A provider of the other reading is only asked less often than it allows.
ALSO_SPENDS: dict[str, tuple[str, ...]] = {ORDER_CREATE: (GENERAL,)}
DEFAULT_BLOCK_S = 60.0  # a 429 with neither a Retry-After nor a usable X-RateLimit-Reset blocks this long
_EPOCH_THRESHOLD = 1_000_000_000  # an X-RateLimit-Reset above this is a unix time, else seconds


@dataclass(frozen=True)
class Limit:
    """At most `limit` requests in any `window_s` seconds."""

    limit: int
    window_s: float


@dataclass(frozen=True)
class Ticket:
    """One request's claim on the budget; pass it back to `observe()` with the response headers."""

    id: int
    budget_class: str
    at: float


@dataclass(frozen=True)
class ProviderView:
    """What the provider last said about a class: remaining until a moment, and any 429 block."""

    limit: int | None = None
    remaining: int | None = None
    until: float | None = None
    blocked_until: float | None = None


def duration(seconds: float) -> str:
    """12.0s, or 58 min once it is minutes (a spent hourly budget says "retry in 60 min", not 3600.0s); the one
    wording of a wait, for the budget's refusal and a command's 429 alike."""
    return f"{seconds:.1f}s" if seconds < 120 else f"{round(seconds / 60)} min"


def after_429(nothing: str, retry_after: float | None) -> str:
    """What the provider's 429 to a write means, for the end of its message: `nothing` was made (a 429 is a definite
    refusal: `errors.is_ambiguous`), and when to send again: the 429's block of the budget class (`block_seconds`: the
    client sets the error's `retry_after` to it), in the words the next attempt's refusal uses ("retry in 7 min")."""
    when = f"retry in {duration(retry_after)}" if retry_after is not None else "retry once the block lifts"
    return (f"{nothing} (a 429 is the provider's refusal, given before it reads the request); {when}: until then "
            "partnerkit sends no such request (`partnerkit budget show` names the block)")


def _per(window_s: float) -> str:
    return {3600.0: "per hour", 60.0: "per minute"}.get(window_s, f"per {window_s:g} s")


def key_hash(api_key: str) -> str:
    """The budget rows' key: SHA-256 hex of the API key (the key itself is never stored)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def within_window(seconds: float, *, window_s: float) -> float:
    """A wait the provider asked for, from 0 to one window of its class: the one rule for
    X-RateLimit-Reset and Retry-After alike.

    Never negative: a moment already past (a clock a little off ours) means the window has reopened.
    Never more than one window: the document's limits are per hour (general) and per minute (order
    creation), so the class reopens within one; a longer wait is a unit misread (milliseconds), a
    clock far off, or a provider asking for more than its own limits say, and believing it would
    stop every process sharing the key for a day (a `Retry-After: 86400` did).
    """
    return min(max(0.0, seconds), window_s)


def seconds_until_reset(reset: float | None, *, now: float, window_s: float) -> float | None:
    """Seconds from `now` until an X-RateLimit-Reset value, from 0 to `window_s`; None if absent or not a number.

    The document lists the header without its unit (README, choices): above 10^9 it is a unix
    time, anything else seconds from now.
    """
    if reset is None or not math.isfinite(reset):
        return None
    return within_window(reset - now if reset > _EPOCH_THRESHOLD else reset, window_s=window_s)


def block_seconds(retry_after: float | None, *, window_s: float) -> float:
    """How long a 429 blocks its class: its Retry-After (already in seconds) within one window
    (`within_window`), or DEFAULT_BLOCK_S without one (at most one window too)."""
    if retry_after is None or not math.isfinite(retry_after):
        return within_window(DEFAULT_BLOCK_S, window_s=window_s)
    return within_window(retry_after, window_s=window_s)


def wait_needed(
    *,
    now: float,
    limit: Limit,
    sent: Sequence[float],
    provider: ProviderView,
    keep_free: int = 0,
    own_sent: Sequence[float] = (),
    own_cap: int | None = None,
) -> float:
    """Seconds until one more request fits (0.0: send now); `sent` are in-window send times, oldest first.

    `own_sent` are the in-window send times of the caller's own purpose (oldest first, also in
    `sent`); with `own_cap` the purpose holds fewer than `own_cap` of the window before it sends.
    """
    waits = [0.0]
    if provider.blocked_until is not None and now < provider.blocked_until:
        waits.append(provider.blocked_until - now)
    cap = limit.limit if provider.limit is None else min(limit.limit, provider.limit)
    local_remaining = cap - len(sent)
    if local_remaining <= keep_free:
        # The (k)th oldest send must leave the window for remaining to exceed keep_free.
        k = keep_free - local_remaining  # 0-based index into sent
        waits.append(sent[k] + limit.window_s - now if k < len(sent) else limit.window_s)
    if provider.remaining is not None and provider.until is not None and now < provider.until:
        if provider.remaining <= keep_free:
            waits.append(provider.until - now)
    if own_cap is not None and len(own_sent) >= own_cap:
        # The purpose's (n - cap)th oldest send must leave the window for it to hold fewer than its cap.
        k = len(own_sent) - own_cap  # 0-based index into own_sent
        waits.append(own_sent[k] + limit.window_s - now if k < len(own_sent) else limit.window_s)
    return max(0.0, max(waits))
