"""The worker: job table, scheduler settings, one pass with --once, the lease, clean shutdown."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta, timezone
from pathlib import Path

import pytest
from apscheduler.events import EVENT_JOB_EXECUTED
from freezegun import freeze_time

from partnerkit.config import config_as_env
from partnerkit.errors import StorageError
from partnerkit.store import locks, open_db
from partnerkit.timeutil import iso, utcnow
from reconcile.scheduler import (LEASE_NAME, WorkerBusy, WorkerLease, WorkerRefused, build_scheduler, put_timers_right,
                                 refuse_inside_gunicorn, run_once, run_worker)
from reconcile.worker_jobs import JOBS, JobRunner, JobSpec, JobUnavailable, resolve
from tests.conftest import account_of

POLL = next(s for s in JOBS if s.id == "poll-recharges")
ROOT = Path(__file__).resolve().parents[2]
RUNS: list[tuple[str, float, float]] = []


def slow_job(config, db, client):
    """A test job that takes a while, to show runs never overlap."""
    started = time.monotonic()
    time.sleep(0.15)
    RUNS.append(("slow", started, time.monotonic()))
    return {"ok": True}


def test_the_job_table_names_every_job_once():
    assert [s.id for s in JOBS] == ["poll-recharges", "fetch-vouchers", "catch-up-orders", "sync-recent",
                                    "nightly-report", "prune-events"]
    assert POLL.every_s == 5 and POLL.target == "reconcile.poller:poll_once"


def test_scheduler_is_utc_with_explicit_ids_coalescing_and_single_instances(config, wdb):
    lease = WorkerLease(wdb)
    scheduler = build_scheduler(config, lease=lease)
    jobs = {job.id: job for job in scheduler.get_jobs()}
    assert set(jobs) == {s.id for s in JOBS} | {"renew-lease"}
    assert scheduler.timezone == timezone.utc
    for spec in JOBS:
        job = jobs[spec.id]
        assert job.coalesce is True and job.max_instances == 1
        assert job.misfire_grace_time == spec.misfire_grace_s
        assert job.trigger.interval.total_seconds() == spec.every_s
        assert str(job.trigger.timezone) == "UTC"
    assert jobs["renew-lease"].executor == "lease"


def test_a_clock_stepped_back_leaves_no_job_waiting_for_the_time_it_showed(config, wdb, caplog):
    """APScheduler times an interval job's next run from its last, on the wall clock: a worker running while NTP
    stepped a clock a day fast back would run nothing for a day, its lease's renewal included. The worker's loop
    runs each such job now (`put_timers_right`), and leaves jobs on their turn alone."""
    ahead = utcnow().replace(microsecond=0) + timedelta(days=1)
    with freeze_time(ahead) as clock:
        scheduler = build_scheduler(config, lease=WorkerLease(wdb))
        scheduler.start(paused=True)
        try:
            assert put_timers_right(scheduler) == [], "on a clock that did not move, every job is on its turn"
            clock.move_to(ahead - timedelta(days=1))
            with caplog.at_level(logging.WARNING, logger="reconcile.worker"):
                moved = put_timers_right(scheduler)
            after = {job.id: job.next_run_time for job in scheduler.get_jobs()}
            again = put_timers_right(scheduler)
        finally:
            scheduler.shutdown(wait=False)
    assert sorted(moved) == sorted({s.id for s in JOBS} | {"renew-lease"})
    assert all(at <= ahead - timedelta(days=1) for at in after.values()), after
    assert again == []
    [line] = [r.getMessage() for r in caplog.records if "stepped back" in r.getMessage()]
    assert f"{len(moved)} job(s) were next due as late as {iso(ahead + timedelta(seconds=10))}; they run now" in line


def test_a_missing_part_is_reported_by_job_id():
    spec = JobSpec("sync-recent", "reconcile.not_there:sync_recent", 900, 300, "sync")
    with pytest.raises(JobUnavailable, match=r"job sync-recent: cannot import reconcile\.not_there"):
        resolve(spec)
    with pytest.raises(JobUnavailable, match="has no function nope"):
        resolve(JobSpec("x", "reconcile.poller:nope", 1, 1, "x"))
    with pytest.raises(ValueError, match="module:function"):
        JobSpec("x", "reconcile.poller.poll_once", 1, 1, "x")


def test_run_once_runs_each_job_once_and_logs_one_line_each(config, server, wdb, client, caplog):
    from reconcile.recharges import submit
    from tests.worker.worker_helpers import mobile

    server.sandbox.settings.update({"processing_delay_s": 1})
    submit(config, wdb, client, mobile_number=mobile(5), operator_id=1, amount=199)
    server.advance(10)  # settled at the provider
    bogus = JobSpec("nightly-report", "reconcile.not_there:nightly", 3600, 3600, "report")
    caplog.set_level("INFO", logger="reconcile.worker")
    with freeze_time(server.clock.now(), tick=True):  # the worker's clock agrees with the provider's
        results = run_once(config, jobs=(POLL, bogus))
    assert [(r["job"], r["outcome"]) for r in results] == [("poll-recharges", "ok"), ("nightly-report", "unavailable")]
    assert results[0]["result"]["settled"] == 1
    assert "cannot import reconcile.not_there" in results[1]["result"]
    lines = [r for r in caplog.records if r.name == "reconcile.worker" and getattr(r, "job", None)]
    assert [(r.job, r.outcome) for r in lines] == [("poll-recharges", "ok"), ("nightly-report", "unavailable")]
    assert all(isinstance(r.duration_ms, int) for r in lines)
    assert locks.current(wdb, LEASE_NAME) is None  # released after the pass


FETCH = next(s for s in JOBS if s.id == "fetch-vouchers")
CATCH_UP = next(s for s in JOBS if s.id == "catch-up-orders")


def test_each_job_is_labelled_as_the_budget_counts_its_calls(config, server, wdb, client):
    """The job table's purpose is the label `budget show` and `status` give the job's calls under
    (`used_by_purpose`): the voucher jobs spend under `voucher_fetch` and `order_sync`, and the table said
    `vouchers` and `catch-up`, labels no budget ever showed."""
    client.create_order(product_id=7, denomination=10, quantity=1)  # delivered at once, no voucher stored here
    before = client.budget.usage()["general"]["by_purpose"]
    with freeze_time(server.clock.now(), tick=True):
        results = run_once(config, jobs=(CATCH_UP, FETCH))  # the catch-up lists it and queues its fetch
    assert [(r["job"], r["outcome"]) for r in results] == [("catch-up-orders", "ok"), ("fetch-vouchers", "ok")]
    after = client.budget.usage()["general"]["by_purpose"]
    spent = {purpose for purpose, used in after.items() if used > before.get(purpose, 0)}
    assert spent == {CATCH_UP.purpose, FETCH.purpose} == {"order_sync", "voucher_fetch"}


def job_levels(caplog) -> dict[str, str]:
    """The level of each job's one log line."""
    return {r.job: r.levelname for r in caplog.records if r.name == "reconcile.worker" and getattr(r, "job", None)}


