"""Online backup of the live database with SQLite's backup API (safe while receiver and worker write).

Copying the file with `cp` while it is in WAL mode can capture a torn state (the newest commits
live in the -wal file); the backup API copies a consistent snapshot page by page instead. Putting a
backup back is partnerkit.store.restore's (its names are re-exported here, where callers have always
imported them).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from partnerkit.errors import StorageError
from partnerkit.files import make_private_dirs, sync_directory
from partnerkit.store.copies import hold, remove_unless_held
from partnerkit.store.db import Database
from partnerkit.store.restore import BackupTimes, Restored, backup_times, check_copy, in_use, restore, stored_lease

# restore's names are re-exported: callers import them from here
__all__ = ["BackedUp", "BackupTimes", "PAGES_PER_STEP", "Restored", "backup", "backup_times", "check_copy", "in_use",
           "restore", "stored_lease"]


# SQLite's backup API restarts a step-wise copy from page 1 whenever another connection commits to the
# source between two steps (a receiver's webhook, a worker's job): a copy longer than the gap between
# two commits never ends. Holding one read transaction on the source across all the steps pins its
# snapshot, so nothing restarts (measured on a 219 MB store with another process committing 20 times a
# second: 0 restarts, 4.8 s for a copy slowed to 418 steps; without it, 1,183 restarts and still 99% to
# copy after 60 s). In WAL mode a reader blocks no writer; the -wal grows meanwhile, and the next
# checkpoint after the copy folds it back.
PAGES_PER_STEP = 1024  # 4 MB a step with 4 KB pages: progress to report, and one read snapshot throughout
_SQLITE_HEADER = b"SQLite format 3\0"
_COMPANIONS = ("-journal", "-wal", "-shm")


@dataclass(frozen=True)
class BackedUp:
    """What `backup` did."""

    path: Path  # the backup
    size_bytes: int  # its size
    leftovers: tuple[Path, ...]  # copies of killed backups in the same directory, removed
    unclaimed: tuple[Path, ...]  # NAME.partial files that earlier releases' killed backups left, named only


def backup(db: Database, destination: str | os.PathLike, *, pages_per_step: int | None = None,
           progress: Callable[[int, int], None] | None = None) -> BackedUp:
    """Write a consistent copy of `db` to `destination` (mode 0600), as of the moment it starts; refuse to
    overwrite a file. `progress(bytes_copied, bytes_total)` is called after each step of
    `pages_per_step` pages (PAGES_PER_STEP by default).

    The copy is made beside it as `.NAME.backup-PID` (locked while it is written) and renamed over
    `destination` once it has passed `PRAGMA integrity_check`, and the directory is synced after the rename
    (partnerkit.files.sync_directory). Copies of killed backups found in that directory are removed first
    (`BackedUp.leftovers`)."""
    target = Path(destination)
    if target.exists():
        raise StorageError(f"{target} already exists; choose a new file name (backups are never overwritten)")
    partial = target.with_name(f".{target.name}.backup-{os.getpid()}")
    lock = None
    try:
        make_private_dirs(target.parent)
        leftovers = _clear_killed_backups(target.parent)
        _remove_partial(partial)  # a copy of this pid's: a process of the same pid before, long gone
        lock = hold(partial, create=True)  # to the end: a backup started meanwhile leaves this copy alone
        # Closed before the rename, not merely committed (`with sqlite3.connect()` does not close):
        # the copy is in WAL mode like the live file, and only the last close removes its
        # -wal and -shm files, which would otherwise stay behind under the partial name.
        with contextlib.closing(sqlite3.connect(partial)) as out:
            _copy(db.conn, out, pages_per_step or PAGES_PER_STEP, progress)
            result = out.execute("PRAGMA integrity_check").fetchone()[0]
        if result != "ok":
            raise StorageError(f"the backup failed its integrity check: {result}")
        if target.exists():  # made meanwhile by another process: still never overwritten
            raise StorageError(f"{target} already exists; choose a new file name (backups are never overwritten)")
        os.replace(partial, target)
        sync_directory(target.parent)  # before it is reported done: the rename, too, must survive a power cut
        size = target.stat().st_size
    except StorageError:
        with contextlib.suppress(OSError):
            _remove_partial(partial)
        raise
    except sqlite3.Error as exc:
        with contextlib.suppress(OSError):
            _remove_partial(partial)
        raise StorageError(f"backup to {target} failed: {exc}") from exc
    except OSError as exc:
        with contextlib.suppress(OSError):  # the parent may be a file: the cause is what to report
            _remove_partial(partial)
        raise StorageError(f"backup to {target} failed: {exc.strerror or exc}") from exc
    finally:
        if lock is not None:
            os.close(lock)  # after SQLite closed the copy: closing a file drops the process's POSIX locks on it
    return BackedUp(target, size, leftovers, _unclaimed(target.parent))


def _copy(source: sqlite3.Connection, out: sqlite3.Connection, pages_per_step: int,
          progress: Callable[[int, int], None] | None) -> None:
    """Copy `source` into `out` step by step under one read transaction (see PAGES_PER_STEP)."""
    owned = not source.in_transaction
    if owned:
        source.execute("BEGIN")  # deferred: a read transaction, which in WAL mode blocks no writer
    try:
        source.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the snapshot starts here
        page_size = source.execute("PRAGMA page_size").fetchone()[0]

        def step(_status: int, remaining: int, total: int) -> None:
            if progress is not None:
                progress((total - remaining) * page_size, total * page_size)

        source.backup(out, pages=pages_per_step, progress=step)
    finally:
        if owned:
            source.execute("ROLLBACK")  # it wrote nothing


def _remove_partial(copy: Path) -> None:
    """Delete a copy in the making with its -journal, -wal and -shm."""
    for path in [copy, *(Path(f"{copy}{suffix}") for suffix in _COMPANIONS)]:
        path.unlink(missing_ok=True)


def _is_copy(path: Path) -> bool:
    """Whether `path` starts as what a backup writes starts (a SQLite file's header, or nothing yet: the
    first page is written last, at the commit of the copy): never delete anything else."""
    try:
        with open(path, "rb") as given:
            start = given.read(len(_SQLITE_HEADER))
    except OSError:
        return False
    return start in (b"", _SQLITE_HEADER, bytes(len(_SQLITE_HEADER)))


def _clear_killed_backups(directory: Path) -> tuple[Path, ...]:
    """Remove the copies (`.NAME.backup-PID`, with their -journal, -wal and -shm) that backups killed
    before they renamed them left in `directory`; return them. A running backup holds a lock on its
    copy: left alone."""
    removed = []
    for leftover in sorted(directory.glob(".*.backup-*")):
        if not leftover.name.rpartition(".backup-")[2].isdigit() or not _is_copy(leftover):
            continue  # a companion (removed with its copy), or not ours
        if not remove_unless_held(leftover, _remove_partial):
            continue  # a backup in progress, or gone meanwhile
        removed.append(leftover)
    return tuple(removed)


def _unclaimed(directory: Path) -> tuple[Path, ...]:
    """`NAME.partial` copies (with their companions) that killed backups of earlier releases left in
    `directory`: named, never deleted (such a backup may still be running; nothing says which)."""
    found = []
    for partial in sorted(directory.glob("*.partial")):
        if partial.is_file() and _is_copy(partial):
            found += [partial, *(p for p in (Path(f"{partial}{s}") for s in _COMPANIONS) if p.exists())]
    return tuple(found)
