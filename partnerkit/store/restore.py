"""The restore of a backup `partnerkit backup` wrote (only while nothing has the database open).

Copying a backup over the database by hand goes wrong: a stale -wal left beside it by a crash is
replayed onto the restored file by the next process that opens it (or the file is reported as
malformed), so `restore` keeps the old -wal aside with the old file, and leaves none where the backup
goes. And the name is never empty: an opener that finds no file creates an empty
database (the worker would then report from it), so the old file is kept under a second name and the
backup renamed over it in one step, whatever moment a kill or a power cut picks.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import sqlite_utils

from partnerkit.errors import StorageError
from partnerkit.files import make_private_dirs, sync_directory
from partnerkit.store import locks, receivers
from partnerkit.store.copies import hold, remove_unless_held
from partnerkit.store.drifts import SYSTEM_ACTOR
from partnerkit.timeutil import iso, parse_ts


# SQLite's unix VFS holds a shared lock on one byte of the -shm file (its "DMS" slot, at offset
# 120 + 8) for as long as a connection has the database open in WAL mode, whatever it is doing.
_SHM_DMS_OFFSET = 128


@dataclass(frozen=True)
class BackupTimes:
    """The newest of what the provider cannot give back, as a backup holds it (None: it holds none).
    What happened after these is lost with the restore."""

    decision_at: str | None  # a person's last drift resolution or escalation (drift_audit)
    report_date: str | None  # the newest stored report's day ...
    report_generated_at: str | None  # ... and when it was made
    token_at: str | None  # the newest webhook token saved (`webhooks register`, `webhooks token set`)


@dataclass(frozen=True)
class Restored:
    """What `restore` did."""

    path: Path  # the database, now holding the backup
    schema_version: int  # the backup's, left as it was (never migrated here)
    replaced: Path | None  # the database it replaced, under its second name; None when there was none
    replaced_files: tuple[Path, ...]  # that database's -wal and -shm, moved beside it
    keyed_values: int  # stored vouchers and saved webhook tokens: they need the key of the backup's time
    times: BackupTimes  # the backup's newest decision, report and token
    leases_forgotten: tuple[str, ...]  # holders of the leases deleted from the restored copy (a worker of its time)
    leftovers: tuple[Path, ...]  # copies of killed restores, removed


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


def stored_lease(path: Path, name: str) -> locks.Lease | None:
    """The lease `name` as the database file `path` holds it, or None (none, or not a readable partnerkit
    database). A file with a -wal beside it is read only: SQLite's last writer to close a file folds its
    -wal into it and deletes it (even one beside a file it cannot read), and a restore keeps a -wal with
    its file. Without one, a read-only connection would leave an empty -wal and -shm behind instead."""
    if not path.is_file():
        return None
    uri = path.resolve().as_uri() + ("?mode=ro" if Path(f"{path}-wal").exists() else "?mode=rw")
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            return locks.current(sqlite_utils.Database(conn), name)
    except (sqlite3.Error, ValueError, TypeError):  # damaged, or not a partnerkit database
        return None


def backup_times(path: Path) -> BackupTimes:
    """What the copy at `path` holds last of what the provider cannot give back (read only)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

        def first(table: str, sql: str, *params: str) -> tuple[Any, ...]:
            row = conn.execute(sql, params).fetchone() if table in tables else None
            return tuple(row) if row is not None else (None, None)

        # A person's last decision: the audit is appended in time order, so read back from its end.
        decision = first("drift_audit", "SELECT at, NULL FROM drift_audit WHERE by != ? ORDER BY seq DESC LIMIT 1",
                         SYSTEM_ACTOR)
        report = first("reports", "SELECT date, generated_at FROM reports ORDER BY date DESC LIMIT 1")
        token = first("webhook_tokens", "SELECT MAX(created_at), NULL FROM webhook_tokens")
    return BackupTimes(_second(decision[0]), report[0], _second(report[1]), _second(token[0]))