def test_an_idle_pass_logs_at_debug_and_a_pass_that_did_work_at_info(config, server, wdb, client, caplog):
    # The 3-5 s jobs find nothing to do most of the time: at INFO their lines buried everything else.
    from reconcile.recharges import submit
    from tests.worker.worker_helpers import mobile

    caplog.set_level("DEBUG", logger="reconcile.worker")
    with freeze_time(server.clock.now(), tick=True):
        idle = run_once(config, jobs=(POLL, FETCH))
    assert [r["result"]["calls"] for r in idle[:1]] == [0]
    assert job_levels(caplog) == {"poll-recharges": "DEBUG", "fetch-vouchers": "DEBUG"}

    server.sandbox.settings.update({"processing_delay_s": 1})
    submit(config, wdb, client, mobile_number=mobile(5), operator_id=1, amount=199)
    server.advance(10)
    caplog.clear()
    with freeze_time(server.clock.now(), tick=True):
        busy = run_once(config, jobs=(POLL, FETCH))
    assert busy[0]["result"]["settled"] == 1
    assert job_levels(caplog) == {"poll-recharges": "INFO", "fetch-vouchers": "DEBUG"}


@pytest.mark.parametrize("spec_id, result, idle", [
    ("poll-recharges", {"candidates": 0, "due": 0, "read": 0, "settled": 0, "calls": 0, "escalated": [],
                        "budget_exhausted": False, "not_found": [], "backing_off_until": None}, True),
    # A recharge PROCESSING for a day is a candidate of every pass: 17,280 INFO lines saying nothing was due.
    ("poll-recharges", {"candidates": 1, "due": 0, "read": 0, "settled": 0, "calls": 0, "escalated": []}, True),
    ("poll-recharges", {"candidates": 1, "due": 1, "read": 1, "settled": 0, "calls": 1, "escalated": []}, False),
    ("poll-recharges", {"due": 0, "calls": 0, "budget_exhausted": False, "backing_off_until": "2025-03-14T10:00:00Z"},
     False),
    ("fetch-vouchers", {"claimed": 0, "done": 0, "retried": 0, "dead": 0, "vouchers_added": 0, "outcomes": {}}, True),
    ("fetch-vouchers", {"claimed": 1, "done": 0, "retried": 1, "dead": 0, "vouchers_added": 0,
                        "outcomes": {"retry": 1}}, False),
    # catch-up reads one page each time: finding nothing on it is nothing done.
    ("catch-up-orders", {"pages": 1, "seen": 0, "updated": 0, "fetches_queued": 0, "stopped": "end of list",
                         "since": "2025-03-13T00:00:00Z", "quarantined": 0, "fetches_revived": 0}, True),
    ("catch-up-orders", {"pages": 1, "seen": 3, "updated": 0, "fetches_queued": 0, "stopped": "end of list",
                         "since": "2025-03-13T00:00:00Z", "quarantined": 0, "fetches_revived": 0}, False),
    ("nightly-report", [], True),  # the hourly check found no day due
    ("nightly-report", [{"date": "2025-03-14", "drifts": 0}], False),
    ("sync-recent", {"from_day": "2025-03-14", "to_day": "2025-03-14", "recharges": 0, "transactions": 0,
                     "wallets": 2, "errors": []}, False),
])
def test_which_job_results_count_as_an_idle_pass(spec_id, result, idle):
    spec = next(s for s in JOBS if s.id == spec_id)
    assert spec.is_idle(result) is idle


