"""The demo's moving parts: working directory, sandbox (in-process), config file, receiver and worker.

The sandbox is imported here and nowhere else in partnerkit (besides `partnerkit sandbox`).
The receiver and the worker are the real commands, `partnerkit serve` (gunicorn) and
`partnerkit worker`, run as subprocesses with the demo's own config file; whatever PARTNERKIT_*
variables the user's shell has are ignored.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import requests

from partnerkit.config import Config, load_config
from partnerkit.demo.processes import Child, PidsFile, ProcessFailed, free_port, run_to_end
from partnerkit.timeutil import utcnow

MARKER = ".partnerkit-demo"
READY_TIMEOUT_S = 45.0  # gunicorn start on a busy 2-core machine
COMMAND_TIMEOUT_S = 60.0
ORDER_FULFILMENT_S = 160.0  # sandbox seconds
SANDBOX_CLIENT = "alpha"  # the seeded client whose public demo credentials the demo uses
# The sandbox clock starts this far behind real time and runs at 1x while the recharges are submitted,
# so the provider's created_at of each is within a minute of our submit time, as with a real provider
# (the poller ages a recharge from our submit time either way: reconcile/polling.py).
CLOCK_LEAD_IN = timedelta(seconds=30)


class DemoError(Exception):
    """A demo step failed; the message is the one-line reason printed to the user."""


@dataclass(frozen=True)
class Paths:
    """Where the demo keeps its state (all under the working directory)."""

    workdir: Path

    @property
    def env_file(self) -> Path:
        return self.workdir / "partnerkit.env"

    @property
    def db(self) -> Path:
        return self.workdir / "partnerkit.db"

    @property
    def reports(self) -> Path:
        return self.workdir / "reports"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def pids(self) -> Path:
        return self.workdir / "pids.json"


def prepare_workdir(workdir: Path) -> Paths:
    """Empty the working directory of a previous demo (killing what it left running), or create it."""
    workdir = Path(workdir).resolve()
    if workdir.exists() and not workdir.is_dir():
        raise DemoError(f"--workdir {workdir} exists and is not a directory")
    if workdir.exists() and any(workdir.iterdir()) and not (workdir / MARKER).exists():
        raise DemoError(f"--workdir {workdir} is not empty and was not made by `partnerkit demo`; "
                        "give an empty or new directory")
    paths = Paths(workdir)
    PidsFile.kill_stale(paths.pids)
    if workdir.exists():
        for entry in workdir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for directory in (workdir, paths.reports, paths.logs):
        directory.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("made by `partnerkit demo`; removed and recreated by the next run\n")
    return paths


class Stack:
    """Starts and stops the sandbox, the receiver and the worker of one demo run."""

    def __init__(self, paths: Paths, speed: float) -> None:
        self.paths = paths
        self.speed = speed
        self.pids = PidsFile(paths.pids)
        self.sandbox: Any = None
        self.alpha: Any = None
        self.receiver: Child | None = None
        self.worker: Child | None = None
        self.receiver_port = free_port()
        self.config: Config | None = None
        self.webhook_id: int | None = None

    # ---- sandbox --------------------------------------------------------------------------------

    @property
    def sandbox_url(self) -> str:
        return self.sandbox.base_url

    @property
    def receiver_url(self) -> str:
        return f"http://127.0.0.1:{self.receiver_port}"

    def start_sandbox(self) -> None:
        """The provider simulator in this process, on a free loopback port, its clock at 1x for now."""
        import sandbox  # only the demo and `partnerkit sandbox` load the simulator

        settings = sandbox.SandboxSettings(
            speed=1.0, start=utcnow() - CLOCK_LEAD_IN, allow_http_webhooks=True,
            # D of the fulfilment script: 4 real seconds at the default speed, so a partial delivery
            # is seen (and half its vouchers fetched) before the order completes at 2D.
            order_fulfilment_delay_s=ORDER_FULFILMENT_S)
        self.sandbox = sandbox.SandboxServer(settings).start()
        self.alpha = next(c for c in self.sandbox.clients if c.name == SANDBOX_CLIENT)

    def control(self, method: str, path: str, body: dict | None = None) -> Any:
        """Call one of the sandbox's control endpoints (/sandbox/...)."""
        response = requests.request(method, f"{self.sandbox_url}/sandbox/{path.lstrip('/')}", json=body, timeout=10)
        if response.status_code >= 400:
            raise DemoError(f"sandbox control {method} /sandbox/{path} answered {response.status_code}: "
                            f"{response.text[:200]}")
        return response.json()

    def set_speed(self, speed: float) -> None:
        self.control("PATCH", "settings", {"speed": speed})

    def sandbox_now(self) -> Any:
        return self.sandbox.clock.now()

    # ---- configuration --------------------------------------------------------------------------

    def write_config(self, extra: dict[str, str] | None = None) -> Config:
        """The demo's .env file (0600: it holds the voucher key); returns the Config it gives.

        `extra` adds settings (the soak benchmark adds a webhook token for its own load)."""
        values = {
            "PARTNERKIT_DB": str(self.paths.db),
            "PARTNERKIT_API_BASE_URL": self.sandbox_url,
            "PARTNERKIT_API_KEY": self.alpha.key,
            "PARTNERKIT_API_SECRET": self.alpha.secret,
            "PARTNERKIT_VOUCHER_KEY": secrets.token_urlsafe(32),
            "PARTNERKIT_REPORT_DIR": str(self.paths.reports),
            "PARTNERKIT_LOG_LEVEL": "INFO",
            **(extra or {}),
        }
        lines = ["# written by `partnerkit demo`: the sandbox's public demo credentials (client alpha),",
                 "# a voucher key generated for this run, and paths under this directory.",
                 "# Use it with: partnerkit --config <this file> <command>", ""]
        lines += [f"{name}={value}" for name, value in values.items()]
        fd = os.open(self.paths.env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        self.config = load_config(environ={}, config_file=self.paths.env_file)
        return self.config

    def child_env(self) -> dict[str, str]:
        """The environment of every child: the user's, without any PARTNERKIT_* setting."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def partnerkit_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "partnerkit", "--config", str(self.paths.env_file), *args]

    # ---- webhook, receiver, worker ---------------------------------------------------------------

    def run_command(self, *args: str) -> Any:
        """Run `partnerkit --config <demo env> ARGS` (with --format json) and return its parsed output."""
        try:  # a Ctrl-C or SIGTERM stops the command and the demo at once, not when the command ends
            done = run_to_end(f"partnerkit {' '.join(args[:2])}", self.partnerkit_argv(*args), self.child_env(),
                              COMMAND_TIMEOUT_S)
        except ProcessFailed as exc:
            raise DemoError(str(exc)) from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise DemoError(f"`partnerkit {' '.join(args[:2])}` failed (exit {done.returncode}): {last}")
        try:
            return json.loads(done.stdout)
        except ValueError as exc:
            raise DemoError(f"`partnerkit {' '.join(args[:2])}` printed no JSON: {done.stdout[:200]!r}") from exc

    def register_webhook(self) -> dict:
        """`partnerkit webhooks register` pointing at the receiver: the token is saved and accepted."""
        url = f"{self.receiver_url}{self.config.webhook_path if self.config else '/webhooks/partner'}"
        created = self.run_command("webhooks", "register", "--url", url, "--name", "partnerkit-demo",
                                   "--format", "json")
        self.webhook_id = int(created["id"])
        return created

    def start_receiver(self) -> Child:
        """`partnerkit serve --bind 127.0.0.1:<port> --workers 2`, ready when /readyz says so."""
        self.receiver = Child("receiver", self.partnerkit_argv("serve", "--bind", f"127.0.0.1:{self.receiver_port}",
                                                               "--workers", "2"),
                              self.child_env(), self.paths.logs / "receiver.log", self.pids).start()
        try:
            self.receiver.wait_http(f"{self.receiver_url}/readyz", READY_TIMEOUT_S)
        except RuntimeError as exc:
            raise DemoError(str(exc)) from exc
        self.receiver.note_group()
        return self.receiver

    def stop_receiver(self) -> None:
        if self.receiver is not None:
            self.receiver.stop()
            self.receiver = None

    def start_worker(self) -> Child:
        """`partnerkit worker`: polls recharges, fetches vouchers, syncs."""
        self.worker = Child("worker", self.partnerkit_argv("worker"), self.child_env(),
                            self.paths.logs / "worker.log", self.pids).start()
        return self.worker

    def check_children(self) -> None:
        """DemoError if the receiver or the worker has died."""
        for child in (self.receiver, self.worker):
            if child is not None:
                try:
                    child.check()
                except RuntimeError as exc:
                    raise DemoError(str(exc)) from exc

    def close(self) -> None:
        """Stop everything this run started: worker, receiver, then the sandbox."""
        for child in (self.worker, self.receiver):
            if child is not None:
                child.stop()
        self.worker = self.receiver = None
        if self.sandbox is not None:
            self.sandbox.stop()
            self.sandbox = None
