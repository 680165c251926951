"""Process facts shared by the worker's lease, `partnerkit run` and the demo.

`alive(pid)`: whether a pid exists and is not a zombie; `holder_is_gone(holder)`: whether the
process behind a worker-lease holder id of this host has died (the worker's takeover and
`partnerkit status` both ask); `holder_alive(holder, since)`: whether it still runs, where this
process can tell (`partnerkit status` tells a worker that cannot write the database from a dead one);
`other_host(previous, holder)`: the host a lease was taken over from when it is not the taker's (the
worker's takeover warning and `partnerkit status` both ask). `die_with_parent`: a child process that
dies with its parent, however the parent dies (Linux's parent-death signal). `partnerkit run` starts
the gunicorn master with it, and each gunicorn worker arms it against its master: without it, a
SIGKILLed parent (the OOM killer, `kill -9`) leaves its children serving on and holding the port, so
the restarted receiver cannot bind it. `database_writer(database)`: who holds a database's write lock
(`write_lock_holder`, the kernel's lock table; `is_partnerkit`, its command line), as a command that waits
for it says.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import uuid
from pathlib import Path
from typing import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int | None = None) -> Callable[[], None] | None:
    """A function that has the calling process sent SIGTERM when `parent` dies, however it dies (Linux only).

    Used as a preexec_fn (`parent` defaults to this process, the one about to fork): prctl is
    looked up here, before the fork, so the child makes one system call between fork and exec,
    and the setting survives the exec of the gunicorn master. A forked child may call it with its
    parent's pid. None where the platform has no parent-death signal.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    expected = os.getpid() if parent is None else parent

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != expected:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return set_parent_death_signal


def alive(pid: int) -> bool:
    """True while `pid` exists in this pid namespace and is not a zombie (a killed, unreaped child)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, OverflowError):  # the latter: beyond any pid, so no such process
            return False
        except PermissionError:
            return True
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _pid_namespace() -> str:
    """This process's pid namespace id ("4026531836"), or "" where /proc does not say."""
    try:
        return os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
    except OSError:
        return ""


def new_holder() -> str:
    """A holder id for a process that records itself (the worker's lease, a receiver's gunicorn master):
    host:pid:pid-namespace:random, the form `holder_is_gone` and `holder_alive` read (the namespace tells
    containers apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_pid_namespace()}:{uuid.uuid4().hex[:8]}"


def holder_is_gone(holder: str) -> bool:
    """True only for a holder of this host and pid namespace whose process no longer exists.

    Anything else (another host, another container, an id in an older format, a pid now reused by
    some other process) counts as alive: the lease is then left to expire, never taken early.
    """
    parts = holder.split(":")
    namespace = _pid_namespace()
    if len(parts) != 4 or not namespace or parts[0] != socket.gethostname() or parts[2] != namespace:
        return False
    if not parts[1].isdigit() or int(parts[1]) == os.getpid():
        return False
    return not alive(int(parts[1]))


def holder_host(holder: str) -> str | None:
    """The host name a lease holder id begins with (`host:pid:pid-namespace:random`); None for an id without one."""
    host, colon, _ = holder.partition(":")
    return host if colon and host else None


def other_host(previous: str, holder: str) -> str | None:
    """The host of the lease holder `previous` when it is not `holder`'s host; None when both name the same
    host, or either names none.

    Host names as each holder's `socket.gethostname()` gave them: a container has its own (unless it shares
    the host's network), and a recreated container a new one."""
    before, now = holder_host(previous), holder_host(holder)
    return before if before is not None and now is not None and before != now else None


