"""Whether the process sending an intent still runs: a lock it holds for the send, which dies with it.

`recharges submit` and `orders create` commit their intent (INTENT) before the request exists and store the
answer after. A row still INTENT is either a send in flight (its answer may still come) or one whose process
died (kill -9, the OOM killer, a reboot: its answer is lost, and the recharge or order may exist).
`partnerkit status`, `recharges locate` and the two holds (`reconcile.recharge_hold`,
`partnerkit.ordering.UnresolvedOrder`) tell them apart by this module:

- the sender takes a lock on one byte of `<database>-senders` at an offset drawn at random (`hold`) before
  its intent is committed, records the offset on the row (`sender_lock`, migration 15) with who it is
  (`sender`, "pid 4242 on web-1": for the messages only), and keeps the lock until its send is over, the
  answer stored or the intent left open for locate;
- a reader asks the kernel whether anybody holds that byte (`running`): True, the send is in flight;
  False, nobody will store its answer (its process died, or its send ended without resolving the row);
  None, this cannot be told: no offset on the row (written by an older release, or by a sender that could
  not take a lock), the file missing or unreadable, a platform without these locks. The callers then keep
  their time rules, which also bound how long a running sender is waited for (`partnerkit.status`).

Why a lock and not the pid: a pid, even with its start time from /proc or the host's boot id, can only be
checked in the pid namespace that wrote it. A `status` run in another container sharing the database volume
(or `docker exec` into a sibling) sees another process table, where the pid is missing or someone else's,
and from another host it means nothing. The kernel drops a lock when its holder dies, however it dies, and
every process that opens the file sees it, whatever its namespace: all containers of one host, and other
hosts over a network filesystem whose locks reach the server (NFSv4), where a dead client's locks last until
its lease runs out (about 90 s: "still running" meanwhile, which the time rule bounds). Where the
filesystem refuses these locks, `hold` returns None and the row carries no offset.

Why an open-file-description lock (Linux `F_OFD_SETLK`) and not `fcntl.lockf`: a POSIX lock belongs to
the process, so another thread of the same process (a fork placing orders from threads, a hold checked
beside a send) would see its sibling's lock as free, and closing any descriptor of the file drops them all.
Why a file of its own and not a byte of the database: SQLite's own locks are POSIX locks on the database
file, which opening and closing that file in this process would drop. Why a random offset and not the row's
id: SQLite gives the highest id again once its row is gone (a refused intent is removed), and a new sender
must never find its byte held by an old one. Never delete the file while partnerkit runs: a sender keeps its
lock on the file it opened, and readers would look at a new one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import socket
import struct
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

SUFFIX = "-senders"  # beside the database, as SQLite's -wal and -shm
# Offsets below 2**31: a lock server speaking 32-bit offsets (NFSv3's NLM) takes them too.
_OFFSETS = 2**31 - 1
_TRIES = 8  # offsets drawn before giving up (another sender holds one about never)
# `struct flock` of 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t, 0 for an OFD
# lock), padded to 32 bytes. Elsewhere (no F_OFD_* constants, or another layout) nothing is locked or read.
_FLOCK = struct.Struct("hhqqi4x")
_OFD = (sys.platform.startswith("linux") and hasattr(fcntl, "F_OFD_SETLK") and struct.calcsize("P") == 8
        and _FLOCK.size == 32)


def lock_file(database: str | os.PathLike | None) -> str | None:
    """The senders' lock file of a database file (None for an in-memory database)."""
    return None if not database or str(database) == ":memory:" else f"{database}{SUFFIX}"


def _byte(kind: int, offset: int) -> bytes:
    return _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0)


@dataclass
class Held:
    """A send's lock: `offset` and `who` go on its intent's row; `release` (or the process's death) frees it."""

    offset: int
    who: str
    _fd: int

    def release(self) -> None:
        """Free the lock (closing its only descriptor does); idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def hold(database: str | os.PathLike | None) -> Held | None:
    """Take a lock for one send; None when none can be taken (no such locks here, the file cannot be created):
    the intent then carries no offset, and readers keep the time rule. Never raises for that: the send must
    not fail because its liveness cannot be recorded."""
    path = lock_file(database)
    if path is None or not _OFD:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    for _ in range(_TRIES):
        offset = 1 + secrets.randbelow(_OFFSETS)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _byte(fcntl.F_WRLCK, offset))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                continue  # another sender holds this byte: draw again
            break  # the filesystem refuses these locks (ENOLCK, EINVAL): no fact
        return Held(offset, f"pid {os.getpid()} on {socket.gethostname()}", fd)
    os.close(fd)
    return None


@contextmanager
def holding(database: str | os.PathLike | None) -> Iterator[Held | None]:
    """`hold` for the length of a `with` block: the lock is freed however the block ends."""
    held = hold(database)
    try:
        yield held
    finally:
        if held is not None:
            held.release()


def running(database: str | os.PathLike | None, offset: int | None) -> bool | None:
    """Whether the sender that recorded `offset` still holds its lock: True (its send is in flight), False
    (nobody does), None (cannot be told: see the module docstring). Reads only: takes no lock, creates nothing."""
    path = lock_file(database)
    if offset is None or path is None or not _OFD:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # missing (deleted, or a copy of the database elsewhere) or unreadable: cannot tell
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _byte(fcntl.F_WRLCK, offset))
    except OSError:
        return None
    finally:
        os.close(fd)
    return _FLOCK.unpack(answer)[0] != fcntl.F_UNLCK


def row_running(database: str | os.PathLike | None, row: dict) -> bool | None:
    """`running` for an open intent's row (its `sender_lock`): None for a row whose state is not INTENT (its
    send is over, whoever sent it) or that carries no lock."""
    state = row.get("state", row.get("status"))
    return running(database, row.get("sender_lock")) if state == "INTENT" else None


def sending(command: str, alive: bool | None, who: str | None) -> str:
    """How an INTENT row stands, for a message: its `command` still running (`alive`), gone, or not known."""
    named = f" ({who})" if who else ""
    if alive is True:
        return f"its `{command}`{named} is still running, waiting for the provider's answer"
    if alive is False:
        # Killed while sending, or its answer came and could not be stored (a full disk: it printed the answer).
        return f"the `{command}` that recorded it{named} is no longer running; any answer it got was not stored"
    return f"not answered yet: another `{command}` may still be sending it, or its process died"
