"""Process facts shared by the worker's lease, `partnerkit run` and the demo.

`alive(pid)`: whether a pid exists and is not a zombie. `die_with_parent`: a child process that dies
with its parent, however the parent dies (Linux's parent-death signal). `partnerkit run` starts the gunicorn master with it, and each gunicorn worker arms it against its
master: without it, a SIGKILLed parent (the OOM killer, `kill -9`) leaves its children serving on
and holding the port, so the restarted receiver cannot bind it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
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
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]
