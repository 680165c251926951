"""Online backup of the live database with SQLite's backup API (safe while receiver and worker write),
and the restore of such a backup (only while nothing has the database open).

Copying the file with `cp` while it is in WAL mode can capture a torn state (the newest commits
live in the -wal file); the backup API copies a consistent snapshot page by page instead. Copying a
backup over the database by hand goes wrong the other way: a stale -wal left beside it by a crash is
replayed onto the restored file by the next process that opens it (or the file is reported as
malformed), so `restore` moves the old -wal and -shm aside before the backup takes the name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from partnerkit.errors import StorageError
from partnerkit.files import make_private_dirs
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


# ---- restore -----------------------------------------------------------------------------------

# SQLite's unix VFS holds a shared lock on one byte of the -shm file (its "DMS" slot, at offset
# 120 + 8) for as long as a connection has the database open in WAL mode, whatever it is doing.
_SHM_DMS_OFFSET = 128


@dataclass(frozen=True)
class Restored:
    """What `restore` did."""

    path: Path  # the database, now holding the backup
    schema_version: int  # the backup's, left as it was (never migrated here)
    replaced: Path | None  # where the database it replaced was moved, None when there was none
    replaced_files: tuple[Path, ...]  # that database's -wal and -shm, moved beside it
    keyed_values: int  # stored vouchers and saved webhook tokens: they need the key of the backup's time


def in_use(path: str | os.PathLike) -> bool:
    """Whether another process has the database open: a lock on its -shm file that only SQLite holds.

    Only another process: this one must not have it open (POSIX locks are per process)."""
    shm = Path(f"{path}-shm")
    try:
        fd = os.open(shm, os.O_RDWR)
    except FileNotFoundError:
        return False  # no -shm: no connection has the file open in WAL mode
    except OSError as exc:
        raise StorageError(f"cannot tell whether {path} is in use: {shm} cannot be opened ({exc.strerror})") from exc
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_OFFSET)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, _SHM_DMS_OFFSET)
        return False
    finally:
        os.close(fd)


def check_copy(path: Path, *, latest_schema: int) -> tuple[int, int]:
    """Check a database file for a restore (`PRAGMA integrity_check`, a partnerkit schema no newer than
    `latest_schema`); return its schema version and how many of its rows need the voucher key (stored
    vouchers, saved webhook tokens). Read with a plain connection: never migrated."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            try:
                result = [str(row[0]) for row in conn.execute("PRAGMA integrity_check").fetchall()]
            except sqlite3.DatabaseError as exc:  # damage bad enough to stop the check itself
                if "malformed" not in str(exc):
                    raise
                result = [str(exc)]
            if result != ["ok"]:
                raise StorageError(f"fails SQLite's integrity check ({'; '.join(result[:3])})")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            keyed = sum(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                        for table in ("vouchers", "webhook_tokens") if table in tables)
    except sqlite3.Error as exc:
        raise StorageError(f"is not a usable SQLite database ({exc})") from exc
    if version < 1 or not {"meta", "inbox", "recharges"} <= tables:
        raise StorageError("is not a partnerkit database (no partnerkit schema in it)")
    if version > latest_schema:
        raise StorageError(f"has schema version {version}, newer than this release's {latest_schema}: restore it "
                           "with the release that made it")
    return version, keyed


def _free_name(base: Path) -> Path:
    """`base`, or `base` with -2, -3 ... when a file of that name exists already."""
    candidate, number = base, 1
    while candidate.exists() or Path(f"{candidate}-wal").exists():
        number += 1
        candidate = base.with_name(f"{base.name}-{number}")
    return candidate


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def restore(source: str | os.PathLike, target: str | os.PathLike, *, latest_schema: int,
            now: datetime | None = None) -> Restored:
    """Put the backup `source` in place of the database `target`, which no process may have open.

    The backup is checked, copied beside the target (mode 0600; as root, owned like the file it replaces),
    checked again there, and renamed into place. The target's -wal and -shm are moved aside first, with
    the database they belong to, so a stale WAL is never replayed onto the restored file; nothing is deleted.
    """
    source, target = Path(source), Path(target)
    if not source.is_file():
        raise StorageError(f"backup {source} does not exist or is not a file")
    if Path(f"{source}-wal").exists():
        raise StorageError(f"backup {source} has a -wal file beside it: it was copied while open, or is open now "
                           "(make backups with `partnerkit backup`)")
    if source.resolve() == target.resolve():
        raise StorageError(f"backup {source} is the database itself")
    if in_use(target):
        raise StorageError(f"{target} is open in another process (the receiver, the worker or a `partnerkit` "
                           "command such as the status timer's): stop them first")
    make_private_dirs(target.parent)
    temp = target.with_name(f".{target.name}.restoring-{os.getpid()}")
    try:
        temp.unlink(missing_ok=True)
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "wb") as out, open(source, "rb") as given:
            shutil.copyfileobj(given, out, 1024 * 1024)
            out.flush()
            os.fsync(out.fileno())
        try:
            version, keyed = check_copy(temp, latest_schema=latest_schema)
        except StorageError as exc:
            raise StorageError(f"backup {source} {exc}") from exc
        for leftover in (Path(f"{temp}-wal"), Path(f"{temp}-shm")):
            leftover.unlink(missing_ok=True)
        owner = target if target.exists() else target.parent
        if os.geteuid() == 0:  # root restores for the service user: the file must stay theirs
            status = owner.stat()
            os.chown(temp, status.st_uid, status.st_gid)
        if in_use(target):  # a process started meanwhile (a timer)
            raise StorageError(f"{target} was opened by another process meanwhile: stop it and run the restore again")
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        replaced = _free_name(target.with_name(f"{target.name}.replaced-{stamp}")) if target.exists() else None
        aside = replaced or _free_name(target.with_name(f"{target.name}.stale-{stamp}"))  # -wal without its file
        moved = []
        for suffix in ("-wal", "-shm"):  # first: the restored file must never sit beside a stale -wal
            companion = Path(f"{target}{suffix}")
            if companion.exists():
                os.replace(companion, Path(f"{aside}{suffix}"))
                moved.append(Path(f"{aside}{suffix}"))
        if replaced is not None:
            os.replace(target, replaced)
        os.replace(temp, target)
        _fsync_directory(target.parent)
    except StorageError:
        temp.unlink(missing_ok=True)
        raise
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        raise StorageError(f"restore of {target} failed: {exc.strerror or exc}"
                           + (f": {exc.filename}" if exc.filename else "")) from exc
    return Restored(target, version, replaced, tuple(moved), keyed)