def _started_at(pid: int) -> float | None:
    """When `pid` started, in unix seconds (Linux /proc: boot time plus its start in clock ticks); None if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[-1].split()
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat; 20th after the ")"
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def holder_alive(holder: str, since: float | None = None) -> bool | None:
    """Whether the process behind a lease holder id still runs: True when it is of this host and pid namespace
    and its pid runs (and, when `since` is given, in unix seconds: when it took the lease, had started by then,
    so a pid reused by a later process is not the holder); False when it is of this host and namespace and
    not running so; None when this process cannot tell (another host or container, an older id format)."""
    parts = holder.split(":")
    namespace = _pid_namespace()
    if len(parts) != 4 or not namespace or parts[0] != socket.gethostname() or parts[2] != namespace:
        return None
    if not parts[1].isdigit():
        return None
    if not alive(int(parts[1])):
        return False
    if since is None:
        return True
    started = _started_at(int(parts[1]))
    return None if started is None else started <= since + 2  # the boot time is whole seconds


# The byte of a WAL database's `-shm` file whose lock is its write lock (SQLite's wal-index format: the lock bytes
# begin at offset 120, WAL_WRITE_LOCK first): the process holding it is the one writing.
_WAL_WRITE_LOCK = 120
# The top-level packages a partnerkit process is started from with `python -m` (gunicorn's master runs
# `-m receiver.gunicorn_app`), and the receiver's process title where gunicorn may retitle it (setproctitle).
_OUR_MODULES = ("partnerkit", "receiver", "reconcile")
_OUR_TITLE = "[partnerkit-receiver]"


def write_lock_holder(database: str | os.PathLike | None) -> int | None:
    """The pid of the process holding a WAL database's write lock, as the kernel's lock table (/proc/locks, Linux)
    shows it in this pid namespace; None where that cannot be told: no such table, no `-shm` file, no holder, a
    holder in another pid namespace (shown as pid 0 or not at all) or on another host. Reads only: it opens neither
    the database nor its `-shm` file (closing a descriptor of a file drops this process's own locks on it)."""
    if not database or str(database) == ":memory:":
        return None
    try:
        shm = os.stat(f"{database}-shm")
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    inode = f"{os.major(shm.st_dev):02x}:{os.minor(shm.st_dev):02x}:{shm.st_ino}"
    for line in table.splitlines():
        # "1: POSIX  ADVISORY  WRITE 4242 fe:00:2148691 120 120"; a waiter's line has "->" after the number.
        fields = line.split()
        if len(fields) != 8 or fields[1] != "POSIX" or fields[3] != "WRITE" or fields[5] != inode:
            continue
        start, end = fields[6], fields[7]
        if (start.isdigit() and int(start) <= _WAL_WRITE_LOCK
                and (end == "EOF" or (end.isdigit() and _WAL_WRITE_LOCK <= int(end)))):
            return int(fields[4]) if fields[4].isdigit() and int(fields[4]) > 0 else None
    return None


def is_partnerkit(argv: list[str]) -> bool:
    """Whether a command line is a partnerkit process: its console script (`partnerkit worker`, as the script
    itself or through its interpreter), `python -m` one of its packages, or the receiver's gunicorn retitled."""
    if any(_OUR_TITLE in arg for arg in argv[:1]):
        return True
    for i, arg in enumerate(argv[:3]):  # the program, or the script its interpreter runs
        if os.path.basename(arg) == "partnerkit":
            return True
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1].split(".")[0] in _OUR_MODULES:
            return True
    return False


def _command_line(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part] or None


def database_writer(database: str | os.PathLike | None) -> str:
    """Who is writing the database, and what that means, for a command that waits for its write lock: "another
    partnerkit process (pid 4242) is writing: ...", "another process (pid 4242: sqlite3), not partnerkit, is
    writing: ...", or, where the holder cannot be told (`write_lock_holder`), "another process is writing: ...",
    naming both kinds. A lock held by another connection of this very process is said so."""
    pid = write_lock_holder(database)
    argv = _command_line(pid) if pid is not None else None
    ours = "a big day's match, a backup, a prune or a key rewrap can hold it for seconds"
    if pid == os.getpid():
        return f"another connection of this process is writing: {ours}"
    if pid is None or argv is None:
        return (f"another process is writing: partnerkit's own ({ours}), or another program with the database "
                "open (a sqlite3 shell inside a transaction holds it until COMMIT or ROLLBACK there)")
    if is_partnerkit(argv):
        return f"another partnerkit process (pid {pid}) is writing: {ours}"
    return (f"another process (pid {pid}: {os.path.basename(argv[0])}), not partnerkit, is writing: it holds the "
            "lock until its transaction ends (in a sqlite3 shell, until COMMIT or ROLLBACK there)")