def test_the_lease_renewal_is_not_logged_every_10_s(config):
    # apscheduler logs "Running job ..." and "executed successfully" at INFO for every run.
    from partnerkit.logs import configure_logging

    configure_logging(config)
    assert logging.getLogger("apscheduler.executors.lease").getEffectiveLevel() == logging.WARNING


def test_a_starting_worker_logs_its_own_line_not_apschedulers(config, caplog):
    # apscheduler.scheduler logged 13 INFO lines at every start ("Adding job tentatively ...", "Added job
    # ... to job store", "Scheduler started") beside the worker's one "worker started with jobs ...".
    from partnerkit.logs import configure_logging

    configure_logging(config)
    scheduler = build_scheduler(config, jobs=(JobSpec("slow", f"{__name__}:slow_job", 60, 1, "test"),),
                                client_factory=lambda *a: None)
    scheduler.start(paused=True)
    scheduler.shutdown(wait=False)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("apscheduler")] == []


def test_a_job_that_raises_never_kills_the_scheduler(config):
    def broken(config, db, client):
        raise RuntimeError("boom")

    runner = JobRunner(config, JobSpec("poll-recharges", "reconcile.poller:poll_once", 5, 4, "poller"),
                       client_factory=lambda *a: None)
    runner._func = broken
    assert runner()["outcome"] == "error" and "boom" in runner()["result"]
    runner.close()


