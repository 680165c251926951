"""The receiver under real gunicorn with two workers: dedup across processes, metrics, logs, start-up."""

from __future__ import annotations

import gc
import os
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from partnerkit.store import open_db
from receiver.gunicorn_app import gunicorn_options
from tests.receiver.conftest import TOKEN, VOUCHER_KEY, envelope, signed_headers
from tests.receiver.servers import PARTNERKIT, ServedReceiver, deploy_gunicorn_config


def env_for(tmp_path, **extra):
    return {"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
            "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY, **extra}


def test_same_event_to_two_workers_at_once_is_accepted_once(tmp_path):
    events = 40
    # DEBUG: each delivery's JSON line (accepted and duplicate ones are DEBUG) is checked below too.
    with ServedReceiver(env_for(tmp_path, PARTNERKIT_LOG_LEVEL="DEBUG"), tmp_path / "serve.log") as served:
        url = served.base_url + "/webhooks/partner"
        results: dict[str, list[str]] = {f"evt_{i}": [] for i in range(events)}

        def deliver_twice(event_id: str) -> None:
            body = envelope(event_id, order_id=int(event_id.split("_")[1]) + 1)
            barrier = threading.Barrier(2)

            def one() -> None:
                session = requests.Session()  # a connection each: gunicorn hands them to either worker
                barrier.wait()
                response = session.post(url, data=body, headers=signed_headers(body, X_Request_ID=event_id), timeout=10)
                assert response.status_code == 200
                results[event_id].append(response.json()["status"])

            pair = [threading.Thread(target=one) for _ in range(2)]
            for t in pair:
                t.start()
            for t in pair:
                t.join()

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(deliver_twice, results))
        metrics = "".join(requests.get(served.base_url + "/metrics", timeout=5).text for _ in range(4))
        # Outside the webhook's POST, Flask's error pages are JSON under gunicorn too (Allow kept).
        missing, wrong_method = requests.get(served.base_url + "/nope", timeout=5), requests.get(url, timeout=5)
    log = served.log()
    assert all(sorted(r) == ["accepted", "duplicate"] for r in results.values()), results
    assert (missing.status_code, missing.headers["Content-Type"], missing.text) == (
        404, "application/json", '{"status":"not_found"}\n')
    assert (wrong_method.status_code, wrong_method.json()) == (405, {"status": "method_not_allowed"})
    assert "POST" in wrong_method.headers["Allow"]
    db = open_db(tmp_path / "pk.db")
    assert db.execute("SELECT COUNT(*), SUM(duplicate_count) FROM inbox").fetchone() == (events, events)
    assert db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone() == (events,)
    # Counters are summed over both workers whichever one answers the scrape.
    assert metrics.count(f'partnerkit_webhook_events_total{{outcome="accepted"}} {float(events)}') == 4
    assert metrics.count(f'partnerkit_webhook_events_total{{outcome="duplicate"}} {float(events)}') == 4
    # Access and application logs: request and event ids, never a token or a signature.
    assert '"POST /webhooks/partner" 200' in log and '"event_id": "evt_3"' in log
    assert log.count('"msg": "webhook"') == 2 * events
    assert TOKEN not in log and not re.search(r"[0-9a-f]{64}", log)  # no token, no signature
    # A first start creates the database, and says so once (a mistyped PARTNERKIT_DB would too).
    assert log.count(f"warning: database {str(tmp_path / 'pk.db')!r} (PARTNERKIT_DB, from the environment) did not "
                     "exist and was created (a first start)") == 1


def test_a_first_start_names_the_database_before_the_voucher_key_file_it_generates(tmp_path):
    """The voucher key line came first, then the database's: every other command names the database first."""
    env = {k: v for k, v in env_for(tmp_path).items() if k != "PARTNERKIT_VOUCHER_KEY"}
    with ServedReceiver(env, tmp_path / "serve.log", workers=1) as served:
        pass
    lines = [line for line in served.log().splitlines() if not line.startswith("{")]  # not gunicorn's JSON lines
    assert lines[0].startswith(f"warning: database {str(tmp_path / 'pk.db')!r} (PARTNERKIT_DB, from the environment) "
                               "did not exist and was created (a first start)"), lines
    assert lines[1].startswith("PARTNERKIT_VOUCHER_KEY is not set: generated a voucher key in "), lines
    assert lines[2].startswith("partnerkit receiver on http://127.0.0.1:"), lines


