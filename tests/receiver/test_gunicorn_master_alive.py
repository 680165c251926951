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


def _served_on(env: dict[str, str], log_path, port: int) -> ServedReceiver:
    """`partnerkit serve --workers 1` on a given loopback port (a restart on the address a master had)."""
    served = ServedReceiver(env, log_path, workers=1)
    served.port, served.base_url = port, f"http://127.0.0.1:{port}"
    served._argv[served._argv.index("--bind") + 1] = f"127.0.0.1:{port}"
    return served


def _kill_master(served: ServedReceiver) -> int:
    """SIGKILL `served`'s gunicorn master (no on_exit) and wait for its web workers to follow; its pid."""
    master = served.process.pid  # `partnerkit serve` replaced itself with the gunicorn master
    workers = children(master)
    assert workers, "the master's web worker"
    served.process.kill()
    served.process.wait()
    wait_until(lambda: not any(alive(pid) for pid in workers), timeout=60, step=0.1,
               what="the killed master's web workers gone (their parent-death signal)")
    return master


def test_status_names_a_killed_receiver_until_one_starts_again_on_its_address_and_not_after_a_clean_stop(tmp_path):
    env = env_for(tmp_path)
    with ServedReceiver(env, tmp_path / "first.log", workers=1) as first:
        master = first.process.pid  # `partnerkit serve` replaced itself with the gunicorn master
        code, running = _status(env)
        assert (code, running["receiver_running"], _receiver_lines(running)) == (0, True, [])
        [record] = running["receiver_masters"]
        assert (record["pid"], record["host"], record["bind"]) == (master, socket.gethostname(),
                                                                   [f"127.0.0.1:{first.port}"])
        assert record["running"] is True and record["stopped_at"] is None
        assert _kill_master(first) == master
        code, killed = _status(env)
    assert code == 1
    assert killed["receiver_running"] is False
    [line] = _receiver_lines(killed)
    assert line.startswith(f"the receiver (pid {master} on {socket.gethostname()}, bound to 127.0.0.1:{first.port}, "
                           f"started {record['started_at']}) {KILLED}: webhooks sent to it are not being received; "
                           "start it again on that address (`partnerkit serve --bind ADDRESS`")
    assert "`partnerkit webhooks retry --failed`" in line and "order catch-up" in line

    with ServedReceiver(env, tmp_path / "elsewhere.log", workers=1) as elsewhere:  # another address: no repair
        code, meanwhile = _status(env)
        assert (code, meanwhile["receiver_running"], _receiver_lines(meanwhile)) == (1, True, [line])
        assert [m["pid"] for m in meanwhile["receiver_masters"]] == [elsewhere.process.pid, master]

    with _served_on(env, tmp_path / "second.log", first.port) as second:  # started again on its address
        code, again = _status(env)
        assert (code, again["receiver_running"], _receiver_lines(again)) == (0, True, [])
        pids = [m["pid"] for m in again["receiver_masters"]]
        assert pids == [second.process.pid, elsewhere.process.pid] and master not in pids  # the killed one superseded
    assert second.process.returncode == 0  # SIGTERM: gunicorn's own shutdown, on_exit included
    code, stopped = _status(env)
    assert (code, stopped["receiver_running"], stopped["attention"]) == (0, False, [])
    assert [(m["pid"], m["running"]) for m in stopped["receiver_masters"]] == [(second.process.pid, False),
                                                                              (elsewhere.process.pid, False)]
    assert all(m["stopped_at"] is not None for m in stopped["receiver_masters"])  # stopped cleanly, and when


def test_two_receivers_on_one_host_and_one_database_never_prune_each_other(tmp_path):
    """Two `partnerkit serve` on one host and one database (two binds; a blue/green pair while both run): each start
    pruned the rows of this host's masters that no longer ran, and the oldest beyond the newest 5 in all. So one
    receiver killed was cleared by the other's restart (`status --check` passed, nothing listened on its port), and
    one running was pushed out by the other's restarts (no longer counted, and no line once it was killed)."""
    env = env_for(tmp_path)
    config = load_config(environ=env)
    db = open_db(config.db_path)
    try:
        with ServedReceiver(env, tmp_path / "blue.log", workers=1) as blue:
            with ServedReceiver(env, tmp_path / "green.log", workers=1) as green:
                code, both = _status(env)
                assert (code, both["receiver_running"]) == (0, True)
                assert [(m["pid"], m["running"]) for m in both["receiver_masters"]] == [(green.process.pid, True),
                                                                                        (blue.process.pid, True)]
            with _served_on(env, tmp_path / "green-2.log", green.port) as green_again:  # green restarted cleanly
                # ... and restarted over and over (this process stands in for each, on green's address)
                for _ in range(receivers.KEPT + 1):
                    note_receiver_stopped(db, note_receiver_started(db, [f"127.0.0.1:{green.port}"]))
                code, crowded = _status(env)
                assert code == 0 and _receiver_lines(crowded) == []
                running = {m["pid"]: m["running"] for m in crowded["receiver_masters"] if m["stopped_at"] is None}
                assert running == {blue.process.pid: True, green_again.process.pid: True}  # blue still counted
                assert len(crowded["receiver_masters"]) == 2 + receivers.KEPT  # the newest 5 clean stops kept

                killed = _kill_master(blue)
                code, named = _status(env)
                assert (code, named["receiver_running"]) == (1, True)
                [line] = _receiver_lines(named)
                assert line.startswith(f"the receiver (pid {killed} on {socket.gethostname()}, bound to "
                                       f"127.0.0.1:{blue.port}, started ")
            with _served_on(env, tmp_path / "green-3.log", green.port):  # the other receiver's restart
                code, still = _status(env)
                assert (code, _receiver_lines(still)) == (1, [line])  # blue still named: nothing listens on its port

            with _served_on(env, tmp_path / "blue-2.log", blue.port) as blue_again:  # blue's own restart repairs it
                code, repaired = _status(env)
                assert (code, repaired["receiver_running"], _receiver_lines(repaired)) == (0, True, [])
                pids = [m["pid"] for m in repaired["receiver_masters"]]
                assert pids[0] == blue_again.process.pid and killed not in pids
        assert blue_again.process.returncode == 0
    finally:
        db.conn.close()


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
    # The newest 5 stopped cleanly; the other host's master is not crowded out by this host's restarts (it may
    # still run there, where its own `partnerkit status` counts it) ...
    assert [m.started_at for m in kept] == [now - timedelta(days=age) for age in (1, 2, 3, 5, 10)] + [
        elsewhere.started_at]
    status = collect(config, db)
    assert status["receiver_running"] is False and status["attention"] == []

    # ... only by newer rows of its own kind, never marked stopped, of hosts this one cannot see (a container
    # recreated under a new hostname leaves one each time it is killed): the newest 5 of those are kept.
    for n in range(receivers.KEPT):
        other = receivers.Master(f"container-{n}:1:4026531836:{n:08x}", ("0.0.0.0:8000",), now - timedelta(hours=n))
        receivers.started(db, other, superseded=lambda m: False, now=other.started_at)
    note_receiver_stopped(db, note_receiver_started(db, ["127.0.0.1:8000"], now=now), now=now)
    kept = receivers.masters(db)
    assert elsewhere.holder not in [m.holder for m in kept]
    assert sum(m.stopped_at is None for m in kept) == receivers.KEPT
    assert len(meta.with_prefix(db, receivers.PREFIX)) == 2 * receivers.KEPT
    db.conn.close()
