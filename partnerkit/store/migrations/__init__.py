"""Versioned schema migrations, tracked in PRAGMA user_version.

Each migration is a module `mNNNN_<concern>.py` in this package with `VERSION` (its number),
`NAME` and `STATEMENTS` (a tuple of SQL statements). They run in VERSION order, each inside
one BEGIN IMMEDIATE transaction that re-reads user_version first, so running `migrate()` twice,
or from two processes at once, applies every migration exactly once. Migrations are never
edited after a release; a change is a new module with the next number.
"""

from __future__ import annotations

import importlib
import pkgutil
import sqlite3
from dataclasses import dataclass

from sqlite_utils import Database

from partnerkit.errors import StorageError
from partnerkit.store.db import holding


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def discover() -> list[Migration]:
    """All migrations of this package, in version order; refuses gaps and duplicates."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("m"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.append(Migration(module.VERSION, module.NAME, tuple(module.STATEMENTS)))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"migration numbers must run 1..N without gaps; found {[m.version for m in found]}")
    return found


def current_version(db: Database) -> int:
    """The schema version recorded in the database file."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: Database) -> int:
    """Apply every pending migration, one transaction each; return the resulting version."""
    migrations = discover()
    conn = db.conn
    for migration in migrations:
        if current_version(db) >= migration.version:
            continue
        with holding(db):  # a handle shared by threads: no other thread's transaction in between
            try:
                conn.execute("BEGIN IMMEDIATE")
                # Another process may have applied it while we waited for the lock.
                if current_version(db) < migration.version:
                    for statement in migration.statements:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {migration.version}")
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StorageError(f"migration {migration.version} ({migration.name}) failed: {exc}") from exc
    latest = migrations[-1].version if migrations else 0
    version = current_version(db)
    if version > latest:
        raise StorageError(f"database schema version {version} is newer than this partnerkit ({latest}); upgrade partnerkit")
    return version
