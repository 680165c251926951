"""Stored daily reports: one row per UTC date, the report JSON as generated (latest run wins), and which
nights still need one (the nightly catch-up, `partnerkit status`)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from typing import Any, Iterable

from partnerkit.store.db import Database, transaction


def save_report(db: Database, report: dict[str, Any]) -> None:
    """Keep a day's report, replacing an earlier run; its drift table lives in `drifts`, not here."""
    body = {k: v for k, v in report.items() if k != "drifts"}
    with transaction(db) as conn:
        conn.execute("INSERT INTO reports (date, generated_at, body) VALUES (?, ?, ?)"
                     " ON CONFLICT(date) DO UPDATE SET generated_at = excluded.generated_at, body = excluded.body",
                     (report["date"], report["generated_at"], json.dumps(body)))


def get_report(db: Database, day: str) -> dict[str, Any] | None:
    """The stored report of a date (without its drift table: see reconcile.jobs.current_report), or None."""
    row = db.execute("SELECT body FROM reports WHERE date = ?", (day,)).fetchone()
    return json.loads(row[0]) if row else None


# A report counts for its night only when it was generated after that UTC day ended.
_COMPLETE = "generated_at >= date(date, '+1 day')"
# After downtime the nightly run catches up this many nights at most; older ones need `partnerkit reconcile --date`.
CATCH_UP_NIGHTS = 31


def last_complete_report_date(db: Database) -> str | None:
    """The latest date whose report was generated after that UTC day ended, or None.

    A report of a day still in progress (`partnerkit reconcile --date TODAY`) or of a future day is
    not the nightly report: counting it would leave that day, and every day before it, never
    reported by the nightly job.
    """
    return db.execute(f"SELECT MAX(date) FROM reports WHERE {_COMPLETE}").fetchone()[0]


def report_dates(db: Database, *, after: str = "", through: str = "9999-12-31") -> list[str]:
    """The dates with a stored report in (after, through], oldest first (every one by default)."""
    return [r[0] for r in db.execute("SELECT date FROM reports WHERE date > ? AND date <= ? ORDER BY date",
                                     (after, through)).fetchall()]


def latest_due_night(now: datetime, due_hour: int) -> date:
    """The latest night whose report is due at `now`: yesterday from `due_hour` (UTC) on, else the day before."""
    return now.date() - timedelta(days=1 if now.hour >= due_hour else 2)


def nights_to_report(reported: Iterable[str], first_day: str | None, latest: date,
                     window: int = CATCH_UP_NIGHTS) -> tuple[list[date], list[date]]:
    """(due, beyond): the nights up to `latest` without a complete report, oldest first, from the store's first
    day on. `due` are those of the last `window` nights (the catch-up); `beyond` the older ones, which only
    `partnerkit reconcile --date` reports. With no first day (a new store), `latest` alone is due."""
    done = set(reported)
    start = latest - timedelta(days=window - 1)
    first = min(date.fromisoformat(first_day), latest) if first_day else latest
    nights = [first + timedelta(days=n) for n in range((latest - first).days + 1)]
    missing = [night for night in nights if night.isoformat() not in done]
    return [n for n in missing if n >= start], [n for n in missing if n < start]


def store_first_day(db: Database) -> str | None:
    """The store's first day: the first a sync covered or a report was kept for, whichever is earlier; None
    on a store with neither."""
    return db.execute("SELECT MIN(day) FROM (SELECT MIN(day) AS day FROM sync_coverage"
                      " UNION ALL SELECT MIN(date) FROM reports)").fetchone()[0]


def unreported_nights(db: Database, latest: date) -> tuple[list[date], list[date]]:
    """nights_to_report over the store: its first day is the first day a sync covered or a report was kept
    for, whichever is earlier. A report made by hand for a later night (`partnerkit reconcile --date`)
    never hides the nights before it."""
    first_day = store_first_day(db)
    since = min(first_day, latest.isoformat()) if first_day else latest.isoformat()
    reported = [r[0] for r in db.execute(f"SELECT date FROM reports WHERE date >= ? AND {_COMPLETE}", (since,))]
    return nights_to_report(reported, first_day, latest)


def night_ranges(nights: Iterable[date]) -> list[str]:
    """Nights (in order) as runs: "2026-10-02..2026-10-21", or one day alone."""
    runs: list[list[date]] = []
    for night in nights:
        if runs and night == runs[-1][1] + timedelta(days=1):
            runs[-1][1] = night
        else:
            runs.append([night, night])
    return [a.isoformat() if a == b else f"{a.isoformat()}..{b.isoformat()}" for a, b in runs]
