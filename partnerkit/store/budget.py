"""The persistent request budget shared by every process using one database and API key.

Limits (the document's Limits table): class "general", 1000 requests per hour per key, shared
by every endpoint (recharges, order reads, catalog, webhooks, and order creation: `ALSO_SPENDS`);
class "order_create", 100 per minute for POST /api/v1/orders, which also spends one of "general".

The window is SLIDING (a log of send times): in any window-long interval we send at most the
limit, which stays inside the provider's limit whether the provider counts fixed or sliding
windows. Every acquisition runs inside BEGIN IMMEDIATE, so two processes can never both take
the last request. The provider's X-RateLimit-* headers can only tighten the local view, and a
429 blocks the class for everybody until Retry-After has passed (without one, until
X-RateLimit-Reset; see `seconds_until_reset`), never longer than one window of the class
(`within_window`: an hour for general, a minute for order_create).

A caller may also cap its own purpose (`acquire(own_cap=N)`: at most N of the window's requests
under its purpose label), checked in the same transaction, so two processes can never both take
the purpose's last one either. The recharge poller's share of the hour is such a cap.

The provider's last 401 to the key is kept too (`refused`, `refusal`), until a call with the key is
answered 2xx (`accepted`): `partnerkit status` and /metrics show it, and the worker pauses its jobs
that call the provider for a minute after it.

What a person needs to judge a block is kept beside it, in the shared `meta` table (one row per key,
class and note): why the class was blocked (the 429's call and Retry-After), and who lifted a block
by hand (`unblock`: `partnerkit budget unblock`, once the provider confirms it is back; the next 429
blocks again). So are the signs of another consumer of the key (`others`): the provider's
X-RateLimit-Remaining persistently lower than this database's own count of requests leaves.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from partnerkit.errors import BudgetExhausted, StorageError
from partnerkit.store import meta
from partnerkit.store.db import Database, open_db, transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import iso

log = logging.getLogger("partnerkit.budget")

GENERAL = "general"
ORDER_CREATE = "order_create"
# Classes a request of a class also spends. The Limits table's first row says the 1000 per hour are
# "shared by all /api/v1 endpoints" in its Value column and apply to "all endpoints without a
# dedicated allowance" in the next: the safe reading counts an order creation in both (README,
# choices). A provider of the other reading is only asked less often than it allows.
ALSO_SPENDS: dict[str, tuple[str, ...]] = {ORDER_CREATE: (GENERAL,)}
# After the provider refused the API key (a 401: a rotated or revoked secret, a host off the key's
# allowlist), what calls it waits this long from the refusal: the worker's jobs and a voucher fetch.
REFUSAL_PAUSE_S = 60.0
DEFAULT_BLOCK_S = 60.0  # a 429 with neither a Retry-After nor a usable X-RateLimit-Reset blocks this long
# Another consumer of the key (`Budget.others`): the provider's remaining below what this database's own count
# leaves by more than `others_tolerance`, on OTHERS_ANSWERS answers in a row over OTHERS_SPAN_S at least.
OTHERS_ANSWERS = 5
OTHERS_SPAN_S = 300.0
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


def _duration(seconds: float) -> str:
    """12.0s, or 58 min once it is minutes (a spent hourly budget says "retry in 60 min", not 3600.0s)."""
    return f"{seconds:.1f}s" if seconds < 120 else f"{round(seconds / 60)} min"


def background_reserve(hourly_budget: int) -> int:
    """Requests of the hour a long background walk leaves to the voucher fetches customers wait on.

    The syncs (recharges, transactions) and the order catch-up over a date range read every page
    of their lists, which on a busy day is more than the hour holds; with no reserve they would
    take all of it and starve the fetches. A tenth: a walk's own pace barely changes.
    """
    return hourly_budget // 10


def poller_cap(hourly_budget: int, share: Decimal) -> int:
    """Requests of the hour the recharge poller may take for itself: its share (PARTNERKIT_POLLER_BUDGET_SHARE)."""
    return math.floor(hourly_budget * share)


def poller_reserve(hourly_budget: int, share: Decimal) -> int:
    """Requests of the hour the long walks leave to the recharge poller, on top of `background_reserve`.

    The poller's share is a cap on what it takes itself (`acquire(own_cap=...)`), not a part of
    the hour kept for it: without this the syncs and the order catch-up would spend everything
    above the voucher fetches' tenth on a busy day, and PROCESSING recharges would not be read at
    all until the hour slid on, late against the document's polling schedule. So the walks leave
    it a tenth of the hour as well (its whole share when that is smaller: never more than it may take).
    """
    return min(poller_cap(hourly_budget, share), hourly_budget // 10)


def walk_reserve(hourly_budget: int, share: Decimal) -> int:
    """Requests of the hour a long background walk (the syncs, an order catch-up over a range) stops
    at: the voucher fetches' tenth (`background_reserve`) and the poller's slice (`poller_reserve`)."""
    return background_reserve(hourly_budget) + poller_reserve(hourly_budget, share)


def _per(window_s: float) -> str:
    return {3600.0: "per hour", 60.0: "per minute"}.get(window_s, f"per {window_s:g} s")


def others_tolerance(limit: int) -> int:
    """Requests by which the provider's count may exceed this database's before another consumer of the key
    is suspected: the provider's own accounting drift (a request counted at a window's edge, a clock a few
    seconds off, answers overtaking one another), a fiftieth of the limit and never under 10."""
    return max(10, limit // 50)


def signs_after(signs: Mapping[str, Any], *, gap: int, tolerance: int, now: float, remaining: int,
                expected: int) -> dict | None:
    """The signs of another consumer of the key after one answer (`Budget.others`); None when nothing changes.

    `gap`: requests the provider counted beyond this database's own (its remaining below `expected`, what
    this database's count leaves). Over `tolerance`, the answer extends a streak (`since`, `answers`);
    OTHERS_ANSWERS of them over OTHERS_SPAN_S at least confirm it (`confirmed_at`, `confirmed_since`,
    `confirmed_gap`). An answer within the tolerance ends the streak and keeps the last confirmation.
    """
    if gap <= tolerance:
        return {**signs, "since": None, "answers": 0} if signs.get("since") is not None else None
    since = now if signs.get("since") is None else signs["since"]
    answers = signs.get("answers", 0) + 1
    confirmed = answers >= OTHERS_ANSWERS and now - since >= OTHERS_SPAN_S
    return {**signs, "since": since, "answers": answers, "gap": gap, "remaining": remaining, "expected": expected,
            "at": now, **({"confirmed_at": now, "confirmed_since": since, "confirmed_gap": gap} if confirmed else {})}


def _moment(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


def _second(epoch: float) -> str:
    """A unix time as ISO 8601 UTC to the second, for a line a person reads."""
    return iso(_moment(int(epoch)))


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


class Budget:
    """The shared request budget of one API key in one database (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        api_key: str,
        *,
        limits: Mapping[str, Limit] | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._db = db
        self._key = key_hash(api_key)
        self._limits = dict(limits or {GENERAL: Limit(1000, 3600.0), ORDER_CREATE: Limit(100, 60.0)})
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_config(cls, config, db: Database | None = None, **kwargs) -> "Budget":
        """The budget for config.api_key; with db=None an in-memory one (this process only)."""
        limits = {GENERAL: Limit(config.hourly_budget, 3600.0), ORDER_CREATE: Limit(config.order_budget_per_minute, 60.0)}
        return cls(db if db is not None else open_db(":memory:"), config.api_key, limits=limits, **kwargs)

    def __repr__(self) -> str:
        return f"Budget(limits={self._limits!r})"

    def _now(self) -> float:
        return self._clock() if self._clock else time.time()

    def limit(self, budget_class: str) -> Limit:
        """The configured limit of a class; ValueError for an unknown class."""
        try:
            return self._limits[budget_class]
        except KeyError:
            raise ValueError(f"unknown budget class {budget_class!r}; known: {sorted(self._limits)}") from None

    def acquire(
        self,
        budget_class: str = GENERAL,
        *,
        purpose: str = "default",
        wait: bool = True,
        max_wait: float = 60.0,
        keep_free: int = 0,
        own_cap: int | None = None,
    ) -> Ticket:
        """Take one request from the class, waiting up to max_wait if `wait`, else BudgetExhausted.

        `keep_free`: send only while more than that many requests of the class remain (for others).
        `own_cap`: send only while this purpose holds fewer than that many of the class's window.
        """
        limit = self.limit(budget_class)
        if keep_free < 0:
            raise ValueError("keep_free must be 0 or more")
        if own_cap is not None and own_cap < 0:
            raise ValueError("own_cap must be 0 or more")
        deadline = self._now() + max_wait
        while True:
            ticket, needed, why = self._try_acquire(budget_class, limit, purpose, keep_free, own_cap)
            if ticket is not None:
                return ticket
            remaining_wait = deadline - self._now()
            if not wait or needed > remaining_wait:
                raise BudgetExhausted(
                    f"request budget {budget_class!r} has no room for {purpose!r}; retry in {_duration(needed)}{why}",
                    retry_after=needed,
                    budget_class=budget_class,
                )
            (self._sleep or time.sleep)(max(needed, 0.01))

    def _try_acquire(self, budget_class: str, limit: Limit, purpose: str, keep_free: int,
                     own_cap: int | None) -> tuple[Ticket | None, float, str]:
        """(the ticket, 0.0, "") or (None, seconds to wait, why: a suffix for the refusal's message).

        The request must fit its class and every class it also spends (`ALSO_SPENDS`), checked and
        taken in this one transaction: two processes can never both take the last one of either."""
        with transaction(self._db) as conn:
            now = self._now()
            waits = []
            for spent in (budget_class, *ALSO_SPENDS.get(budget_class, ())):
                # The caller's reserve and cap are of the class it asked for; the other needs room.
                needed, why = (self._room(conn, spent, limit, now, purpose, keep_free, own_cap) if spent == budget_class
                               else self._room(conn, spent, self.limit(spent), now, purpose, 0, None))
                if needed > 0:
                    also = "" if spent == budget_class else f" (it also spends one of {spent!r}, which has no room)"
                    waits.append((needed, also + why))
            if waits:
                needed, why = max(waits)
                return None, needed, why
            ticket_id = None
            for spent in (budget_class, *ALSO_SPENDS.get(budget_class, ())):
                cursor = conn.execute(
                    "INSERT INTO budget_events (key_hash, class, purpose, at) VALUES (?, ?, ?, ?)",
                    (self._key, spent, purpose, now),
                )
                ticket_id = cursor.lastrowid if ticket_id is None else ticket_id
            return Ticket(ticket_id, budget_class, now), 0.0, ""

    def _room(self, conn, budget_class: str, limit: Limit, now: float, purpose: str, keep_free: int,
              own_cap: int | None) -> tuple[float, str]:
        """(seconds until one more request of the class fits, why) inside the caller's transaction."""
        conn.execute(
            "DELETE FROM budget_events WHERE key_hash = ? AND class = ? AND at <= ?",
            (self._key, budget_class, now - limit.window_s),
        )
        rows = conn.execute(
            "SELECT at, purpose FROM budget_events WHERE key_hash = ? AND class = ? AND at > ? ORDER BY at",
            (self._key, budget_class, now - limit.window_s),
        ).fetchall()
        sent = [at for at, _ in rows]
        own_sent = [at for at, label in rows if label == purpose] if own_cap is not None else []
        provider = self._provider_view(conn, budget_class)
        needed = wait_needed(now=now, limit=limit, sent=sent, provider=provider, keep_free=keep_free,
                             own_sent=own_sent, own_cap=own_cap)
        why = ""
        if needed > 0:
            if own_cap is not None and len(own_sent) >= own_cap:
                why += f" ({purpose!r} has taken its own cap of {own_cap} requests {_per(limit.window_s)})"
            if provider.blocked_until is not None and now < provider.blocked_until:
                why += (" (the provider answered 429: nothing is sent until its Retry-After or"
                        " X-RateLimit-Reset has passed)")
        return needed, why

    def _provider_view(self, conn, budget_class: str) -> ProviderView:
        row = conn.execute(
            "SELECT provider_limit, provider_remaining, provider_after_id, provider_until, blocked_until"
            " FROM budget_state WHERE key_hash = ? AND class = ?",
            (self._key, budget_class),
        ).fetchone()
        if row is None:
            return ProviderView()
        provider_limit, remaining, after_id, until, blocked_until = row
        if remaining is not None:
            # Requests sent after the one whose response reported `remaining` are spent too
            # (some may already be counted by the provider: subtracting them is conservative).
            (later,) = conn.execute(
                "SELECT COUNT(*) FROM budget_events WHERE key_hash = ? AND class = ? AND id > ?",
                (self._key, budget_class, after_id or 0),
            ).fetchone()
            remaining -= later
        return ProviderView(provider_limit, remaining, until, blocked_until)

    def observe(self, ticket: Ticket, *, limit: int | None = None, remaining: int | None = None, reset: float | None = None) -> None:
        """Record X-RateLimit-Limit/Remaining/Reset seen on the response to `ticket`'s request."""
        if limit is None and remaining is None:
            return
        now = self._now()
        window = self.limit(ticket.budget_class).window_s
        wait = seconds_until_reset(reset, now=now, window_s=window)
        until = now + (window if wait is None else wait)  # no reset given: trust the figure for a whole window
        with transaction(self._db) as conn:
            conn.execute(
                "INSERT INTO budget_state (key_hash, class, provider_limit, provider_remaining, provider_after_id,"
                " provider_until, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (key_hash, class) DO UPDATE SET"
                "  provider_limit = COALESCE(excluded.provider_limit, provider_limit),"
                "  provider_remaining = excluded.provider_remaining,"
                "  provider_after_id = excluded.provider_after_id,"
                "  provider_until = excluded.provider_until,"
                "  updated_at = excluded.updated_at"
                # An older request's answer (overtaken by a newer one) must not overwrite a newer figure.
                " WHERE provider_after_id IS NULL OR excluded.provider_after_id >= provider_after_id",
                (self._key, ticket.budget_class, limit, remaining, ticket.id, until, now),
            )
            if remaining is not None:
                self._compare(conn, ticket.budget_class, remaining, now)

    def _compare(self, conn, budget_class: str, remaining: int, now: float) -> None:
        """Hold the provider's remaining against what this database's own count leaves (`others`).

        Every request this database reserved so far counts as sent, those reserved after the answered one
        too: a request of ours the provider has not counted yet only makes the gap smaller, never a false
        sign. A cap below the provider's limit (PARTNERKIT_HOURLY_BUDGET set lower) leaves the difference
        to others on purpose, and only more than that shows. Written only when the signs change."""
        limit = self.limit(budget_class)
        (provider_limit,) = conn.execute("SELECT provider_limit FROM budget_state WHERE key_hash = ? AND class = ?",
                                         (self._key, budget_class)).fetchone()
        cap = limit.limit if provider_limit is None else min(limit.limit, provider_limit)
        (own,) = conn.execute("SELECT COUNT(*) FROM budget_events WHERE key_hash = ? AND class = ? AND at > ?",
                              (self._key, budget_class, now - limit.window_s)).fetchone()
        signs = self._note(conn, budget_class, "others") or {}
        after = signs_after(signs, gap=(cap - own) - remaining, tolerance=others_tolerance(cap), now=now,
                            remaining=remaining, expected=cap - own)
        if after is not None:
            self._put_note(conn, budget_class, "others", after, now)

    def until_reset(self, budget_class: str, reset: float | None) -> float | None:
        """Seconds from now until X-RateLimit-Reset, at most one window of the class; None if unusable."""
        return seconds_until_reset(reset, now=self._now(), window_s=self.limit(budget_class).window_s)

    def block_seconds(self, budget_class: str, retry_after: float | None) -> float:
        """How long a 429 with this Retry-After (seconds, or None) blocks the class: at most one window."""
        return block_seconds(retry_after, window_s=self.limit(budget_class).window_s)

    def block(self, budget_class: str, retry_after: float | None, *, why: str | None = None) -> float:
        """A 429: no process sends in this class for `block_seconds` from now; returns the moment.

        Only this class: a block of `order_create` (its minute) leaves the general reads alone, while
        a block of `general` also holds order creation, which spends one of it (`ALSO_SPENDS`).
        `why` (the call that met the 429) is kept for `describe` while this block is the longest."""
        now = self._now()
        until = now + self.block_seconds(budget_class, retry_after)
        with transaction(self._db) as conn:
            row = conn.execute("SELECT blocked_until FROM budget_state WHERE key_hash = ? AND class = ?",
                               (self._key, budget_class)).fetchone()
            conn.execute(
                "INSERT INTO budget_state (key_hash, class, blocked_until, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (key_hash, class) DO UPDATE SET"
                "  blocked_until = MAX(COALESCE(blocked_until, 0), excluded.blocked_until),"
                "  updated_at = excluded.updated_at",
                (self._key, budget_class, until, now),
            )
            if row is None or row[0] is None or until >= row[0]:
                self._put_note(conn, budget_class, "block", {"at": now, "until": until, "why": why}, now)
        return until

    def unblock(self, budget_class: str | None = None, *, by: str, note: str | None = None) -> list[dict]:
        """Lift the 429 block of a class (every class when None) now, for every process; who and when are kept.

        For a person who knows the provider is back (its status page, its support): the block is the
        provider's Retry-After, at most an hour, and a provider in trouble may send a long one once. Safe,
        since the next 429 blocks again. Returns what was lifted: class, blocked_until (as it was), why, by,
        at (UTC datetimes), note; nothing for a class that was not blocked."""
        classes = [budget_class] if budget_class is not None else list(self._limits)
        for name in classes:
            self.limit(name)  # ValueError for an unknown class
        lifted = []
        with transaction(self._db) as conn:
            now = self._now()
            for name in classes:
                row = conn.execute("SELECT blocked_until FROM budget_state WHERE key_hash = ? AND class = ?",
                                   (self._key, name)).fetchone()
                if row is None or row[0] is None or row[0] <= now:
                    continue
                conn.execute("UPDATE budget_state SET blocked_until = NULL, updated_at = ? WHERE key_hash = ? AND class = ?",
                             (now, self._key, name))
                why = (self._note(conn, name, "block") or {}).get("why")
                self._put_note(conn, name, "unblocked", {"blocked_until": row[0], "why": why, "by": by, "at": now,
                                                         "note": note}, now)
                lifted.append({"class": name, "blocked_until": _moment(row[0]), "why": why, "by": by,
                               "at": _moment(now), "note": note})
        for record in lifted:
            log.info("request budget block lifted by hand", extra={
                "budget_class": record["class"], "by": by, "blocked_until": stamp(record["blocked_until"]),
                "block_reason": record["why"], "note": note})
        return lifted

    def others(self, budget_class: str = GENERAL) -> dict | None:
        """Signs that another process uses this API key, confirmed within the last window of the class; else None.

        The provider's X-RateLimit-Remaining stood lower than this database's own count of requests leaves
        by more than `others_tolerance`, on OTHERS_ANSWERS answers in a row over OTHERS_SPAN_S: a second
        partnerkit on a copy of this database, another system with the key, or the requests of a database
        this one was restored over. Kept for a window after the last confirmation: a provider counting
        fixed windows hides the gap for part of each. Returns gap (requests the provider counted beyond
        this database's), remaining, expected (what this database's count leaves), since, seen_at."""
        now = self._now()
        signs = self._note(self._db, budget_class, "others") or {}
        seen = signs.get("confirmed_at")
        if seen is None or now - seen > self.limit(budget_class).window_s:
            return None
        latest = signs.get("since") is not None  # the streak still running: its latest figures
        return {"gap": signs["gap"] if latest else signs["confirmed_gap"],
                "remaining": signs.get("remaining"), "expected": signs.get("expected"),
                "since": _moment(signs.get("confirmed_since")), "seen_at": _moment(seen)}

    def describe(self) -> list[dict]:
        """What the budget knows, one row per class (`partnerkit budget show`): the limit it keeps to (and the
        configured and provider's), the window, requests this database made in it and by purpose, what is
        left, the provider's last X-RateLimit-Remaining and when its request was sent, any 429 block and why,
        the last block lifted by hand, and another consumer's signs (`others`)."""
        usage = self.usage()
        rows = []
        for budget_class, limit in self._limits.items():
            state = self._db.execute(
                "SELECT provider_limit, provider_remaining, provider_after_id FROM budget_state"
                " WHERE key_hash = ? AND class = ?", (self._key, budget_class)).fetchone() or (None, None, None)
            provider_limit, provider_remaining, after_id = state
            sent = (self._db.execute("SELECT at FROM budget_events WHERE id = ?", (after_id,)).fetchone()
                    if after_id and provider_remaining is not None else None)
            used = usage[budget_class]
            blocked = used["blocked_until"]
            why = (self._note(self._db, budget_class, "block") or {}).get("why") if blocked else None
            lifted = self._note(self._db, budget_class, "unblocked")
            others = self.others(budget_class)
            rows.append({
                "class": budget_class, "limit": used["limit"], "configured_limit": limit.limit,
                "provider_limit": provider_limit, "window_s": int(limit.window_s), "used": used["used"],
                "remaining": used["remaining"], "provider_remaining": provider_remaining,
                "provider_remaining_sent_at": _moment(sent[0]) if sent else None,
                "blocked_until": _moment(blocked), "blocked_because": why,
                "last_unblocked": None if lifted is None else (
                    f"by {lifted['by']} at {_second(lifted['at'])} (blocked until {_second(lifted['blocked_until'])})"
                    + (f": {lifted['note']}" if lifted.get("note") else "")),
                "requests_elsewhere": None if others is None else others["gap"],
                "used_by_purpose": used["by_purpose"],
            })
        return rows

    def _note_name(self, budget_class: str, what: str) -> str:
        return f"budget.{self._key[:16]}.{budget_class}.{what}"

    def _note(self, conn, budget_class: str, what: str) -> dict | None:
        """One of the budget's notes in `meta` (see the module docstring), or None."""
        value = meta.get(conn, self._note_name(budget_class, what))
        return None if value is None else json.loads(value)

    def _put_note(self, conn, budget_class: str, what: str, value: dict[str, Any], now: float) -> None:
        meta.put(conn, self._note_name(budget_class, what), json.dumps(value), now=_moment(now))

    def refused(self, *, status: int, message: str | None, method: str, path: str, purpose: str) -> None:
        """The provider refused this key's credentials (HTTP 401): kept until a call is accepted again."""
        with transaction(self._db) as conn:
            conn.execute(
                "INSERT INTO provider_refusals (key_hash, status, message, method, path, purpose, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key_hash) DO UPDATE SET status = excluded.status,"
                " message = excluded.message, method = excluded.method, path = excluded.path,"
                " purpose = excluded.purpose, at = excluded.at",
                (self._key, status, (message or "")[:200], method, path, purpose, self._now()))

    def accepted(self) -> None:
        """A call with this key was answered 2xx: forget an earlier refusal (by any process).

        Called after every answered call, so it reads first: a write only when there is one to forget.
        (Threads sharing the database handle take turns in `transaction()`, which holds the handle's lock.)"""
        try:
            standing = self._db.execute("SELECT 1 FROM provider_refusals WHERE key_hash = ?", (self._key,)).fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read the provider's refusals: {exc}") from exc
        if standing:
            with transaction(self._db) as conn:
                conn.execute("DELETE FROM provider_refusals WHERE key_hash = ?", (self._key,))

    def refusal(self) -> dict | None:
        """The provider's latest refusal of this key still standing (status, message, method, path,
        purpose, at), or None."""
        row = self._db.execute("SELECT status, message, method, path, purpose, at FROM provider_refusals"
                               " WHERE key_hash = ?", (self._key,)).fetchone()
        return None if row is None else dict(zip(("status", "message", "method", "path", "purpose", "at"), row))

    def usage(self) -> dict[str, dict]:
        """Per class: limit, used, remaining (after provider tightening), blocked_until, used by purpose."""
        report: dict[str, dict] = {}
        now = self._now()
        with transaction(self._db) as conn:
            for budget_class, limit in self._limits.items():
                rows = conn.execute(
                    "SELECT purpose, COUNT(*) FROM budget_events WHERE key_hash = ? AND class = ? AND at > ?"
                    " GROUP BY purpose ORDER BY purpose",
                    (self._key, budget_class, now - limit.window_s),
                ).fetchall()
                by_purpose = {purpose: count for purpose, count in rows}
                used = sum(by_purpose.values())
                provider = self._provider_view(conn, budget_class)
                cap = limit.limit if provider.limit is None else min(limit.limit, provider.limit)
                remaining = cap - used
                if provider.remaining is not None and provider.until is not None and now < provider.until:
                    remaining = min(remaining, provider.remaining)
                blocked = provider.blocked_until if provider.blocked_until and provider.blocked_until > now else None
                report[budget_class] = {
                    "limit": cap,
                    "window_s": limit.window_s,
                    "used": used,
                    "remaining": max(0, remaining),
                    "blocked_until": blocked,
                    "by_purpose": by_purpose,
                }
        return report
