"""Core tables: a key/value table for small facts, and job locks shared by every process."""

VERSION = 1
NAME = "core"
STATEMENTS = (
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    # A lease: one holder at a time per name (e.g. the worker's scheduler), renewed while alive.
    """CREATE TABLE locks (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        acquired_at TEXT NOT NULL,
        expires_at TEXT NOT NULL
    )""",
)
