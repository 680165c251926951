"""The provider failing every call: since when, how often and how (written by the client's transport).

During an outage at the provider every job only logs its error, and the on-call question is "is it
us or them?". The transport (partnerkit.client._http) records each call the provider failed (a 5xx,
a timeout, no connection, an unreadable answer) into one row of the meta table, counted by kind, and
the next call it answers at all (any status under 500 in the provider's own shape: a 4xx is an answer
too, but not a redirect or a 4xx in none of its error shapes, `errors.not_the_providers`) deletes the row. So a
standing row means: every call since `since` failed, from whichever process made it (the worker's jobs,
a command). `partnerkit status` and /metrics judge it (partnerkit.status: how long and how many before
a person is told). A 401 or a 429 is an answer here: the budget keeps those (`refused`, `block`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from partnerkit.store import meta
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso, parse_ts, utcnow

KEY = "provider.failing"


@dataclass(frozen=True)
class Failing:
    """Every call since `since` failed: `calls` of them, by kind ("HTTP 500": 12, "timeout": 3), the
    last one (`last_call`: "GET /api/v1/recharges (poller)") at `last_at`."""

    since: datetime
    last_at: datetime
    calls: int
    kinds: dict[str, int]
    last_call: str

    def kinds_text(self) -> str:
        """"HTTP 500 x12, timeout x3": the kinds, most first."""
        return ", ".join(f"{kind} x{count}" for kind, count in sorted(self.kinds.items(), key=lambda kv: -kv[1]))


def failed(db: Database, *, kind: str, method: str, path: str, purpose: str, now: datetime | None = None) -> None:
    """One call the provider failed (`kind`: "HTTP 503", "timeout", "no connection", ...): counted into the
    standing record, which begins now if none stands."""
    now = now or utcnow()
    with transaction(db) as conn:
        stored = meta.get(conn, KEY)
        record = _load(stored) if stored else None
        if record is None:
            record = {"since": iso(now), "calls": 0, "kinds": {}}
        record["calls"] += 1
        record["kinds"][kind] = record["kinds"].get(kind, 0) + 1
        record["last_at"] = iso(now)
        record["last_call"] = f"{method} {path} ({purpose})"
        meta.put(conn, KEY, json.dumps(record), now=now)


def answered(db: Database) -> None:
    """The provider answered a call: forget the failures before it. Called after every answer, so it reads
    first: a write only when a record stands."""
    meta.forget(db, KEY, what="the provider's failures")


def standing(db: Database) -> Failing | None:
    """The failures since the provider last answered, or None (it answered the latest call, or none failed)."""
    stored = meta.get(db, KEY)
    record = _load(stored) if stored else None
    if record is None:
        return None
    return Failing(parse_ts(record["since"]), parse_ts(record["last_at"]), record["calls"], record["kinds"],
                   record["last_call"])


def _load(value: str) -> dict | None:
    """The stored record, or None for one this version cannot read (it is then started again)."""
    try:
        record = json.loads(value)
        if (not isinstance(record, dict) or not isinstance(record.get("kinds"), dict)
                or parse_ts(record["since"]) is None or parse_ts(record["last_at"]) is None):
            return None
        record["calls"] = int(record["calls"])
        record["kinds"] = {str(kind): int(count) for kind, count in record["kinds"].items()}
        record["last_call"] = str(record["last_call"])
        return record
    except (ValueError, KeyError, TypeError):
        return None
