"""Ctrl-C and SIGTERM in the demo: noted at once, raised only where the demo waits.

A handler that raises runs between any two bytecodes of the main thread. Landing inside a weakref
finalizer (urllib3 closing a connection pool), its exception was printed and dropped by Python, and
the demo ran on to exit 0; landing between a BEGIN and the `try` that rolls it back, it left a
transaction open. So the handler only notes the signal, and raises `Interrupted` itself only while
the demo sleeps in `pause`. Everywhere else the signal is raised at the next `pause` or
`checkpoint`: the demo's waits poll every 0.1-1 s, a command it runs (`partnerkit orders create`,
seconds on a busy machine) is waited for in 0.1 s steps and stopped (`processes.run_to_end`), each
in-process step of a series (a recharge, a day's reconciliation) begins with a checkpoint, and
`run_demo` checks once more before it reports success. So the demo stops within one such step of
the signal, never at the end of a series of them.
"""

from __future__ import annotations

import signal
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Iterator


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: stop everything and exit 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_pending: int | None = None  # the first signal received and not yet raised
_sleeping = False  # the main thread is inside pause(): raising there is safe


def _note(signum: int, _frame: object) -> None:
    global _pending
    if _pending is None:
        _pending = signum
    if _sleeping:
        raise Interrupted(_pending)


def checkpoint() -> None:
    """Raise Interrupted if a signal arrived since the handlers were installed."""
    if _pending is not None:
        raise Interrupted(_pending)


def forget() -> None:
    """The signal was the expected end (--keep-running): not an interruption any more."""
    global _pending
    _pending = None


def pause(seconds: float) -> None:
    """time.sleep that a signal interrupts at once (and that raises one noted earlier)."""
    global _sleeping
    checkpoint()
    _sleeping = True
    try:
        time.sleep(seconds)
    finally:
        _sleeping = False


@contextmanager
def _handlers(handler: Callable | int) -> Iterator[None]:
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def interruptible() -> Iterator[None]:
    """Note SIGINT and SIGTERM for checkpoint()/pause() inside the block; the old handlers after it."""
    global _pending, _sleeping
    _pending, _sleeping = None, False
    try:
        with _handlers(_note):
            yield
    finally:
        _sleeping = False


def ignored() -> AbstractContextManager[None]:
    """SIGINT and SIGTERM ignored inside the block (a second Ctrl-C must not leave children behind)."""
    return _handlers(signal.SIG_IGN)
