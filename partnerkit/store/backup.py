"""Online backup of the live database with SQLite's backup API (safe while receiver and worker write).

Copying the file with `cp` while it is in WAL mode can capture a torn state (the newest commits
live in the -wal file); the backup API copies a consistent snapshot page by page instead.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from partnerkit.errors import StorageError
from partnerkit.store.db import Database, _create_private


def backup(db: Database, destination: str | os.PathLike, *, pages_per_step: int = 1024) -> Path:
    """Write a consistent copy of `db` to `destination` (mode 0600); refuse to overwrite a file."""
    target = Path(destination)
    if target.exists():
        raise StorageError(f"{target} already exists; choose a new file name (backups are never overwritten)")
    partial = target.with_name(target.name + ".partial")
    try:
        partial.unlink(missing_ok=True)
        _create_private(partial)
        # Closed before the rename, not merely committed (`with sqlite3.connect()` does not close):
        # the copy is in WAL mode like the live file, and only the last close removes its
        # -wal and -shm files, which would otherwise stay behind under the .partial name.
        with contextlib.closing(sqlite3.connect(partial)) as out:
            db.conn.backup(out, pages=pages_per_step)
            result = out.execute("PRAGMA integrity_check").fetchone()[0]
        if result != "ok":
            raise StorageError(f"the backup failed its integrity check: {result}")
        os.replace(partial, target)
    except sqlite3.Error as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise StorageError(f"backup to {target} failed: {exc}") from exc
    except OSError as exc:
        with contextlib.suppress(OSError):  # the parent may be a file: the cause is what to report
            partial.unlink(missing_ok=True)
        raise StorageError(f"backup to {target} failed: {exc.strerror or exc}") from exc
    return target