def test_jobs_never_overlap_themselves(config):
    RUNS.clear()
    spec = JobSpec("slow", f"{__name__}:slow_job", 0.05, 1, "test")
    scheduler = build_scheduler(config, jobs=(spec,), client_factory=lambda *a: None)
    scheduler.start()
    try:
        deadline = time.monotonic() + 60  # three runs take about 0.5 s; a busy machine is given far longer
        while len(RUNS) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        scheduler.shutdown(wait=True)
    assert len(RUNS) >= 3
    for (_, _, end), (_, start, _) in zip(RUNS, RUNS[1:]):
        assert start >= end


FLAKY: list[float] = []


def flaky_job(config, db, client):
    """A test job that fails twice (a report directory full), then works."""
    FLAKY.append(time.monotonic())
    if len(FLAKY) < 3:
        raise OSError(28, "No space left on device")
    return {"written": 1}


def test_a_failed_nightly_run_is_tried_again_sooner_than_its_hourly_turn():
    nightly = next(s for s in JOBS if s.id == "nightly-report")
    assert (nightly.every_s, nightly.retry_after_error_s) == (3600, 300)
    assert [nightly.retry_in(n) for n in range(6)] == [None, 300, 600, 1200, 2400, None]  # then hourly
    assert all(s.retry_after_error_s is None for s in JOBS if s is not nightly)
    with pytest.raises(ValueError, match="retry_after_error_s must be positive and shorter than every_s"):
        JobSpec("x", "reconcile.poller:poll_once", 60, 60, "x", retry_after_error_s=60)


def test_a_job_that_failed_runs_again_after_its_retry_delay_then_at_its_turn(config, caplog):
    FLAKY.clear()
    spec = JobSpec("flaky", f"{__name__}:flaky_job", 3600, 3600, "test", retry_after_error_s=0.2)
    scheduler = build_scheduler(config, jobs=(spec,), client_factory=lambda *a: None)
    executed: list[object] = []  # runs ended, with whatever each did to the next run time
    scheduler.add_listener(executed.append, EVENT_JOB_EXECUTED)
    with caplog.at_level(logging.INFO, logger="reconcile.worker"):
        scheduler.start()
        try:
            # Its turn is an hour away: a third run at all is a run sooner than its turn. The bound only ends a
            # broken run (the retries come 0.2 and 0.4 s apart; a busy machine may take seconds).
            deadline = time.monotonic() + 60
            while len(executed) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            turn = scheduler.get_job("flaky").next_run_time
        finally:
            scheduler.shutdown(wait=True)
    assert len(FLAKY) == 3  # no fourth run came before the scheduler stopped, however late that was
    # Lower bounds only: each retry is scheduled that long after the failed run ended (a busy machine can
    # only make it later), with 50 ms for the scheduler's wall clock against this monotonic one.
    first, second = FLAKY[1] - FLAKY[0], FLAKY[2] - FLAKY[1]
    assert first >= 0.15 and second >= 0.35  # 0.2 s, then doubled
    assert (turn - utcnow()).total_seconds() > 3500  # the success put it back on its turn
    retried = [r for r in caplog.records if "job flaky failed; trying again at " in r.getMessage()]
    assert [r.errors_in_row for r in retried] == [1, 2]


