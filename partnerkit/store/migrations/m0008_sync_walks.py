"""Where an interrupted sync walk stopped, so its next run reads on from there (owned by reconciliation).

A sync reads every page of a date range; a busy day has more pages than the hour's budget holds. A
walk the budget (or the provider) stopped used to start again from page 1 at its next run, so a day
larger than one hour's budget was never read to its end. One row per entity and range: the page to
read next and when the walk began (the coverage it claims when it ends counts from there).
"""

VERSION = 8
NAME = "sync_walks"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE sync_walks (
        entity TEXT NOT NULL,
        from_day TEXT NOT NULL,
        to_day TEXT NOT NULL,
        next_page INTEGER NOT NULL CHECK (next_page >= 1),
        started_at TEXT NOT NULL,
        stopped_at TEXT NOT NULL,
        reason TEXT,
        PRIMARY KEY (entity, from_day, to_day)
    )""",
)
