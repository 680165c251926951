"""The nightly report run's last failure: when, why, and which nights it was reporting (one row of `meta`).

The worker's nightly-report job (reconcile.jobs.nightly_job) records a run that ended in an error and
deletes the record at its next run that ends without one, so a standing record means: the last attempt
failed, and none has succeeded since. `partnerkit status` shows it at once (`nightly_last_error`), not only
once a report is two hours late, and not once every night it named has a complete report saved since the
failure (`partnerkit reconcile --date D` by hand, before the worker's next attempt).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from partnerkit.store import meta
from partnerkit.store.db import Database, transaction
from partnerkit.store.reports import _COMPLETE
from partnerkit.timeutil import iso, parse_ts

KEY = "nightly.last_error"
ERROR_CHARS = 2000  # an exception's text is one line of a log; a longer one is cut


@dataclass(frozen=True)
class NightlyFailure:
    """The nightly run that failed at `at` with `error` ("OSError: [Errno 30] ..."), reporting `dates`
    (YYYY-MM-DD, oldest first; empty when it failed before it knew which were due)."""

    at: datetime
    error: str
    dates: tuple[str, ...]
    # The complete reports those nights had when it failed, by date: their generated_at (a run that failed
    # matching earlier days again had saved its nights' reports already). A report saved since replaces it.
    reported: dict[str, str]


def failed(db: Database, error: str, dates: Sequence[str], now: datetime) -> None:
    """Record a nightly run that ended in `error` now, reporting `dates`, replacing an earlier record."""
    with transaction(db) as conn:
        record = {"at": iso(now), "error": error[:ERROR_CHARS], "dates": list(dates),
                  "reported": _complete_reports(conn, dates)}
        meta.put(conn, KEY, json.dumps(record), now=now)


def succeeded(db: Database) -> None:
    """A nightly run ended without an error: forget the last failure. Run every hour, so it reads first and
    writes only when a record stands."""
    meta.forget(db, KEY, what="the nightly run's last failure")


def last(db: Database) -> NightlyFailure | None:
    """The nightly run's last failure since its last success, or None (none, or a record this version cannot read)."""
    stored = meta.get(db, KEY)
    try:
        record = json.loads(stored) if stored else None
        if not isinstance(record, dict):
            return None
        at = parse_ts(record["at"])
        if at is None:
            return None
        return NightlyFailure(at, str(record["error"]), tuple(str(d) for d in record.get("dates") or ()),
                              {str(d): str(g) for d, g in (record.get("reported") or {}).items()})
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def reported_since(db: Database, failure: NightlyFailure) -> bool:
    """Whether every night the failed run was reporting has a complete report saved since it failed (a
    `partnerkit reconcile --date D` by hand): one it did not have then, or another than it had. False when it
    named none. By what was saved, not by the clock: a report made by hand in the second the run failed counts."""
    if not failure.dates:
        return False
    now = _complete_reports(db, failure.dates)
    return all(day in now and now[day] != failure.reported.get(day) for day in failure.dates)


def _complete_reports(db: Database | sqlite3.Connection, dates: Sequence[str]) -> dict[str, str]:
    """The generated_at of each of `dates` that has a complete report (partnerkit.store.reports)."""
    if not dates:
        return {}
    marks = ",".join("?" * len(dates))
    return {day: made for day, made in db.execute(
        f"SELECT date, generated_at FROM reports WHERE date IN ({marks}) AND {_COMPLETE}", list(dates)).fetchall()}
