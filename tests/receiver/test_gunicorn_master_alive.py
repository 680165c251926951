"""`partnerkit status` names a receiver whose gunicorn master was killed, as it names a killed worker.

The master records itself when it is ready and marks itself stopped as it stops cleanly
(receiver.gunicorn_app's `when_ready` and `on_exit`; partnerkit.status._receiver); a master that never marked
itself stopped and whose process is gone was killed (kill -9 of `partnerkit serve` left no attention line:
only `last_webhook_age_s` grew).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from datetime import timedelta

from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import load_config
from partnerkit.status import collect, note_receiver_started, note_receiver_stopped
from partnerkit.store import meta, open_db, receivers
from partnerkit.timeutil import utcnow
from receiver.gunicorn_app import gunicorn_options
from tests.receiver.servers import ServedReceiver, deploy_gunicorn_config
from tests.receiver.test_gunicorn import env_for
from tests.reliability.crash_stack import alive, children, wait_until

KILLED = "is no longer running and did not stop cleanly"


def _status(env: dict[str, str]) -> tuple[int, dict]:
    """`partnerkit status --check --format json` on `env`'s database: its exit code and its object."""
    result = CliRunner().invoke(cli, ["status", "--check", "--format", "json"], env=env)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def _receiver_lines(status: dict) -> list[str]:
    return [line for line in status["attention"] if line.startswith("the receiver (")]


def test_status_names_a_killed_receiver_until_one_starts_again_and_not_after_a_clean_stop(tmp_path):
    env = env_for(tmp_path)
    with ServedReceiver(env, tmp_path / "first.log", workers=1) as first:
        master = first.process.pid  # `partnerkit serve` replaced itself with the gunicorn master
        code, running = _status(env)
        assert (code, running["receiver_running"], _receiver_lines(running)) == (0, True, [])
        [record] = running["receiver_masters"]
        assert (record["pid"], record["host"], record["bind"]) == (master, socket.gethostname(),
                                                                   [f"127.0.0.1:{first.port}"])
        assert record["running"] is True and record["stopped_at"] is None
        workers = children(master)
        assert workers, "the master's web worker"
        first.process.kill()  # SIGKILL the master: no on_exit
        first.process.wait()
        wait_until(lambda: not any(alive(pid) for pid in workers), timeout=60, step=0.1,
                   what="the killed master's web workers gone (their parent-death signal)")
        code, killed = _status(env)
    assert code == 1
    assert killed["receiver_running"] is False
    [line] = _receiver_lines(killed)
    assert line.startswith(f"the receiver (pid {master} on {socket.gethostname()}, bound to 127.0.0.1:{first.port}, "
                           f"started {record['started_at']}) {KILLED}: webhooks sent to it are not being received; "
                           "start it again (`partnerkit serve`")
    assert "`partnerkit webhooks retry --failed`" in line and "order catch-up" in line

    with ServedReceiver(env, tmp_path / "second.log", workers=1) as second:  # started again (another port here)
        code, again = _status(env)
        assert (code, again["receiver_running"], _receiver_lines(again)) == (0, True, [])
        assert [m["pid"] for m in again["receiver_masters"]] == [second.process.pid]  # the killed one superseded
    assert second.process.returncode == 0  # SIGTERM: gunicorn's own shutdown, on_exit included
    code, stopped = _status(env)
    assert (code, stopped["receiver_running"], stopped["attention"]) == (0, False, [])
    [record] = stopped["receiver_masters"]
    assert record["running"] is False and record["stopped_at"] is not None  # stopped cleanly, and when


def test_a_clean_stop_while_another_process_holds_the_write_lock_is_still_recorded(tmp_path):
    """A `systemctl stop` during the nightly match (which holds the write lock for seconds) was named as a kill:
    the stopping master gave up on the lock after the 5 s every other write waits, and `status --check` failed
    until a receiver started again. It waits up to STOP_MARK_WAIT_MS (20 s) for that one write."""
    env = env_for(tmp_path)
    config = load_config(environ=env)
    with ServedReceiver(env, tmp_path / "served.log", workers=1) as served:
        other = sqlite3.connect(config.db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's long write
        served.process.terminate()
        time.sleep(7)  # held past the 5 s; the master reached on_exit meanwhile and waits for the lock
        other.execute("COMMIT")
        other.close()
        assert served.process.wait(timeout=60) == 0
    assert "stop not recorded" not in served.log()
    code, stopped = _status(env)
    assert (code, stopped["receiver_running"], stopped["attention"]) == (0, False, [])
    [record] = stopped["receiver_masters"]
    assert record["stopped_at"] is not None


def test_plain_gunicorn_config_records_the_master_too(monkeypatch):
    cfg = deploy_gunicorn_config(monkeypatch)
    assert cfg.when_ready is gunicorn_options()["when_ready"]
    assert cfg.on_exit is gunicorn_options()["on_exit"]


def test_a_master_of_another_host_is_never_judged_and_the_records_stay_few(tmp_path):
    """No host can see another's processes: a master recorded elsewhere, never stopped, is no line here."""
    config = load_config(environ=env_for(tmp_path))
    db = open_db(config.db_path)
    now = utcnow()
    elsewhere = receivers.Master("other-box:4242:4026531836:feedf00d", ("0.0.0.0:8000",), now - timedelta(days=40))
    receivers.started(db, elsewhere, superseded=lambda m: False, now=elsewhere.started_at)
    status = collect(config, db)
    assert status["receiver_masters"][0]["running"] is None and status["receiver_running"] is None
    assert _receiver_lines(status) == []

    # Masters of this host (this process stands in for each), stopped cleanly: kept 30 days, at most 5 in all.
    def served_and_stopped(age_days: int) -> None:
        holder = note_receiver_started(db, ["127.0.0.1:8000"], now=now - timedelta(days=age_days))
        note_receiver_stopped(db, holder, now=now - timedelta(days=age_days))

    served_and_stopped(35)
    served_and_stopped(1)
    kept = receivers.masters(db)
    assert [m.started_at for m in kept] == [now - timedelta(days=1), elsewhere.started_at]  # 35 days: forgotten
    for age in (10, 5, 3, 2):
        served_and_stopped(age)
    kept = receivers.masters(db)
    assert [m.started_at for m in kept] == [now - timedelta(days=age) for age in (1, 2, 3, 5, 10)]
    assert all(m.stopped_at is not None for m in kept)  # the other host's, never stopped, was the oldest
    status = collect(config, db)
    assert status["receiver_running"] is False and status["attention"] == []
    assert len(meta.with_prefix(db, receivers.PREFIX)) == receivers.KEPT
    db.conn.close()
