"""The copies a backup or a restore writes beside their target while they work (`.NAME.backup-PID`,
`.NAME.restoring-PID`): each is held, under an exclusive flock, by the run writing it until it is renamed into
place, so that what a killed run left can be told from what a running one is writing, and removed by the next
run (partnerkit.store.backup, partnerkit.store.restore).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Callable


def hold(copy: Path, *, create: bool = False) -> int:
    """Open `copy` (created empty with mode 0600 when `create`, refusing one that exists) and lock it; return
    the descriptor, which holds the lock until it is closed. Close it only after SQLite closed the copy:
    closing a file drops the process's POSIX locks on it."""
    flags = os.O_CREAT | os.O_EXCL | os.O_RDONLY if create else os.O_RDONLY
    fd = os.open(copy, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_unless_held(copy: Path, remove: Callable[[Path], None]) -> bool | None:
    """Remove a copy a killed backup or restore left (`remove` takes its companions too), unless a running
    one holds its lock: True when removed, False when held, None when it was already gone."""
    try:
        fd = os.open(copy, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        remove(copy)
        return True
    finally:
        os.close(fd)
