"""Webhook deliveries the receiver refused, counted per minute and reason (owned by the receiver).

A refused delivery stores nothing, so without this `partnerkit status` could not tell deliveries that
are arriving and being refused (a token rotated wrong, a clock off, a proxy that rewrites the body)
from none arriving at all. Each receiver worker counts its refusals in memory and adds them here
every few seconds in one transaction (receiver.refusals), never once per request: a flood of
unsigned requests must not contend with real deliveries for SQLite's write lock. One row per minute
and reason, summed over the workers; `first_at` and `last_at` are the first and last refusal of that
minute. `minute` is `YYYY-MM-DDTHH:MMZ`, the times ISO 8601 UTC text; the primary key serves the
range reads by minute (status: the last hour; retention: older than a week).
"""

VERSION = 11
NAME = "webhook_refusals"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE webhook_refusals (
        minute TEXT NOT NULL,
        reason TEXT NOT NULL,
        refused INTEGER NOT NULL CHECK (refused > 0),
        first_at TEXT NOT NULL,
        last_at TEXT NOT NULL,
        PRIMARY KEY (minute, reason)
    ) WITHOUT ROWID""",
)