def test_a_second_lease_holder_is_refused_until_the_first_releases_or_expires(wdb):
    first, second = WorkerLease(wdb, holder="host-a:1", ttl_s=0.3), WorkerLease(wdb, holder="host-b:2", ttl_s=0.3)
    first.acquire(wait=False)
    with pytest.raises(WorkerBusy, match="another worker \\(host-a:1\\) holds the lease"):
        second.acquire(wait=False)
    time.sleep(0.4)  # host-a crashed: it stopped renewing
    second.acquire(wait=False)
    assert first.renew() is False and first.lost.is_set() and not first.held
    first.release()  # a lost lease is never released on the new holder's behalf
    assert locks.current(wdb, LEASE_NAME).holder == "host-b:2"
    second.release()
    assert locks.current(wdb, LEASE_NAME) is None


def test_a_standby_worker_takes_over_when_the_lease_is_released(wdb):
    first, second = WorkerLease(wdb, holder="a"), WorkerLease(wdb, holder="b")
    first.acquire(wait=False)
    stop = threading.Event()
    taken = threading.Thread(target=lambda: second.acquire(wait=True, stop=stop, poll_s=0.05))
    taken.start()
    try:
        time.sleep(0.2)
        assert not second.held
        first.release()
        taken.join(timeout=30)  # it polls every 0.05 s; the bound is for a busy machine, or a broken run
        assert second.held
    finally:
        stop.set()
        taken.join(timeout=30)


