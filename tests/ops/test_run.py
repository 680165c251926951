"""`partnerkit run`: receiver and worker under one command, stopped cleanly by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from partnerkit.store import open_db
from partnerkit.store.locks import current
from receiver.signature import sign

TOKEN = "run-test-webhook-token-0123"
LEASE_LIMIT_S = 60  # the worker half starting and taking its lease on a busy machine: only a broken run gets here


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"partnerkit run exited early with {process.returncode}"
        try:
            if requests.get(url, timeout=0.5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never became ready")


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.fixture
def run_env(sandbox_server, tmp_path):
    client = sandbox_server.clients[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env.update({
        "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"),
        "PARTNERKIT_API_BASE_URL": sandbox_server.base_url,
        "PARTNERKIT_API_KEY": client.key,
        "PARTNERKIT_API_SECRET": client.secret,
        "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
        "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"),
    })
    return env


def _start(env: dict, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "partnerkit", "run", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_run_serves_works_and_stops_cleanly_on_sigterm(run_env, tmp_path):
    port = _free_port()
    process = _start(run_env, port)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        body = json.dumps({"event_id": "evt_run_1", "event_type": "order.created", "created_at": "2026-11-21T10:00:00Z",
                           "data": {"id": 9001, "status": "PENDING"}}).encode()
        ts = str(int(time.time()))
        answer = requests.post(f"http://127.0.0.1:{port}/webhooks/partner", data=body, timeout=5,
                               headers={"X-Timestamp": ts, "X-Signature": sign(TOKEN, ts, body),
                                        "Content-Type": "application/json"})
        assert answer.json() == {"status": "accepted"}
        db = open_db(run_env["PARTNERKIT_DB"])
        deadline = time.monotonic() + LEASE_LIMIT_S
        while current(db, "worker") is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the worker half takes the lease once it starts
        assert current(db, "worker") is not None
        gunicorn_master = _children(process.pid)
        assert gunicorn_master, "the receiver runs as a child gunicorn master"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
    for pid in gunicorn_master:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert current(db, "worker") is None  # the lease was released on the way out, not left to expire
    assert db.execute("SELECT count(*) FROM inbox WHERE dedup_key = 'evt_run_1'").fetchone()[0] == 1


def test_run_exits_non_zero_when_the_receiver_dies(run_env):
    port = _free_port()
    process = _start(run_env, port)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        for pid in _children(process.pid):
            os.kill(pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    assert "receiver exited" in stderr


def test_run_refuses_without_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env["PARTNERKIT_DB"] = str(tmp_path / "x.db")
    result = subprocess.run([sys.executable, "-m", "partnerkit", "run"], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip() == ("Error: PARTNERKIT_API_BASE_URL is not set; give the provider's base URL "
                                     "without /api/v1, e.g. https://api.provider.example")


def test_a_killed_run_takes_its_receiver_along_and_restarts_at_once(run_env, tmp_path):
    """SIGKILL (the OOM killer, a hard stop) leaves no orphaned gunicorn holding the port or the lease."""
    port = _free_port()
    first = subprocess.Popen([sys.executable, "-m", "partnerkit", "run", "--bind", f"127.0.0.1:{port}",
                              "--workers", "1"], env=run_env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", first)
        master = _children(first.pid)
        receiver = master + [w for m in master for w in _children(m)]
        db = open_db(run_env["PARTNERKIT_DB"])
        deadline = time.monotonic() + LEASE_LIMIT_S
        while current(db, "worker") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        deadline = time.monotonic() + 60  # a graceful stop on a busy machine; only orphans reach the bound
        while any(Path(f"/proc/{pid}").exists() for pid in receiver) and time.monotonic() < deadline:
            time.sleep(0.1)  # gunicorn got SIGTERM from the kernel: a graceful stop
        orphans = [pid for pid in receiver if Path(f"/proc/{pid}").exists()]
    finally:
        try:
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert receiver and orphans == []
    assert current(db, "worker") is not None, "the killed run's lease was left behind"

    second = _start(run_env, port)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", second)
        # "At once" is what its log says below (the holder is gone, not expired); the bound is for a busy machine.
        deadline = time.monotonic() + LEASE_LIMIT_S
        while current(db, "worker").holder.split(":")[1] != str(second.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        holder = current(db, "worker").holder
        second.send_signal(signal.SIGTERM)
        _, stderr = second.communicate(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
    assert holder.split(":")[1] == str(second.pid), "the dead run's worker lease was taken over at once"
    assert second.returncode == 0, stderr
    assert "no longer running on this host; taking over" in stderr
    db.conn.close()
