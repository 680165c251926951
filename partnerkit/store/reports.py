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


# The first day each sync entity covered, one probe of sync_coverage's key an entity (a loose index scan: MIN(day)
# over the whole table read every row of it, its key being (entity, day)), and the first report's date.
_FIRST_COVERED = """
    WITH RECURSIVE entities(entity) AS (
        SELECT MIN(entity) FROM sync_coverage
        UNION ALL SELECT (SELECT MIN(entity) FROM sync_coverage WHERE entity > e.entity) FROM entities e
        WHERE e.entity IS NOT NULL)
    SELECT MIN(day) FROM (
        SELECT (SELECT MIN(day) FROM sync_coverage c WHERE c.entity = e.entity) AS day FROM entities e
        WHERE e.entity IS NOT NULL
        UNION ALL SELECT MIN(date) FROM reports)"""


def store_first_day(db: Database) -> str | None:
    """The first day a sync covered or a report was kept for, whichever is earlier; None on a store with neither.

    `partnerkit status` asks it before the first complete report (is the first night late?). Where the nightly
    catch-up starts is `first_night`, never earlier than this day: an empty day covered or reported (a mistyped
    `reconcile --date 1999-01-01`) moves this one back, not that one."""
    return db.execute(_FIRST_COVERED).fetchone()[0]


# The creation day of the store's first recharge (the provider's, else when partnerkit submitted it: the matcher
# reads a day's recharges by either), wallet transaction and dated order: one probe of an index each
# (recharges_provider_created, recharges_newest, transactions_created, orders_placed_at).
_FIRST_RECORDS = ("SELECT (SELECT MIN(provider_created_at) FROM recharges),"
                  " (SELECT MIN(COALESCE(submitted_at, provider_created_at)) FROM recharges),"
                  " (SELECT MIN(created_at) FROM transactions),"
                  " (SELECT MIN(placed_at) FROM orders WHERE placed_at IS NOT NULL)")
# A stored report that found something: records of the day (quarantined ones too) or drifts. A report kept from
# before a summary field existed reads NULL for it, which counts as nothing.
_FOUND_SOMETHING = " OR ".join(f"json_extract(body, '$.summary.{field}') > 0" for field in (
    "recharges_total", "orders_total", "transactions_total", "quarantined", "drifted")) + \
    " OR json_extract(body, '$.summary.drifts_by_kind') NOT IN ('{}', '[]')"


def _a_day(stamp: str | None) -> bool:
    """Whether a stored time begins with a YYYY-MM-DD day (one that does not is no first day)."""
    if stamp is None:
        return False
    try:
        date.fromisoformat(stamp[:10])
    except (ValueError, TypeError):
        return False
    return True


def first_activity_day(db: Database) -> str | None:
    """The first day that holds the account's activity: the creation day of the store's first recharge, wallet
    transaction or order, or an earlier report that found records or drifts; None on a store with none.

    Cheap whatever the history: one probe of an index a term, then the reports before that day along their
    key, stopping at the first that found something (before the first record, there are only empty ones)."""
    firsts = [stamp[:10] for stamp in db.execute(_FIRST_RECORDS).fetchone() if _a_day(stamp)]
    first = min(firsts) if firsts else None
    row = db.execute(f"SELECT date FROM reports WHERE date < ? AND ({_FOUND_SOMETHING}) ORDER BY date LIMIT 1",
                     (first or "9999-12-31",)).fetchone()
    return row[0] if row else first


def first_night(db: Database) -> str | None:
    """The store's first day, where the nightly catch-up and `nights_never_reported` start: the first day a sync
    covered or a report was kept for (`store_first_day`), or the first that holds activity
    (`first_activity_day`) when that is later; None while the store has either none.

    A day synced or reported on which the provider listed nothing does not move it back: a mistyped
    `partnerkit reconcile --date 1999-01-01` made every night since 1999 "never reported" for good, and the
    catch-up wrote 31 empty reports of days before the account existed. Records held before the first sync
    (the kit's own submits) do not either: the nightly run reports from the day it began reading the account."""
    opened, active = store_first_day(db), first_activity_day(db)
    return max(opened, active) if opened is not None and active is not None else None


def unreported_nights(db: Database, latest: date) -> tuple[list[date], list[date]]:
    """nights_to_report over the store, from its first day (`first_night`). A report made by hand for a later
    night (`partnerkit reconcile --date`) never hides the nights before it; an empty report of a mistyped old
    day reaches back to none."""
    first_day = first_night(db)
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
