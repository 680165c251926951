"""Opening the database, and the one way to run a write transaction.

The connection is in autocommit mode (isolation_level=None) and every write goes through
`transaction(db)`, which issues BEGIN IMMEDIATE: the write lock is taken up front, so two
processes never both read-then-upgrade and deadlock, and the BEGIN waits for the lock up to the
connection's busy timeout (in short steps on a `short_lock_waits` connection, and on one opened with
`lock_wait`, a command's, which says after LOCK_NOTICE_AFTER_S that it is waiting: `_begin_immediate`).
A BEGIN that waited its whole busy timeout raises `DatabaseBusy`: another process held the write
lock all that time (a long match, a backup, a prune), and nothing was written by that transaction.
A BEGIN run by hand (a migration's, pending when `open_db` opens the file) goes through `begin()`, as
`transaction()` does: it waits, says so and gives up the same way.
Do not call sqlite-utils' insert/upsert helpers inside `transaction()`: they wrap their work in
`with conn:`, which would commit our transaction half-way. Inside a transaction, use
`db.execute()` with SQL kept in the store modules.

A handle (what `connect`/`open_db` return) may be shared by threads: its connection is opened with
check_same_thread=False, and every transaction on it (`transaction()`, and the raw BEGINs of
`migrate` and the readiness probe, through `holding()`) holds a lock owned by the handle from BEGIN
to COMMIT, so one thread's transaction never interleaves with another's (their statements would
otherwise all land in whichever transaction was open, and a second BEGIN fails with "cannot start a
transaction within a transaction"). Threads sharing a handle therefore wait for each other's
transactions, and a plain read on it while another thread's transaction is open sees that
transaction's uncommitted rows (one connection, one transaction). One handle per thread is the
fast way, and what the receiver and the worker do (docs/internals.md).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

import sqlite_utils
from sqlite_utils import Database

from partnerkit.errors import DatabaseBusy, StorageError
from partnerkit.files import make_private_dirs, warn_if_readable_by_others
from partnerkit.processes import database_writer

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
# A command run by hand (finance's `drifts resolve`, a cashier's `recharges submit`) waits this long for
# another process's write lock: the longest hold measured is a big day's nightly match (12-21 s of
# 1,000,000 recharges on a busy 2-core host), and a backup's checkpoint or a prune hold it for seconds.
# Longer than that is no passing moment: the worker's own lease (30 s) would be lapsing too, and a person
# is better told to try again than left waiting. It says it waits after LOCK_NOTICE_AFTER_S.
COMMAND_BUSY_TIMEOUT_MS = 30_000
# The worker's jobs and its lease renewal: a job that waits is only late, and one that gives up runs
# again at its next turn. The lease is renewed every 10 s and lasts 30 s (reconcile.scheduler), so a
# renewal that waits 15 s still lands 5 s before the lease would lapse (a test holds this).
WORKER_BUSY_TIMEOUT_MS = 15_000
# The receiver's request connections (`short_lock_waits`). The provider may give up after 5 s
# (docs/receiver.md): a locked database must become a 503 well before that, so the provider retries,
# rather than a timeout. Key rotation waits it out too (partnerkit.rotation.KEY_PICKUP_S).
RECEIVER_BUSY_TIMEOUT_MS = 2000
LOCK_NOTICE_AFTER_S = 1.0
# BEGIN IMMEDIATE waits for the write lock in steps from _FIRST_PAUSE_S, doubling up to
# _LONGEST_PAUSE_S (the receiver's) or _LONGEST_WAITED_PAUSE_S (a command's), until the connection's
# busy timeout; see _begin_immediate.
_FIRST_PAUSE_S = 0.00005
_LONGEST_PAUSE_S = 0.002
_LONGEST_WAITED_PAUSE_S = 0.02
# Guards the one-time creation of a lock for a handle not made by `connect` (see _lock_of).
_NEW_LOCK = threading.Lock()


@dataclass(frozen=True)
class LockWait:
    """How a command's connection waits for another process's write lock (`connect(lock_wait=...)`).

    `notice()` is called once per wait, when a BEGIN has waited LOCK_NOTICE_AFTER_S (a line on stderr:
    silence looks like a hang): a shorter wait says nothing, and a later BEGIN of the same command that
    waits that long again (a sync's next page, a prune's next batch, minutes on) says so again. `gave_up`
    ends the DatabaseBusy message when the wait runs out (what the command had not done, e.g. that
    nothing was sent to the provider). Both say who holds the lock (`partnerkit.processes.database_writer`):
    partnerkit only when the holder is known to be partnerkit, a plain sqlite3 shell being another process."""

    notice: Callable[[float, str], None]  # called with the whole wait, in seconds, and who is writing
    gave_up: str = "try again in a minute"


def _create_private(path: Path) -> None:
    """Create the database file with mode 0600 before SQLite touches it (WAL/SHM inherit it).

    Directories created for it are 0700 at every level (existing ones are left as they are): the
    generated voucher key file goes next to the database. A file that exists already (copied in, made by
    another tool) is left as it is, but a mode that lets other users read it is named in a WARNING, once a
    process (`warn_if_readable_by_others`): its -wal and -shm files would take that mode too.
    """
    make_private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        warn_if_readable_by_others(path, "the database", log, also=" (and its -wal and -shm files, if present)",
                                   once=True)
        return
    os.close(fd)


class _ReadOnlyFile(OSError):
    """The database file exists but this process cannot write it."""


def _refuse_read_only(file: Path) -> None:
    """Refuse a file this process cannot write, rather than let SQLite open it read-only.

    SQLite opens a file it cannot write read-only, without a word, and the connection stays read-only
    for its life: a receiver worker or a job that opened the file while it was read-only (a remount, an
    immutable flag, the wrong owner for a moment) went on failing every write after the file was
    writable again, 503 to every delivery until a restart. Refused here, the next request, job run or
    restart opens it again and finds it writable. (A connection opened read-write and then meeting a
    read-only file writes again once it is writable: only the open is judged.)"""
    if not os.access(file, os.W_OK) and file.is_file():
        raise _ReadOnlyFile(errno.EACCES, "the file cannot be written by this user (its permissions, an "
                            "immutable flag or a read-only filesystem); partnerkit needs to write it", str(file))


def _enable_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """PRAGMA journal_mode = WAL, retried while another process holds the new file's lock.

    Switching a new file to WAL needs an exclusive lock, and SQLite answers "database is locked"
    at once instead of calling the busy handler when another process is creating the schema; the
    busy timeout is honoured here by hand (several processes opening one new file at once)."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _open_failure(file: Path, exc: Exception) -> str:
    """Why the file could not be opened, in words where SQLite and mkdir are cryptic about it."""
    if isinstance(exc, _ReadOnlyFile):
        return exc.strerror
    if file.is_dir():
        return "it is a directory, not a database file"  # SQLite: "unable to open database file"
    if isinstance(exc, FileExistsError) and exc.filename and os.path.isfile(exc.filename):
        return f"{exc.filename} is a file where a directory is needed"  # mkdir: "[Errno 17] File exists"
    directory = file.parent
    if (isinstance(exc, sqlite3.Error) and file.is_file() and os.access(file, os.W_OK)
            and not os.access(directory, os.W_OK | os.X_OK)):
        # SQLite says "attempt to write a readonly database", yet the file is writable: in WAL mode it
        # must create the -wal and -shm files beside it.
        return (f"its directory {str(directory)!r} cannot be written by this user, and SQLite creates the "
                "database's -wal and -shm files there (give the user that runs partnerkit write access to it)")
    return str(exc)


