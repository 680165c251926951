"""The `Budget` class: one API key's request budget in one database (see the package docstring).

Requests are taken (`acquire`) and the provider's answers recorded (`observe`, `block`) here; the
notes a person reads (`_notes`), the signs of another consumer (`_others`) and the provider's
refusals (`_refusals`) are kept by their own modules, which these methods call.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from partnerkit.errors import BudgetExhausted
from partnerkit.store.budget import _notes, _others, _refusals
from partnerkit.store.budget._window import (ALSO_SPENDS, GENERAL, ORDER_CREATE, Limit, ProviderView, Ticket, duration,
                                             _per, block_seconds, key_hash, seconds_until_reset, wait_needed)
from partnerkit.store.db import Database, open_db, transaction
from partnerkit.store.jobs import stamp
from partnerkit.timeutil import CLOCK_STEP_MARGIN_S

log = logging.getLogger("partnerkit.budget")


class Budget:
    """The shared request budget of one API key in one database (see the package docstring)."""

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
                    f"request budget {budget_class!r} has no room for {purpose!r}; retry in {duration(needed)}{why}",
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
        self._put_clock_step_right(conn, budget_class, limit, now)
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

    def _put_clock_step_right(self, conn, budget_class: str, limit: Limit, now: float) -> None:
        """Requests logged, and a 429's block or the provider's figures dated, while this host's clock ran ahead,
        since stepped back (NTP): dated further ahead than CLOCK_STEP_MARGIN_S (a block, a window and that), they
        would hold the class for as long as the clock was off, a day for a clock a day fast, where a 429 holds it
        an hour at most. Such requests count as sent now, for one window; such a block ends a window from now.
        Both are ranges of an index past `now`: empty, and cheap, on every call but the first after a step."""
        latest = now + CLOCK_STEP_MARGIN_S
        conn.execute("UPDATE budget_events SET at = ? WHERE key_hash = ? AND class = ? AND at > ?",
                     (now, self._key, budget_class, latest))
        conn.execute("UPDATE budget_state SET blocked_until = MIN(blocked_until, :end), provider_until = "
                     "MIN(provider_until, :end) WHERE key_hash = :key AND class = :class AND "
                     "(blocked_until > :end + :margin OR provider_until > :end + :margin)",
                     {"end": now + limit.window_s, "margin": CLOCK_STEP_MARGIN_S, "key": self._key,
                      "class": budget_class})

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
        """Hold the provider's remaining against what this database's own count leaves (`others`)."""
        _others.compare(conn, self._key, budget_class, self.limit(budget_class), remaining, now)

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
                _notes.put(conn, self._key, budget_class, "block", {"at": now, "until": until, "why": why}, now)
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
                why = (_notes.get(conn, self._key, name, "block") or {}).get("why")
                _notes.put(conn, self._key, name, "unblocked", {"blocked_until": row[0], "why": why, "by": by,
                                                                "at": now, "note": note}, now)
                lifted.append({"class": name, "blocked_until": _notes.moment(row[0]), "why": why, "by": by,
                               "at": _notes.moment(now), "note": note})
        for record in lifted:
            log.info("request budget block lifted by hand", extra={
                "budget_class": record["class"], "by": by, "blocked_until": stamp(record["blocked_until"]),
                "block_reason": record["why"], "note": note})
        return lifted

    def others(self, budget_class: str = GENERAL) -> dict | None:
        """Signs that another process uses this API key, confirmed within the last window of the class; else None
        (`_others.standing`: gap, remaining, expected, since, seen_at)."""
        return _others.standing(self._db, self._key, budget_class, window_s=self.limit(budget_class).window_s,
                                now=self._now())

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
            why = (_notes.get(self._db, self._key, budget_class, "block") or {}).get("why") if blocked else None
            others = self.others(budget_class)
            rows.append({
                "class": budget_class, "limit": used["limit"], "configured_limit": limit.limit,
                "provider_limit": provider_limit, "window_s": int(limit.window_s), "used": used["used"],
                "remaining": used["remaining"], "provider_remaining": provider_remaining,
                "provider_remaining_sent_at": _notes.moment(sent[0]) if sent else None,
                "blocked_until": _notes.moment(blocked), "blocked_because": why,
                "last_unblocked": _notes.unblocked_line(_notes.get(self._db, self._key, budget_class, "unblocked")),
                "requests_elsewhere": None if others is None else others["gap"],
                "used_by_purpose": used["by_purpose"],
            })
        return rows

    def refused(self, *, status: int, message: str | None, method: str, path: str, purpose: str) -> None:
        """The provider refused this key's credentials (HTTP 401): kept until a call is accepted again."""
        _refusals.record(self._db, self._key, status=status, message=message, method=method, path=path,
                         purpose=purpose, at=self._now())

    def accepted(self, *, signed: bool = True) -> None:
        """A call with this key was answered 2xx: forget an earlier refusal (by any process); a write only
        when there is one to forget. A read (`signed` False) leaves one that blames the request's timestamp
        (`_refusals.forget`): it carried none."""
        _refusals.forget(self._db, self._key, signed=signed, now=self._now())

    def refusal(self) -> dict | None:
        """The provider's latest refusal of this key still standing (status, message, method, path,
        purpose, at), or None."""
        return _refusals.standing(self._db, self._key)

    def usage(self) -> dict[str, dict]:
        """Per class: limit, used, remaining (after provider tightening), blocked_until, used by purpose.

        A read transaction (one snapshot of every class), never the write lock: `budget show` and `status`
        answer at once while another process writes for seconds (a big day's match, a backup)."""
        report: dict[str, dict] = {}
        now = self._now()
        with transaction(self._db, immediate=False) as conn:
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
