"""The real stack for crash tests: the sandbox in this process, `partnerkit serve` (gunicorn) and
`partnerkit worker` as child processes on one SQLite file, and the means to kill them on cue.

Every child runs in its own session, so `stop()` reaches a gunicorn master and its workers with
one signal to that group, and nothing this module started outlives a test. `Gate` holds one
matching sandbox request until the test has killed the process that sent it: a kill that lands
while a provider call is in flight, every time, instead of by luck.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import requests

from partnerkit.config import Config, load_config
from partnerkit.store import open_db

VOUCHER_KEY = "Y3Jhc2gtdGVzdHMtdm91Y2hlci1rZXktMzItYnl0ZXM"  # base64 of 32 bytes, tests only
READY_TIMEOUT_S = 30.0
ORDER_EVENTS = ["order.created", "order.pending", "order.processing", "order.delivered",
                "order.partially_delivered", "order.failed", "order.cancelled"]


def free_port() -> int:
    """A port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate: Callable[[], Any], timeout: float, step: float = 0.1, what: str = "condition") -> Any:
    """Poll `predicate` until it is truthy (returned) or `timeout` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout:.0f} s")
        time.sleep(step)


def children(pid: int) -> list[int]:
    """Direct children of `pid` (gunicorn's workers, for its master)."""
    try:
        return sorted(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except OSError:
        return []


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an orphan's zombie may wait for a reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def open_sockets(pid: int) -> int:
    """How many sockets `pid` has open (a sync gunicorn worker: its listener, plus one per request)."""
    count = 0
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for entry in entries:
        try:
            count += os.readlink(f"/proc/{pid}/fd/{entry}").startswith("socket:")
        except OSError:
            continue
    return count


class Gate:
    """Holds one sandbox request matching METHOD and a path pattern (the first after `skip` matches).

    `held` is set while the request waits; the test kills its sender, then `open()`s the gate and
    the sandbox answers into a closed connection, as a provider does when its client died.
    `arm(skip)` sets the gate (again) for a later request; arm it just before waiting for it, since
    the sender's own timeout (10 s by default) ends a hold that nobody acts on.
    """

    def __init__(self, method: str, path: str, *, skip: int = 0, query: Callable[[dict], bool] | None = None,
                 max_hold_s: float = 30.0, armed: bool = True) -> None:
        self.method = method
        self.path = re.compile(path)
        self.query = query or (lambda args: True)
        self.max_hold_s = max_hold_s
        self.held = threading.Event()
        self._open = threading.Event()
        self._lock = threading.Lock()
        self.matches = 0
        self._hold_at: int | None = skip + 1 if armed else None

    def install(self, app: Any) -> None:
        """Register on the sandbox Flask app (before it serves its first request)."""
        app.before_request(self._before)

    def arm(self, skip: int = 0) -> None:
        """Hold the request that comes after `skip` more matching ones."""
        with self._lock:
            self.held.clear()
            self._open.clear()
            self._hold_at = self.matches + skip + 1

    def _before(self) -> None:
        from flask import request

        if request.method != self.method or not self.path.match(request.path) or not self.query(request.args):
            return
        with self._lock:
            self.matches += 1
            hold = self.matches == self._hold_at
        if hold:
            self.held.set()
            self._open.wait(self.max_hold_s)

    def wait_held(self, timeout: float) -> None:
        if not self.held.wait(timeout):
            raise AssertionError(f"no {self.method} {self.path.pattern} reached the sandbox in {timeout:.0f} s")

    def open(self) -> None:
        self._open.set()


class Child:
    """One `python -m partnerkit ...` process in its own session; output appended to a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = [sys.executable, "-m", "partnerkit", *args]
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> "Child":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL this process (only it, not its group) and reap it."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the group this child leads, then SIGKILL it; return the exit code."""
        if self.process is None:
            return None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=timeout)
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)  # a gunicorn worker left behind
                except ProcessLookupError:
                    pass
                break
            except subprocess.TimeoutExpired:
                continue
        return self.process.wait(timeout=10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class CrashStack:
    """Sandbox + receiver + worker on one database in `tmp_path`; `with` stops every process."""

    def __init__(self, tmp_path: Path, settings: Any, *, gates: tuple[Gate, ...] = (),
                 extra_env: dict[str, str] | None = None, db_path: Path | None = None,
                 report_dir: Path | None = None) -> None:
        from sandbox.testing import SandboxServer

        self.tmp_path = tmp_path
        self.sandbox = SandboxServer(settings)
        for gate in gates:
            gate.install(self.sandbox.app)
        self.alpha = self.sandbox.clients[0]
        self.port = free_port()
        self.receiver_url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
        self.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.env.update({
            "PARTNERKIT_DB": str(db_path or tmp_path / "partnerkit.db"),
            "PARTNERKIT_API_BASE_URL": self.sandbox.base_url,
            "PARTNERKIT_API_KEY": self.alpha.key,
            "PARTNERKIT_API_SECRET": self.alpha.secret,
            # The webhook below is created with credential_id 101: it is signed with alpha's signing secret.
            "PARTNERKIT_WEBHOOK_TOKENS": self.alpha.signing_secret,
            "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY,
            "PARTNERKIT_REPORT_DIR": str(report_dir or tmp_path / "reports"),
            "PARTNERKIT_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
        })
        self.config: Config = load_config(environ=self.env)
        self.receiver: Child | None = None
        self.workers: list[Child] = []
        self._db = None
        self._client = None

    # ---- parts -----------------------------------------------------------------------------------

    def __enter__(self) -> "CrashStack":
        self.sandbox.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for child in [*self.workers, self.receiver]:
            if child is not None:
                child.stop()
        if self._client is not None:
            self._client.close()
        if self._db is not None:
            self._db.conn.close()
            self._db = None
        self.sandbox.stop()

    @property
    def db(self):
        """The test's own connection to the shared database."""
        if self._db is None:
            self._db = open_db(self.config.db_path)
        return self._db

    @property
    def client(self):
        """A real PartnerClient (the test's calls share the persistent budget, like any process)."""
        if self._client is None:
            from partnerkit.client import PartnerClient

            self._client = PartnerClient(self.config, self.db, purpose="test")
        return self._client

    def register_webhook(self, path: str = "/webhooks/partner", **extra: Any) -> int:
        """Subscribe the receiver to every order event, signed with the credential's secret."""
        created = self.client.create_webhook(name="crash-tests", url=self.receiver_url + path, events=ORDER_EVENTS,
                                             credential_id=self.alpha.credential_id, **extra)
        return created.id

    def start_receiver(self, workers: int = 2) -> Child:
        """`partnerkit serve --workers N` (gunicorn); returns once /readyz answers 200."""
        self.receiver = Child("receiver", ["serve", "--bind", f"127.0.0.1:{self.port}", "--workers", str(workers)],
                              self.env, self.tmp_path / "receiver.log").start()

        def ready() -> bool:
            assert self.receiver is not None and self.receiver.alive(), self.receiver.log()[-2000:]
            try:
                return requests.get(self.receiver_url + "/readyz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, READY_TIMEOUT_S, 0.05, "receiver ready")
        wait_until(lambda: len(children(self.receiver.pid)) == workers, READY_TIMEOUT_S, 0.05, "gunicorn workers")
        return self.receiver

    def get(self, path: str) -> requests.Response:
        """GET a path of the receiver."""
        return requests.get(self.receiver_url + path, timeout=30)

    def gunicorn_workers(self) -> list[int]:
        assert self.receiver is not None
        return children(self.receiver.pid)

    def kill_gunicorn_worker_in_flight(self, timeout: float = 5.0) -> tuple[int, bool]:
        """SIGKILL a gunicorn worker, preferably one holding a request's connection; (pid, in_flight)."""
        pids = self.gunicorn_workers()
        baseline = {pid: open_sockets(pid) for pid in pids}
        deadline = time.monotonic() + timeout
        victim, in_flight = pids[0], False
        while time.monotonic() < deadline and not in_flight:  # bounded: a few thousand /proc reads
            for pid in pids:
                if open_sockets(pid) > baseline[pid]:
                    victim, in_flight = pid, True
                    break
        os.kill(victim, signal.SIGKILL)
        return victim, in_flight

    def start_worker(self) -> Child:
        """`partnerkit worker` as its own process."""
        worker = Child("worker", ["worker"], self.env, self.tmp_path / f"worker-{len(self.workers) + 1}.log").start()
        self.workers.append(worker)
        return worker

    @property
    def worker(self) -> Child:
        return self.workers[-1]

    # ---- the provider's side ----------------------------------------------------------------------

    def deliveries(self) -> list[Any]:
        """The sandbox's delivery records (copies of what matters), read under its lock."""
        state = self.sandbox.sandbox
        with state.lock:
            return [{"id": d.id, "event_id": d.event_id, "event_type": d.event_type, "order_id": d.order_id,
                     "status": d.status, "in_flight": d.in_flight, "attempts": [dict(a) for a in d.attempts]}
                    for d in state.deliveries.values()]

    def sandbox_orders(self) -> dict[int, Any]:
        state = self.sandbox.sandbox
        with state.lock:
            return {o.id: {"status": o.status, "codes": sorted(v.card_number for v in o.vouchers)}
                    for o in state.orders.values()}

    def sandbox_calls(self) -> dict[str, int]:
        return dict(self.sandbox.sandbox.calls)

    def sandbox_control(self, method: str, path: str, body: dict | None = None) -> Any:
        """One of the sandbox's control endpoints (/sandbox/...); AssertionError on a 4xx/5xx."""
        answer = requests.request(method, f"{self.sandbox.base_url}/sandbox/{path}", json=body, timeout=10)
        assert answer.status_code < 400, f"{method} /sandbox/{path}: {answer.status_code} {answer.text[:300]}"
        return answer.json()

    def run_partnerkit(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run a `partnerkit` command to completion with the stack's environment."""
        return subprocess.run([sys.executable, "-m", "partnerkit", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