def _second(stamp: str | None) -> str | None:
    """A stored time as ISO 8601 UTC to the second (tokens are stored to the microsecond); a stamp that does
    not parse, as it is."""
    try:
        return iso(parse_ts(stamp))
    except ValueError:
        return stamp


def _forget_leases(path: Path, names: Sequence[str]) -> tuple[str, ...]:
    """Delete the leases `names` from the copy at `path` (its last writer, gone since: a worker of the
    backup's time), and the receiver masters it recorded (`partnerkit.store.receivers`: a receiver of the
    backup's time, never marked stopped in the copy, would read as killed until a receiver starts); return
    the leases' holders."""
    marks = ", ".join("?" for _ in names)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        holders = tuple(row[0] for row in conn.execute(f"SELECT holder FROM locks WHERE name IN ({marks})",
                                                       tuple(names))) if names else ()
        with conn:
            if names:
                conn.execute(f"DELETE FROM locks WHERE name IN ({marks})", tuple(names))
            conn.execute("DELETE FROM meta WHERE key >= ? AND key < ?", (receivers.PREFIX, receivers.PREFIX[:-1] + "/"))
    return holders


def _free_name(base: Path) -> Path:
    """`base`, or `base` with -2, -3 ... when a file of that name exists already."""
    candidate, number = base, 1
    while candidate.exists() or Path(f"{candidate}-wal").exists():
        number += 1
        candidate = base.with_name(f"{base.name}-{number}")
    return candidate


def _copy_private(source: Path, destination: Path, *, owned_like: Path | None = None) -> None:
    """Copy `source` to the new file `destination` (mode 0600), flushed to disk; run as root, owned like
    `owned_like`."""
    fd = os.open(destination, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "wb") as out, open(source, "rb") as given:
        shutil.copyfileobj(given, out, 1024 * 1024)
        out.flush()
        os.fsync(out.fileno())
    if owned_like is not None and os.geteuid() == 0:
        status = owned_like.stat()
        os.chown(destination, status.st_uid, status.st_gid)


def _remove_copy(copy: Path) -> None:
    """Delete a restore's copy of the backup, with its -wal, -shm and partial copies of the old file."""
    for path in [copy, *copy.parent.glob(glob.escape(copy.name) + "[.-]*")]:
        path.unlink(missing_ok=True)


def _clear_leftovers(target: Path) -> tuple[Path, ...]:
    """Remove the copies (`.NAME.restoring-PID`, with any -wal, -shm or partial copy of the old file) left
    by restores killed before they renamed them into place; return them. A running restore holds a lock
    on its copy: refused then."""
    removed = []
    prefix = f".{target.name}.restoring-"
    for leftover in sorted(target.parent.glob(glob.escape(prefix) + "*")):
        if not leftover.name[len(prefix):].isdigit():
            continue  # one of its companions: removed with it
        done = remove_unless_held(leftover, _remove_copy)
        if done is False:
            raise StorageError(f"another `partnerkit restore` of {target} is running (its copy {leftover}): "
                               "let it finish")
        if done:
            removed.append(leftover)
    return tuple(removed)


def _keep_aside(target: Path, aside: Path, scratch: Path) -> tuple[Path, ...]:
    """Give the database `target` a second name, `aside`, leaving it whole where it is; return the
    companion files kept beside `aside`.

    A hard link. With a -wal beside it (or on a filesystem without links), a copy of the file and of its
    -wal instead: one file under two names, a WAL beside only one of them, would have that WAL replayed
    onto the other's writes by whoever opened it there. Copies are made under `scratch`'s name, then
    renamed, the -wal first, so that `aside` never names a part of the file. The -wal is then folded into
    `target` by a checkpoint, so that `target` holds its last commits by itself until the backup is
    renamed over it. (A -wal SQLite does not fold, beside a file it cannot read, is left to the caller.)"""
    wal = Path(f"{target}-wal")
    if not wal.exists():
        try:
            os.link(target, aside)
            return ()
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                raise
    copies = [(target, aside)] + ([(wal, Path(f"{aside}-wal"))] if wal.exists() else [])
    for source, kept in copies:
        _copy_private(source, Path(f"{scratch}.{kept.name}"), owned_like=target)
    for _, kept in reversed(copies):
        os.replace(Path(f"{scratch}.{kept.name}"), kept)
    if len(copies) == 1:
        return ()
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(target)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # the close then deletes the -wal
    return (Path(f"{aside}-wal"),)