def connect(path: str | os.PathLike, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS,
            short_lock_waits: bool = False, lock_wait: LockWait | None = None,
            wal_autocheckpoint: int | None = None) -> Database:
    """Open (creating with mode 0600 if needed) the SQLite file with partnerkit's pragmas, unmigrated.

    `short_lock_waits`: a connection for write transactions only (the receiver's). Its BEGIN waits for
    the write lock in short steps up to `busy_timeout_ms` (see _begin_immediate), and SQLite's own
    busy handler is off, so any other statement meeting a lock fails at once: read elsewhere.
    `lock_wait`: a command's connection. Its BEGIN waits in steps too, and says so once a wait (LockWait);
    its other statements keep SQLite's handler with the same timeout.
    `wal_autocheckpoint`: the WAL size, in pages, at which a commit on this connection checkpoints (SQLite's
    default is 1000); the receiver's request connections raise it to a backstop and checkpoint in a thread
    of their own instead (`wal_checkpoint`; receiver.state.Housekeeper)."""
    file = Path(path)
    try:
        if str(file) != ":memory:":
            _create_private(file)
            _refuse_read_only(file)
        conn = sqlite3.connect(str(file), timeout=busy_timeout_ms / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        _enable_wal(conn, busy_timeout_ms)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        if wal_autocheckpoint is not None:
            conn.execute(f"PRAGMA wal_autocheckpoint = {int(wal_autocheckpoint)}")
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open database {str(file)!r}: {_open_failure(file, exc)}") from exc
    db = sqlite_utils.Database(conn)
    db._pk_lock = threading.RLock()  # the handle's transaction lock (module docstring; _lock_of)
    db._pk_owner = None  # the thread whose transaction is open on the handle, if any
    if short_lock_waits:
        try:
            conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open database {str(file)!r}: {exc}") from exc
        db.short_lock_wait_ms = int(busy_timeout_ms)  # read by transaction(): see _begin_immediate
    elif lock_wait is not None:
        db.lock_wait, db.lock_wait_ms = lock_wait, int(busy_timeout_ms)
    return db


def open_db(path: str | os.PathLike, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS,
            short_lock_waits: bool = False, lock_wait: LockWait | None = None) -> Database:
    """Open the database and bring its schema up to date (safe in many processes at once)."""
    from partnerkit.store.migrations import migrate

    db = connect(path, busy_timeout_ms=busy_timeout_ms, short_lock_waits=short_lock_waits, lock_wait=lock_wait)
    migrate(db)
    return db


def wal_checkpoint(db: Database) -> tuple[int, int, int]:
    """One PASSIVE WAL checkpoint, which never waits for or blocks a writer: (busy, frames in the WAL,
    frames checkpointed)."""
    busy, frames, done = db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return busy, frames, done


def database_file(db: Database | sqlite3.Connection) -> str | None:
    """The file behind a store handle (or its connection), or None for an in-memory one."""
    conn = db.conn if isinstance(db, Database) else db
    path = next((f for _, name, f in conn.execute("PRAGMA database_list") if name == "main"), "")
    return path or None


def _begin_immediate(db: Database) -> None:
    """BEGIN IMMEDIATE; on a `short_lock_waits` or `lock_wait` connection, waiting for the lock in short steps.

    SQLite's own busy handler sleeps 1, 2, 5, 10, 15 ... ms between tries. A webhook's transaction
    holds the write lock for about a tenth of a millisecond, so a gunicorn worker that found it
    taken slept ten times longer than it had to wait: with two workers at full load one BEGIN in
    eight collided, 0.18 ms per delivery on average, the worker idle while the lock was free
    (docs/receiver.md, "Benchmark"). On a connection opened with `short_lock_waits` (SQLite's
    handler off) the wait starts at 50 us and doubles up to 2 ms, until the busy timeout: a short
    hold costs a short wait and a long one (a bulk sync) a few hundred cheap tries a second. Other
    connections keep SQLite's handler (switching it off and on around each BEGIN cost two
    statements SQLite re-prepared after every other process's commit), except a command's
    (`lock_wait`): its handler is off for the BEGIN only, so that the same steps (up to 20 ms: the
    receiver's 2 ms steps win the lock first) can say, after LOCK_NOTICE_AFTER_S, that it waits: once
    per call, one wait. The next BEGIN that waits that long is a new wait and says so again (a long
    command waiting a second time minutes later would otherwise look hung); one that gets the lock
    sooner says nothing.
    """
    conn = db.conn
    timeout_ms = getattr(db, "short_lock_wait_ms", None)
    lock_wait: LockWait | None = getattr(db, "lock_wait", None)
    if not timeout_ms and lock_wait is None:
        conn.execute("BEGIN IMMEDIATE")
        return
    longest = _LONGEST_PAUSE_S
    if lock_wait is not None:
        timeout_ms, longest = db.lock_wait_ms, _LONGEST_WAITED_PAUSE_S
        conn.execute("PRAGMA busy_timeout = 0")
    try:
        deadline, pause, noticed = None, _FIRST_PAUSE_S, False
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline, notice_at = now + timeout_ms / 1000, now + LOCK_NOTICE_AFTER_S
                elif now >= deadline:
                    raise
                if lock_wait is not None and now >= notice_at and not noticed:
                    noticed = True  # once per wait: this BEGIN's; the handle's next long wait says so again
                    lock_wait.notice(timeout_ms / 1000, database_writer(database_file(db)))
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, longest)
    finally:
        if lock_wait is not None:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")