def test_serve_refuses_to_start_without_a_token(tmp_path):
    env = {k: v for k, v in env_for(tmp_path).items() if k != "PARTNERKIT_WEBHOOK_TOKENS"}
    result = subprocess.run([PARTNERKIT, "serve", "--bind", "127.0.0.1:1"], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("Error: no webhook token is accepted")
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [], "a refused start leaves no database (nor a key file) behind"


def test_serve_on_a_file_that_is_no_database_leaves_no_key_file_beside_it(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("PARTNERKIT_DB pointed here by mistake\n" * 200)
    env = {k: v for k, v in env_for(tmp_path, PARTNERKIT_DB=str(notes)).items() if k != "PARTNERKIT_VOUCHER_KEY"}
    result = subprocess.run([PARTNERKIT, "serve", "--bind", "127.0.0.1:1"], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].endswith("file is not a database")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"], "no voucher key generated for it"


@pytest.mark.parametrize("command", [["serve", "--bind"], ["sandbox", "--port"]])
def test_a_port_in_use_is_one_line_at_once(tmp_path, command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([PARTNERKIT, *command, f"127.0.0.1:{port}" if command[0] == "serve" else str(port)],
                                env=env_for(tmp_path), capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    # This one line and nothing else: no gunicorn started (its banner) and so none of its five "Connection in
    # use" retries a second apart; what was printed says so, where a clock on a busy machine could not.
    assert result.stderr == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == [], "a refused start leaves no database behind"


def test_each_worker_freezes_what_it_loaded_so_full_collections_skip_it():
    hook = gunicorn_options()["post_worker_init"]
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        hook(None)  # gunicorn passes the worker; the hook does not need it
        assert gc.get_freeze_count() > 1000  # the modules, the app and its libraries
    finally:
        gc.unfreeze()


def test_plain_gunicorn_config_installs_the_same_worker_hook(monkeypatch):
    assert deploy_gunicorn_config(monkeypatch).post_worker_init is gunicorn_options()["post_worker_init"]


def test_a_receiver_killed_with_sigkill_leaves_no_metrics_directory_behind_after_a_restart(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    (temp / f"partnerkit-metrics-{dead_pid}-old").mkdir()
    (temp / f"partnerkit-metrics-{dead_pid}-old" / "counter_1.db").write_bytes(b"\0" * 64)
    kept = [f"partnerkit-metrics-{os.getpid()}-live", "partnerkit-metrics-nopid", "unrelated-dir"]
    for name in kept:
        (temp / name).mkdir()
    env = env_for(tmp_path, TMPDIR=str(temp))
    first = ServedReceiver(env, tmp_path / "first.log", workers=1)
    with first:
        master = first.process.pid
        assert sorted(p.name for p in temp.iterdir() if str(master) in p.name) != []
        assert not (temp / f"partnerkit-metrics-{dead_pid}-old").exists(), "a dead master's directory is removed"
        first.process.kill()  # SIGKILL: gunicorn's on_exit never runs
        first.process.wait()
        deadline = time.monotonic() + 30  # a worker on a busy machine following its master
        while time.monotonic() < deadline and _listening(first.port):
            time.sleep(0.05)  # its worker follows its master
    left = [p.name for p in temp.iterdir() if p.name.startswith(f"partnerkit-metrics-{master}-")]
    assert len(left) == 1, "the killed master left its directory"
    with ServedReceiver(env, tmp_path / "second.log", workers=1) as second:
        assert requests.get(second.base_url + "/readyz", timeout=5).status_code == 200
        assert not (temp / left[0]).exists(), "the next start removed it"
        assert all((temp / name).exists() for name in kept), "live, old-style and foreign directories stay"


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
