"""Signs of another consumer of the API key: the provider's X-RateLimit-Remaining against this
database's own count of requests (`Budget.others`, `partnerkit status`'s requests_elsewhere_this_hour).

Each answer carrying X-RateLimit-Remaining is compared (`compare`, inside `Budget.observe`'s transaction)
with what this database's count of the window leaves. A gap beyond the provider's own accounting drift
(`others_tolerance`) on OTHERS_ANSWERS answers in a row over OTHERS_SPAN_S confirms another consumer: a
second partnerkit on a copy of this database (two hosts), another system with the key, or the requests of
a database this one was restored over. The streak and its last confirmation are the class's `others`
note (`_notes`).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Mapping

from partnerkit.store.budget import _notes
from partnerkit.store.budget._window import Limit
from partnerkit.store.db import Database

# Another consumer of the key (`Budget.others`): the provider's remaining below what this database's own count
# leaves by more than `others_tolerance`, on OTHERS_ANSWERS answers in a row over OTHERS_SPAN_S at least.
OTHERS_ANSWERS = 5
OTHERS_SPAN_S = 300.0


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



def compare(conn: sqlite3.Connection, key: str, budget_class: str, limit: Limit, remaining: int, now: float) -> None:
    """Hold the provider's remaining against what this database's own count leaves (`standing`).

    Every request this database reserved so far counts as sent, those reserved after the answered one
    too: a request of ours the provider has not counted yet only makes the gap smaller, never a false
    sign. A cap below the provider's limit (PARTNERKIT_HOURLY_BUDGET set lower) leaves the difference
    to others on purpose, and only more than that shows. Written only when the signs change."""
    (provider_limit,) = conn.execute("SELECT provider_limit FROM budget_state WHERE key_hash = ? AND class = ?",
                                     (key, budget_class)).fetchone()
    cap = limit.limit if provider_limit is None else min(limit.limit, provider_limit)
    (own,) = conn.execute("SELECT COUNT(*) FROM budget_events WHERE key_hash = ? AND class = ? AND at > ?",
                          (key, budget_class, now - limit.window_s)).fetchone()
    signs = _notes.get(conn, key, budget_class, "others") or {}
    after = signs_after(signs, gap=(cap - own) - remaining, tolerance=others_tolerance(cap), now=now,
                        remaining=remaining, expected=cap - own)
    if after is not None:
        _notes.put(conn, key, budget_class, "others", after, now)


def standing(db: Database, key: str, budget_class: str, *, window_s: float, now: float) -> dict | None:
    """Signs that another process uses this API key, confirmed within the last window of the class; else None.

    The provider's X-RateLimit-Remaining stood lower than this database's own count of requests leaves
    by more than `others_tolerance`, on OTHERS_ANSWERS answers in a row over OTHERS_SPAN_S: a second
    partnerkit on a copy of this database, another system with the key, or the requests of a database
    this one was restored over. Kept for a window after the last confirmation: a provider counting
    fixed windows hides the gap for part of each. Returns gap (requests the provider counted beyond
    this database's), remaining, expected (what this database's count leaves), since, seen_at."""
    signs = _notes.get(db, key, budget_class, "others") or {}
    seen = signs.get("confirmed_at")
    if seen is None or now - seen > window_s:
        return None
    latest = signs.get("since") is not None  # the streak still running: its latest figures
    return {"gap": signs["gap"] if latest else signs["confirmed_gap"],
            "remaining": signs.get("remaining"), "expected": signs.get("expected"),
            "since": _notes.moment(signs.get("confirmed_since")), "seen_at": _notes.moment(seen)}
