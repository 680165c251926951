"""Stored daily reports: one row per UTC date, the report JSON as generated (latest run wins)."""

from __future__ import annotations

import json
from typing import Any

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


def last_complete_report_date(db: Database) -> str | None:
    """The latest date whose report was generated after that UTC day ended, or None.

    A report of a day still in progress (`partnerkit reconcile --date TODAY`) or of a future day is
    not the nightly report: counting it would leave that day, and every day before it, never
    reported by the nightly job.
    """
    return db.execute("SELECT MAX(date) FROM reports WHERE generated_at >= date(date, '+1 day')").fetchone()[0]


def report_dates(db: Database) -> list[str]:
    """Every date with a stored report, oldest first."""
    return [r[0] for r in db.execute("SELECT date FROM reports ORDER BY date").fetchall()]

