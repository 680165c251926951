"""The demo's child processes: free loopback ports, start, wait until ready, stop (never an orphan);
and the short commands it runs, waited for so that a Ctrl-C stops them and the demo at once (`run_to_end`).

Each child runs in its own session, so it is the leader of its own process group: the gunicorn
master and its forked workers share that group, and one `killpg` reaches all of them even after a
worker has been re-parented. Ctrl-C in the terminal reaches only the demo (and a short command it
is running, in its group), which then stops its children in order. Every group id is written to a
pids file in the working directory, so a demo that was killed with SIGKILL is cleaned up by the
next run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

import requests

from partnerkit.demo.signals import checkpoint, pause
from partnerkit.processes import alive

STOP_TIMEOUT_S = 10.0  # gunicorn's graceful_timeout; then SIGKILL
COMMAND_POLL_S = 0.1  # how often the wait for a short command looks for a noted Ctrl-C or SIGTERM
COMMAND_STOP_S = 5.0  # an interrupted command: SIGINT, then SIGKILL after this long
OUR_COMMANDS = ("partnerkit", "receiver.gunicorn_app")  # what a stale pid must look like before we kill it


class ProcessFailed(RuntimeError):
    """A child exited early or never became ready; the message says which and where its log is."""


def free_port() -> int:
    """A port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def group_members(pgid: int) -> list[int]:
    """Live pids whose process group is `pgid` (empty where /proc is unavailable)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if os.getpgid(int(entry.name)) == pgid and alive(int(entry.name)):
                members.append(int(entry.name))
        except (ProcessLookupError, PermissionError, ValueError):
            continue
    return sorted(members)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class PidsFile:
    """`pids.json` in the working directory: every process group the demo started, by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, list[int]] = {}

    def record(self, name: str, pids: list[int]) -> None:
        known = self.groups.setdefault(name, [])
        known.extend(p for p in pids if p not in known)
        self.path.write_text(json.dumps(self.groups, indent=1) + "\n", encoding="utf-8")

    @staticmethod
    def kill_stale(path: Path) -> list[int]:
        """Kill what a previous, killed demo left running (only processes that are still ours)."""
        try:
            groups = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        killed = []
        for pid in sorted({p for pids in groups.values() for p in pids if isinstance(p, int)}):
            if alive(pid) and any(c in _command_line(pid) for c in OUR_COMMANDS):
                try:
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        continue
                killed.append(pid)
        return killed


class Child:
    """One `partnerkit ...` subprocess in its own process group, output to a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path, pids: PidsFile,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.pids = pids
        self.cwd = cwd
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> "Child":
        """Start the process (appending to its log)."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.cwd, start_new_session=True)
        self.pids.record(self.name, [self.process.pid])
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check(self) -> None:
        """Raise ProcessFailed if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            code = self.process.returncode
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
            raise ProcessFailed(f"{self.name} {how}; last line of {self.log_path}: {self.last_log_line()}")

    def last_log_line(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "(no log)"
        return lines[-1][:200] if lines else "(empty log)"

    def note_group(self) -> None:
        """Record the group's current members (e.g. gunicorn's workers) in the pids file."""
        if self.pid is not None:
            self.pids.record(self.name, group_members(self.pid))

    def wait_http(self, url: str, timeout_s: float, *, tick: Callable[[], None] = lambda: None) -> None:
        """Wait until GET url answers 200; ProcessFailed on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            try:
                if requests.get(url, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            tick()
            pause(0.1)
        raise ProcessFailed(f"{self.name} did not answer {url} within {timeout_s:.0f} s; see {self.log_path}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the whole group, wait, then SIGKILL whatever is left of it."""
        if self.process is None:
            return
        pgid = self.process.pid
        members = group_members(pgid)
        self.pids.record(self.name, members)
        if self.process.poll() is None or members:
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and (self.process.poll() is None or group_members(pgid)):
                time.sleep(0.05)
            if self.process.poll() is None or group_members(pgid):
                _signal_group(pgid, signal.SIGKILL)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        for pid in members:  # a member that left the group (setsid) is still ours
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.process = None


def run_to_end(name: str, argv: list[str], env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run a short command (a `partnerkit ...` the demo calls, e.g. `orders create`), its output captured.

    Unlike subprocess.run, its wait ends at a Ctrl-C or SIGTERM the demo noted (signals.checkpoint, every
    COMMAND_POLL_S): the command is stopped (SIGINT, as Ctrl-C in a terminal stops it) and Interrupted raised.
    A command takes seconds on a busy machine and the demo runs several in a row, so waiting for their ends
    kept the demo, and what it started, running for seconds after the user asked it to stop. A command that
    failed because the terminal's Ctrl-C reached it too (it is in the demo's process group) raises
    Interrupted as well, not its own failure. ProcessFailed, naming the command as `name`, after `timeout_s`."""
    checkpoint()  # noted before: nothing more is started
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:  # communicate again after its timeout loses no output (the subprocess documentation)
                stdout, stderr = process.communicate(timeout=COMMAND_POLL_S)
                break
            except subprocess.TimeoutExpired:
                checkpoint()
                if time.monotonic() >= deadline:
                    raise ProcessFailed(f"`{name}` did not finish within {timeout_s:.0f} s") from None
    except BaseException:
        _end_command(process)
        raise
    checkpoint()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _end_command(process: subprocess.Popen) -> None:
    """Stop an unfinished command as Ctrl-C does (its own clean-up runs), SIGKILL if it lingers; reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=COMMAND_STOP_S)
            return
        except subprocess.TimeoutExpired:
            process.kill()
    process.communicate()


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass
