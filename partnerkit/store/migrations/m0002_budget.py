"""The shared, persistent API request budget (owned by the client).

One row per request sent (a sliding-window log), keyed by SHA-256 of the API key, never the key
itself; and one row of provider-reported state per key and class (X-RateLimit-* and 429 blocks).
Times here are unix seconds (REAL), not ISO text: the budget compares them on every call.
"""

VERSION = 2
NAME = "budget"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE budget_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key_hash TEXT NOT NULL,
        class TEXT NOT NULL,
        purpose TEXT NOT NULL,
        at REAL NOT NULL
    )""",
    "CREATE INDEX budget_events_window ON budget_events (key_hash, class, at)",
    """CREATE TABLE budget_state (
        key_hash TEXT NOT NULL,
        class TEXT NOT NULL,
        provider_limit INTEGER,
        provider_remaining INTEGER,
        provider_after_id INTEGER,
        provider_until REAL,
        blocked_until REAL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (key_hash, class)
    )""",
)
