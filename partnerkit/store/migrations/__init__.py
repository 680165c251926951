"""Versioned schema migrations, tracked in PRAGMA user_version.

Each migration is a module `mNNNN_<concern>.py` in this package with `VERSION` (its number),
`NAME` and `STATEMENTS` (a tuple of SQL statements). They run in VERSION order, each inside
one BEGIN IMMEDIATE transaction that re-reads user_version first, so running `migrate()` twice,
or from two processes at once, applies every migration exactly once. The BEGIN waits for another
process's write lock as every transaction on the handle does (`partnerkit.store.db.begin`): a
command's says so after a second, and one that waits its whole busy timeout raises DatabaseBusy,
nothing applied (the next open applies it). Migrations are never
edited after a release; a change is a new module with the next number.

A change ALTER TABLE cannot make (a CHECK, a constraint, a column's type) rebuilds the table by
SQLite's procedure (https://sqlite.org/lang_altertable.html, "Making Other Kinds Of Table Schema
Changes"): `CREATE TABLE new_X (...)`, `INSERT INTO new_X SELECT ... FROM X`, `DROP TABLE X`,
`ALTER TABLE new_X RENAME TO X`, then X's indexes and triggers again. Such a module sets
`REBUILD = True`: the runner turns foreign keys off before its transaction (PRAGMA foreign_keys is a
no-op inside one, and with them on, DROP TABLE X deletes X's rows, which the rows pointing at them
refuse), runs `PRAGMA foreign_key_check` before the commit (any row left pointing nowhere rolls the
migration back, naming the table), and turns them back on after. docs/internals.md, "Extending".
"""

from __future__ import annotations

import importlib
import pkgutil
import sqlite3
from dataclasses import dataclass

from sqlite_utils import Database

from partnerkit.errors import StorageError
from partnerkit.store.db import begin, holding


@dataclass(frozen=True)
class Migration:
    """One schema change: its statements run in one transaction; `rebuild` as the module docstring says."""

    version: int
    name: str
    statements: tuple[str, ...]
    rebuild: bool = False


def discover() -> list[Migration]:
    """All migrations of this package, in version order; refuses gaps and duplicates."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("m"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.append(Migration(module.VERSION, module.NAME, tuple(module.STATEMENTS),
                               bool(getattr(module, "REBUILD", False))))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            numbers = [m.version for m in found]
            if migration.version < expected:  # sorted: a number met a second time
                named = ", ".join(m.name for m in found if m.version == migration.version)
                raise RuntimeError(f"migration number {migration.version} is used more than once ({named}): each module needs "
                                   f"its own, a new one the newest module's VERSION + 1; found {numbers}")
            raise RuntimeError(f"migration numbers must run 1..N without gaps: {expected} is missing; found {numbers}")
    return found


def current_version(db: Database) -> int:
    """The schema version recorded in the database file."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def _dangling(conn: sqlite3.Connection) -> str | None:
    """What `PRAGMA foreign_key_check` finds (rows pointing at no row), in words; None when nothing."""
    rows = conn.execute("PRAGMA foreign_key_check").fetchall()
    if not rows:
        return None
    tables = sorted({f"{table} -> {parent}" for table, _, parent, _ in rows})
    return f"{len(rows)} row(s) pointing at no row ({', '.join(tables)})"


def migrate(db: Database, migrations: list[Migration] | None = None) -> int:
    """Apply every pending migration, one transaction each; return the resulting version.

    `migrations` defaults to this package's (`discover()`); tests pass a list of their own."""
    migrations = discover() if migrations is None else migrations
    conn = db.conn
    for migration in migrations:
        if current_version(db) >= migration.version:
            continue
        with holding(db):  # a handle shared by threads: no other thread's transaction in between
            foreign_keys = conn.execute("PRAGMA foreign_keys").fetchone()[0]
            if migration.rebuild:
                conn.execute("PRAGMA foreign_keys = OFF")  # outside the transaction: a no-op inside one
            try:
                # Waits for the write lock as the handle's transactions do: a command says so after a
                # second, and a wait that runs out is DatabaseBusy (nothing applied), not a sqlite3 error.
                begin(db, failing=f"cannot apply schema migration {migration.version} ({migration.name})")
                # Another process may have applied it while we waited for the lock.
                if current_version(db) < migration.version:
                    for statement in migration.statements:
                        conn.execute(statement)
                    if migration.rebuild and foreign_keys and (dangling := _dangling(conn)):
                        conn.execute("ROLLBACK")
                        raise StorageError(f"migration {migration.version} ({migration.name}) failed: the rebuild "
                                           f"left {dangling}; nothing was changed")
                    conn.execute(f"PRAGMA user_version = {migration.version}")
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StorageError(f"migration {migration.version} ({migration.name}) failed: {exc}") from exc
            finally:
                if migration.rebuild and foreign_keys:
                    conn.execute("PRAGMA foreign_keys = ON")
    latest = migrations[-1].version if migrations else 0
    version = current_version(db)
    if version > latest:
        raise StorageError(f"database schema version {version} is newer than this partnerkit ({latest}); upgrade partnerkit")
    return version
