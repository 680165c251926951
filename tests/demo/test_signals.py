"""The demo's Ctrl-C handling (partnerkit.demo.signals): a signal is never lost, and is raised only where safe."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

from partnerkit.demo.processes import run_to_end
from partnerkit.demo.signals import Interrupted, checkpoint, forget, interruptible, pause
from partnerkit.processes import alive


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


def _command(pid_file: Path, then: str) -> list[str]:
    """A command that writes its pid, then runs `then` (Python)."""
    return [sys.executable, "-c", f"import os, signal, sys, time, pathlib; "
                                  f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); {then}"]


def _pid_once_written(pid_file: Path) -> int:
    while not (pid_file.exists() and pid_file.read_text()):  # only a command that never starts stays here
        time.sleep(0.01)
    return int(pid_file.read_text())


def test_a_signal_while_a_command_runs_stops_the_command_and_the_wait_for_it(tmp_path):
    # The command would run 60 s and then leave a file: a wait that looked for the signal only when the command
    # ended would see it then, and the file would be there.
    pid_file, finished = tmp_path / "pid", tmp_path / "finished"
    argv = _command(pid_file, f"time.sleep(60); pathlib.Path({str(finished)!r}).write_text('ran to its end')")

    def signal_once_started() -> None:
        _pid_once_written(pid_file)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=signal_once_started, daemon=True)
    with interruptible():
        sender.start()
        with pytest.raises(Interrupted) as caught:
            run_to_end("a long command", argv, dict(os.environ), timeout_s=100)
    sender.join()
    assert caught.value.signum == signal.SIGTERM
    assert not finished.exists(), "the command was stopped, not waited for"
    assert not alive(int(pid_file.read_text())), "and it was reaped, not left running"


def test_a_command_that_failed_because_the_terminal_s_ctrl_c_reached_it_too_is_an_interruption(tmp_path):
    # Ctrl-C in a terminal signals its whole foreground group: the demo and the command it runs. The command
    # ends first (click's "Aborted!", exit 1): that is the user's Ctrl-C, not a failure of the command.
    argv = _command(tmp_path / "pid", "os.kill(os.getppid(), signal.SIGINT); print('Aborted!', file=sys.stderr); "
                                      "sys.exit(1)")
    with interruptible():
        with pytest.raises(Interrupted) as caught:
            run_to_end("a command", argv, dict(os.environ), timeout_s=100)
    assert caught.value.signum == signal.SIGINT


def test_a_command_is_not_started_after_a_signal_was_noted(tmp_path):
    pid_file = tmp_path / "pid"
    with interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(Interrupted):
            run_to_end("a command", _command(pid_file, "pass"), dict(os.environ), timeout_s=100)
    assert not pid_file.exists()


def test_without_a_signal_a_command_s_output_and_exit_code_come_back_whole(tmp_path):
    # Its output is longer than a pipe holds, and read across several of the wait's steps.
    argv = _command(tmp_path / "pid", "time.sleep(0.3); sys.stdout.write('x' * 200_000); "
                                      "sys.stderr.write('e' * 100_000); sys.exit(3)")
    with interruptible():
        done = run_to_end("a command", argv, dict(os.environ), timeout_s=100)
    assert (done.returncode, len(done.stdout), len(done.stderr)) == (3, 200_000, 100_000)