def restore(source: str | os.PathLike, target: str | os.PathLike, *, latest_schema: int,
            now: datetime | None = None, forget_leases: Sequence[str] = ()) -> Restored:
    """Put the backup `source` in place of the database `target`, which no process may have open.

    The backup is checked, copied beside the target (mode 0600; as root, owned like the file it replaces),
    checked again there, its leases `forget_leases` deleted (their holders, of the backup's time, are
    gone), and renamed over the old file in one `rename()`: the path holds the old database or the new
    one at every moment, never none. The old file gets its second name first (PARTNERKIT_DB.replaced-TIME:
    a hard link; with a -wal, a copy of both, the -wal then folded into the file still in place), and no
    -wal or -shm is left where the backup goes, so a stale WAL is never replayed onto the restored file.
    Nothing is deleted but the copies of earlier restores that were killed before they finished
    (`Restored.leftovers`).
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
    temp = target.with_name(f".{target.name}.restoring-{os.getpid()}")
    lock = None
    try:
        make_private_dirs(target.parent)
        leftovers = _clear_leftovers(target)
        _copy_private(source, temp)
        lock = hold(temp)  # to the end: a restore started meanwhile leaves this copy alone
        try:
            version, keyed = check_copy(temp, latest_schema=latest_schema)
        except StorageError as exc:
            raise StorageError(f"backup {source} {exc}") from exc
        times = backup_times(temp)
        forgotten = _forget_leases(temp, forget_leases)
        for leftover in (Path(f"{temp}-wal"), Path(f"{temp}-shm")):
            leftover.unlink(missing_ok=True)
        owner = target if target.exists() else target.parent
        if os.geteuid() == 0:  # root restores for the service user: the file must stay theirs
            status = owner.stat()
            os.chown(temp, status.st_uid, status.st_gid)
        if in_use(target):  # a process started meanwhile (a timer)
            raise StorageError(f"{target} was opened by another process meanwhile: stop it and run the restore again")
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        replaced = _free_name(target.with_name(f"{target.name}.replaced-{stamp}")) if target.is_file() else None
        # The old file keeps its name, whole, until the backup is renamed over it: never a moment without one.
        moved = list(_keep_aside(target, replaced, temp)) if replaced is not None else []
        aside = replaced or _free_name(target.with_name(f"{target.name}.stale-{stamp}"))  # -wal without its file
        for suffix in ("-wal", "-shm"):  # before the rename: the restored file must never sit beside a stale -wal
            companion, kept = Path(f"{target}{suffix}"), Path(f"{aside}{suffix}")
            if companion.exists():
                os.replace(companion, kept)  # a -wal SQLite did not fold goes over its copy: the same bytes
                moved += [] if kept in moved else [kept]
        os.replace(temp, target)
        sync_directory(target.parent)
    except StorageError:
        _remove_copy(temp)
        raise
    except OSError as exc:
        with contextlib.suppress(OSError):
            _remove_copy(temp)
        raise StorageError(f"restore of {target} failed: {exc.strerror or exc}"
                           + (f": {exc.filename}" if exc.filename else "")) from exc
    except sqlite3.Error as exc:  # the checked copy could not be read or written again (a full disk)
        with contextlib.suppress(OSError):
            _remove_copy(temp)
        raise StorageError(f"restore of {target} failed: {exc}") from exc
    finally:
        if lock is not None:
            os.close(lock)
    return Restored(target, version, replaced, tuple(moved), keyed, times, forgotten, leftovers)
