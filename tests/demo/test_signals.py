"""The demo's Ctrl-C handling (partnerkit.demo.signals): a signal is never lost, and is raised only where safe."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref

import pytest

from partnerkit.demo.signals import Interrupted, checkpoint, forget, interruptible, pause


class _Pool:
    """Stands for a urllib3 connection pool: something with a finalizer that runs Python code."""


def test_a_signal_that_lands_in_a_finalizer_is_still_raised_afterwards():
    with interruptible():
        pool = _Pool()
        weakref.finalize(pool, os.kill, os.getpid(), signal.SIGINT)
        del pool  # the finalizer runs here and the signal's handler right after the kill, inside it
        gc.collect()
        sum(range(1000))  # give the interpreter bytecodes at which a raising handler would have fired
        with pytest.raises(Interrupted) as caught:
            checkpoint()
    assert caught.value.signum == signal.SIGINT


def test_outside_a_pause_the_handler_only_notes_the_signal():
    with interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        total = sum(range(100_000))  # no exception in the middle of ordinary work
        with pytest.raises(Interrupted) as caught:
            pause(0)
    assert total == 4_999_950_000 and caught.value.signum == signal.SIGTERM


def test_a_pause_is_interrupted_at_once():
    # At once: 0.2 s, a little more on a busy machine. A pause that slept on would end after its 100 s, so
    # the bound is half of that: only the wrong behaviour reaches it (and inside pytest's 120 s timeout).
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    with interruptible():
        started = time.monotonic()
        timer.start()
        with pytest.raises(Interrupted):
            pause(100)
    timer.join()
    assert time.monotonic() - started < 50


def test_forget_ends_an_expected_interruption_and_the_old_handlers_come_back():
    before = signal.getsignal(signal.SIGINT)
    with interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))
        forget()
        checkpoint()  # nothing pending any more
    assert signal.getsignal(signal.SIGINT) is before
    checkpoint()  # a new block starts clean, and outside one nothing is pending