def is_busy(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it was raised from) is another process's lock held past the busy timeout:
    a DatabaseBusy, or SQLite's SQLITE_BUSY ("database is locked") met outside `transaction()`."""
    seen = 0
    while exc is not None and seen < 8:  # bounded: a chain of causes is short
        if isinstance(exc, DatabaseBusy):
            return True
        if isinstance(exc, sqlite3.OperationalError) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY:
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


# SQLite's answers when the file cannot take a write at all: its filesystem is full (SQLITE_FULL, "database or
# disk is full"), read-only (SQLITE_READONLY, "attempt to write a readonly database"), or failing the write
# (SQLITE_IOERR, "disk I/O error": what a filesystem the kernel remounted read-only under an open database gives,
# and a -shm file that cannot grow on a full disk). Unlike a lock, waiting does not end them: a person frees
# space or remounts the filesystem.
_NO_ROOM = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR)


def is_unwritable(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it was raised from) is SQLite refusing a write because PARTNERKIT_DB's filesystem is
    full, read-only or failing (`_NO_ROOM`), not because of a lock or a bad statement."""
    seen = 0
    while exc is not None and seen < 8:  # bounded: a chain of causes is short
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _NO_ROOM:
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


def begin(db: Database, *, immediate: bool = True, failing: str = "cannot start a transaction") -> None:
    """BEGIN IMMEDIATE (or a plain BEGIN), waiting for the write lock as the handle waits (`_begin_immediate`:
    a command's says so after LOCK_NOTICE_AFTER_S); a wait that ran out is DatabaseBusy, any other failure
    StorageError, each message starting with `failing`. `transaction()` begins with it, and so does a
    transaction run by hand inside `holding(db)` (a migration's)."""
    try:
        if immediate:
            _begin_immediate(db)
        else:
            db.conn.execute("BEGIN")
    except sqlite3.Error as exc:
        if is_busy(exc):
            raise _gave_up(db, exc, failing) from exc
        raise StorageError(f"{failing}: {exc}") from exc


def _gave_up(db: Database, exc: sqlite3.Error, failing: str) -> DatabaseBusy:
    """The DatabaseBusy for a BEGIN that waited its whole busy timeout; a command's says what that means."""
    lock_wait: LockWait | None = getattr(db, "lock_wait", None)
    if lock_wait is None:
        return DatabaseBusy(f"{failing}: {exc}")
    return DatabaseBusy(f"{failing}: the database stayed locked for {db.lock_wait_ms / 1000:.0f} s "
                        f"({database_writer(database_file(db))}); nothing was written by this step; "
                        f"{lock_wait.gave_up}")


def _lock_of(db: Database) -> threading.RLock:
    """The handle's transaction lock; made once for a handle `connect` did not make (a fork's own
    sqlite_utils.Database). Re-entrant: a thread that opens a transaction inside its own gets
    SQLite's "within a transaction" error, as before, rather than waiting for itself for ever."""
    lock = getattr(db, "_pk_lock", None)
    if lock is None:
        with _NEW_LOCK:
            lock = getattr(db, "_pk_lock", None)
            if lock is None:
                lock = db._pk_lock = threading.RLock()
    return lock


@contextmanager
def holding(db: Database) -> Iterator[sqlite3.Connection]:
    """Hold the handle's transaction lock for a BEGIN ... COMMIT run by hand (migrations, the readiness
    probe): no other thread's transaction on the handle runs meanwhile. `transaction()` does this itself."""
    lock = _lock_of(db)
    with lock:
        outer, db._pk_owner = getattr(db, "_pk_owner", None), threading.get_ident()
        try:
            yield db.conn
        finally:
            db._pk_owner = outer


def in_transaction(db: Database) -> bool:
    """True when the calling thread has a transaction open on the handle: a store function joins it
    rather than opening its own. Another thread's open transaction is not the caller's (its own
    `transaction()` waits for that one to end)."""
    if not db.conn.in_transaction:
        return False
    owner = getattr(db, "_pk_owner", None)
    return owner is None or owner == threading.get_ident()  # None: a BEGIN issued by hand, the caller's


def run_in_transaction(db: Database, work: Callable[[sqlite3.Connection], T]) -> T:
    """`work(conn)` in the calling thread's open transaction on the handle (`in_transaction`), else in one of
    its own (`transaction(db)`); its result. How a store function joins its caller's transaction."""
    if in_transaction(db):
        return work(db.conn)
    with transaction(db) as conn:
        return work(conn)


@contextmanager
def transaction(db: Database, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
    """BEGIN (IMMEDIATE) ... COMMIT, rolled back on any exception; sqlite3 errors become StorageError.

    Holds the handle's lock from BEGIN to COMMIT: threads sharing one handle take turns (module docstring)."""
    conn = db.conn
    lock = _lock_of(db)
    lock.acquire()
    outer, db._pk_owner = getattr(db, "_pk_owner", None), threading.get_ident()
    try:
        begin(db, immediate=immediate)
        try:
            yield conn
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"database write failed: {exc}") from exc
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise StorageError(f"database commit failed: {exc}") from exc
    finally:
        db._pk_owner = outer
        lock.release()
