"""Real processes for end-to-end tests: `partnerkit serve` under gunicorn on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

PARTNERKIT = str(Path(sys.executable).with_name("partnerkit"))


def deploy_gunicorn_config(monkeypatch) -> object:
    """gunicorn's Config as plain `gunicorn -c deploy/gunicorn.conf.py` would load it (no process started)."""
    from gunicorn.app.base import Application

    class Probe(Application):
        def init(self, parser, opts, args):
            return None

        def load(self):
            return None

    monkeypatch.setattr(sys, "argv", ["gunicorn"])
    probe = Probe()
    probe.load_config_from_file(str(Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py"))
    return probe.cfg


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
GUNICORN_CONF = str(Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py")
# gunicorn and its workers answering /healthz: seconds on a quiet machine, more beside other work; the bound only
# ends a start that never comes.
START_LIMIT_S = 60


class ServedReceiver:
    """`partnerkit serve --workers N` in a subprocess; output captured to a log file.

    `plain_gunicorn`: README "Deploy"'s other way instead, `gunicorn -c deploy/gunicorn.conf.py
    'receiver.app:create_app()'` (bind and workers through RECEIVER_BIND and RECEIVER_WORKERS), run in
    `cwd`, with a private PROMETHEUS_MULTIPROC_DIR beside the log unless `env` gives one."""

    def __init__(self, env: dict[str, str], log_path: Path, workers: int = 2, *, plain_gunicorn: bool = False,
                 cwd: Path | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}, **env}
        self._cwd = cwd
        if plain_gunicorn:
            metrics = log_path.with_name(log_path.name + ".metrics")
            metrics.mkdir(exist_ok=True)
            self._env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(metrics))
            self._env.update(RECEIVER_BIND=f"127.0.0.1:{self.port}", RECEIVER_WORKERS=str(workers))
            self._argv = [GUNICORN, "-c", GUNICORN_CONF, "receiver.app:create_app()"]
        else:
            self._argv = [PARTNERKIT, "serve", "--bind", f"127.0.0.1:{self.port}", "--workers", str(workers)]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "ServedReceiver":
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self._argv, env=self._env, stdout=self._log, stderr=subprocess.STDOUT,
                                        cwd=self._cwd)
        deadline = time.monotonic() + START_LIMIT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._log.close()
                raise RuntimeError(f"partnerkit serve exited: {self.log_path.read_text()}")
            try:
                if requests.get(self.base_url + "/healthz", timeout=0.5).status_code == 200:
                    return self
            except (requests.ConnectionError, requests.Timeout):  # a worker still booting: not up yet
                time.sleep(0.05)
        self.__exit__()  # never left running: __exit__ is not called when __enter__ raises
        raise RuntimeError(f"partnerkit serve did not come up in {START_LIMIT_S} s: {self.log()}")

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