def test_a_standby_worker_stopped_before_it_gets_the_lease_exits_0(config, wdb, monkeypatch, caplog):
    """SIGTERM (systemd's stop) to a worker standing by is a clean stop, not a failure."""
    monkeypatch.delitem(sys.modules, "gunicorn", raising=False)  # the receiver's tests import it
    WorkerLease(wdb, holder="other-host:1:ns:abcd").acquire(wait=False)
    stop = threading.Event()
    codes: list[object] = []

    def standby_worker() -> None:
        try:
            codes.append(run_worker(config, stop=stop, jobs=(POLL,)))
        except Exception as exc:  # noqa: BLE001 - shown by the assertion below
            codes.append(exc)

    caplog.set_level(logging.INFO, logger="reconcile.worker")
    standby = threading.Thread(target=standby_worker)
    standby.start()
    try:
        # Stopped once it is standing by (it says so), not after a guess at how long it takes to get there.
        deadline = time.monotonic() + 30
        while not any("standing by until it is released or expires" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline and standby.is_alive(), codes
            time.sleep(0.02)
    finally:
        stop.set()
        standby.join(timeout=30)
    assert codes == [0]
    assert any(r.getMessage() == "worker stopped while standing by for the lease" for r in caplog.records)
    assert locks.current(wdb, LEASE_NAME).holder == "other-host:1:ns:abcd"  # never taken, never released


def test_the_worker_is_never_started_inside_gunicorn(monkeypatch, config):
    monkeypatch.setitem(sys.modules, "gunicorn", object())
    with pytest.raises(WorkerRefused, match="never started inside gunicorn"):
        refuse_inside_gunicorn()
    with pytest.raises(WorkerRefused):
        run_worker(config, stop=threading.Event())


def test_a_second_worker_process_does_not_run_jobs_twice(config, server):
    """Two real processes on one database: the second refuses, the first stops cleanly on SIGTERM."""
    env = {**os.environ, **config_as_env(config), "PYTHONPATH": str(ROOT)}
    env.pop("PARTNERKIT_CONFIG", None)
    cli = [sys.executable, "-m", "partnerkit"]
    first = subprocess.Popen(cli + ["worker"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        db = open_db(config.db_path)
        deadline = time.monotonic() + 60  # a worker process starting on a busy machine
        while locks.current(db, LEASE_NAME) is None:
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first worker never took the lease"
            time.sleep(0.1)
        holder = locks.current(db, LEASE_NAME).holder
        second = subprocess.run(cli + ["worker", "--once"], env=env, cwd=ROOT, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 1
        assert f"another worker ({holder}) holds the lease" in second.stderr
        assert "jobs are never run twice" in second.stderr
        with pytest.raises(WorkerBusy):
            run_once(config, jobs=(POLL,))
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        assert locks.current(db, LEASE_NAME) is None  # released on the way out
        db.conn.close()
    finally:
        if first.poll() is None:
            first.kill()


def test_a_refused_api_key_pauses_the_jobs_that_call_it_for_a_minute(config, server, wdb):
    """A 401 every 3-5 seconds from each job told the provider nothing new and flooded the log."""
    from dataclasses import replace
    from datetime import datetime, timedelta

    from reconcile.worker_jobs import REFUSAL_PAUSE_S

    catch_up = next(s for s in JOBS if s.id == "catch-up-orders")
    prune = next(s for s in JOBS if s.id == "prune-events")
    account_of(wdb, config.api_key, ("1", "2"))  # a database in use, whose secret is then revoked
    wrong = replace(config, api_secret="a-secret-the-provider-revoked")
    start = datetime.now(timezone.utc)
    with freeze_time(start, tick=True):
        refused = run_once(wrong, jobs=(catch_up, POLL, prune))
    assert [r["outcome"] for r in refused] == ["error", "paused", "ok"]  # prune-events calls no API
    assert "HTTP 401" in refused[0]["result"] and "trying again" in refused[1]["result"]
    assert wdb.execute("SELECT COUNT(*) FROM budget_events").fetchone()[0] == 1, "one 401 sent, not one per job"

    # The pause counts from the 401, met some way into the first run (later on a busy machine): half a pause
    # on either side of its end, so that neither check depends on how long a run takes to get there.
    half = REFUSAL_PAUSE_S / 2
    with freeze_time(start + timedelta(seconds=REFUSAL_PAUSE_S - half), tick=True):
        assert [r["outcome"] for r in run_once(config, jobs=(catch_up,))] == ["paused"]
    with freeze_time(start + timedelta(seconds=REFUSAL_PAUSE_S + half), tick=True):  # the secret was put right
        after = run_once(config, jobs=(catch_up, POLL))
    assert [r["outcome"] for r in after] == ["ok", "ok"]
    assert wdb.execute("SELECT COUNT(*) FROM provider_refusals").fetchone()[0] == 0, "the accepted call cleared it"


def test_the_worker_waits_for_a_database_it_cannot_open_yet(config, caplog):
    # A file that cannot be opened for writing at start (here a directory where the file belongs, as
    # portable as a read-only file for a test run as root) is waited out, not a start failure: systemd
    # stops restarting a service that failed five times in ten seconds.
    from dataclasses import replace
    from reconcile.scheduler import _open_waiting

    blocked = replace(config, db_path=config.db_path.parent / "later" / "pk.db")
    blocked.db_path.mkdir(parents=True)
    caplog.set_level(logging.WARNING, logger="reconcile.scheduler")
    stop = threading.Event()
    with pytest.raises(StorageError, match="it is a directory"):
        _open_waiting(blocked, wait=False, stop=stop)

    class FixedOnceSaid(logging.Handler):
        """The directory goes once the worker has said it waits (not after a time a busy machine may outlast
        before the worker's first try, which then would find nothing to wait for)."""

        def emit(self, record: logging.LogRecord) -> None:
            if "cannot open the database yet" in record.getMessage() and blocked.db_path.is_dir():
                blocked.db_path.rmdir()

    fixed = FixedOnceSaid()
    logging.getLogger("reconcile.worker").addHandler(fixed)
    try:
        db = _open_waiting(blocked, wait=True, stop=stop, poll_s=0.1)
    finally:
        logging.getLogger("reconcile.worker").removeHandler(fixed)
    assert db is not None and blocked.db_path.is_file()
    db.conn.close()
    assert any("cannot open the database yet" in r.getMessage() for r in caplog.records)
    blocked.db_path.unlink()
    blocked.db_path.mkdir()
    stop.set()
    assert _open_waiting(blocked, wait=True, stop=stop, poll_s=0.1) is None  # stopped while waiting
