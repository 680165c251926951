"""The worker: APScheduler 3.x in UTC, the job table of `reconcile.worker_jobs`, one lease per DB.

Only one worker may run jobs against a database. It holds the lease "worker" in the `locks` table
(acquired in BEGIN IMMEDIATE, renewed every LEASE_RENEW_S, released on exit); a second worker waits
for it (or exits, with --once or --no-wait) with a message naming the holder. A crashed holder stops
renewing and its lease expires after LEASE_TTL_S; a worker restarted on the same host (same pid
namespace) sees that the holder's process is gone and takes the lease over at once. A worker that
takes the lease hands back the voucher fetch jobs its predecessor had claimed (a SIGKILL mid-fetch
leaves them leased for minutes otherwise); one that takes it from a holder on another host (its lease
expired) logs a WARNING naming both hosts: two hosts on one database file, or a move under way. The
worker refuses to start inside a gunicorn process: forked web workers would each run every job.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from partnerkit.config import Config
from partnerkit.errors import PartnerKitError, StorageError
from partnerkit.processes import _pid_namespace, holder_is_gone, new_holder  # noqa: F401 - part of this module's API
from partnerkit.processes import holder_host, other_host
from partnerkit.store import Database, open_db
from partnerkit.store import locks
from partnerkit.store.db import WORKER_BUSY_TIMEOUT_MS
from partnerkit.timeutil import CLOCK_STEP_MARGIN_S, iso, utcnow
from partnerkit.walks import allow_walks, stop_walks
from reconcile.worker_jobs import JOBS, JobRunner, JobSpec, check_account

log = logging.getLogger("reconcile.worker")

LEASE_NAME = locks.WORKER_LEASE  # named once in partnerkit, which `partnerkit status` reads it by
LEASE_TTL_S = 30.0
LEASE_RENEW_S = 10.0
LEASE_POLL_S = 5.0  # how often a standby worker retries the lease
# The worker's connections, the lease's too, wait WORKER_BUSY_TIMEOUT_MS for another process's write lock: a
# renewal that waits that long still lands before the lease lapses (LEASE_RENEW_S + that < LEASE_TTL_S).


class WorkerBusy(PartnerKitError):
    """Another worker holds the lease on this database."""


class WorkerRefused(PartnerKitError):
    """The worker must not start here (inside gunicorn)."""


def process_prefix() -> str:
    """The "host:pid:" prefix this process puts on its lease and job-lease owner ids."""
    return f"{socket.gethostname()}:{os.getpid()}:"


def refuse_inside_gunicorn() -> None:
    """Raise WorkerRefused in a gunicorn process: every forked web worker would run every job."""
    if "gunicorn" in sys.modules or "gunicorn" in os.path.basename(sys.argv[0] if sys.argv else ""):
        raise WorkerRefused("the worker is never started inside gunicorn; run `partnerkit worker` as its own process")


class WorkerLease:
    """This process's claim on the database's worker lease."""

    def __init__(self, db: Database, *, name: str = LEASE_NAME, ttl_s: float = LEASE_TTL_S,
                 holder: str | None = None) -> None:
        self.db = db
        self.name = name
        self.ttl_s = ttl_s
        self.holder = holder or new_holder()
        self.held = False
        self.lost = threading.Event()
        self._renewed = time.monotonic()  # when the lease was last taken or extended
        self._failed_renewals = 0  # in a row: the database could not be written
        self._lapse_logged = False  # the ERROR for a lease lapsed that way is logged once

    def try_acquire(self) -> locks.Lease:
        """Take the lease if free, expired or held by a process that is gone; the Lease says who holds it."""
        lease = locks.acquire(self.db, self.name, self.holder, self.ttl_s)
        if not lease.acquired and holder_is_gone(lease.holder):
            log.warning("the worker lease holder %s is no longer running on this host; taking over", lease.holder)
            lease = locks.acquire(self.db, self.name, self.holder, self.ttl_s, take_over_from=lease.holder)
        self.held = lease.acquired
        if lease.acquired:
            self._renewed = time.monotonic()
        if lease.acquired and lease.previous is not None:
            self._warn_other_host(lease.previous)
            self._recover_jobs(lease.previous)
        return lease

    def _warn_other_host(self, previous: str) -> None:
        """One WARNING when the lease was taken over from a worker on another host (its lease expired: this host
        cannot see that process): two hosts on one database file, or a move to a new host under way."""
        previous_host = other_host(previous, self.holder)
        if previous_host is None:
            return
        host = holder_host(self.holder)
        log.warning("worker lease taken over from %s on host %s, whose lease expired unreleased, by %s on host %s: "
                    "two hosts open this one database file (a shared filesystem such as NFS, whose locks SQLite "
                    "cannot rely on: stop partnerkit on one of them for good), or the database moved to %s while "
                    "the worker on %s still ran or had crashed (stop and disable its units there: README 'Move to a "
                    "new host'); `partnerkit status` names it for an hour", previous, previous_host, self.holder,
                    host, host, previous_host, extra={"holder": self.holder, "host": host,
                                                      "previous_holder": previous, "previous_host": previous_host})

    def _recover_jobs(self, previous: str) -> None:
        """After taking over from another holder, hand back the job leases it left behind."""
        recovered = locks.release_job_leases(self.db, keep_prefix=process_prefix())
        if recovered:
            log.warning("recovered %d job(s) claimed by the previous worker %s", recovered, previous,
                        extra={"holder": self.holder, "recovered": recovered})

    def acquire(self, *, wait: bool, stop: threading.Event | None = None, poll_s: float = LEASE_POLL_S) -> None:
        """Take the lease, waiting for it if asked; WorkerBusy (naming the holder) otherwise."""
        announced, refused = False, 0
        while True:
            try:
                lease = self.try_acquire()
            except StorageError as exc:
                # A database locked past the busy timeout (a backup, another process's long write)
                # is a reason to wait, not to exit: a worker restarted just then would otherwise die.
                if not wait:
                    raise
                refused += 1  # one WARNING, not one every poll_s while a disk stays full ("worker lease acquired" ends it)
                log.log(logging.WARNING if refused == 1 else logging.DEBUG, "cannot take the worker lease yet (%s); "
                        "retrying every %.0f s", exc, poll_s)
                if stop is not None and stop.wait(poll_s):
                    raise WorkerBusy("stopped while waiting for the worker lease") from None
                if stop is None:
                    threading.Event().wait(poll_s)
                continue
            if lease.acquired:
                log.info("worker lease acquired by %s", self.holder, extra={"holder": self.holder})
                return
            message = (f"another worker ({lease.holder}) holds the lease on this database until "
                       f"{iso(lease.expires_at)}; jobs are never run twice")
            if not wait:
                raise WorkerBusy(message + "; not starting (if that worker crashed, its lease expires "
                                 f"within {int(self.ttl_s)} s)")
            if not announced:
                log.warning("%s; standing by until it is released or expires", message)
                announced = True
            if stop is not None and stop.wait(poll_s):
                raise WorkerBusy("stopped while waiting for the worker lease")
            if stop is None:
                threading.Event().wait(poll_s)

    def renew(self) -> bool:
        """Extend the lease; on loss set `lost` so the worker stops.

        A renewal the database refuses (locked, full, read-only) is a warning while the lease has time left,
        and one ERROR once it has lapsed: from then on `partnerkit status` reads it as expired, and tells a
        holder still running on its host (this worker) from one that died (`lease_holder_alive`)."""
        try:
            ok = self.held and locks.renew(self.db, self.name, self.holder, self.ttl_s)
        except PartnerKitError as exc:  # a locked DB for a moment is not a loss; the TTL has room
            self._failed_renewals += 1
            # One WARNING an episode, not one every LEASE_RENEW_S while a disk stays full: the lapse's ERROR and the
            # INFO of the renewal that lands again bracket it.
            log.log(logging.WARNING if self._failed_renewals == 1 else logging.DEBUG,
                    "worker lease renewal failed: %s", exc)
            unrenewed = time.monotonic() - self._renewed
            if self.held and unrenewed >= self.ttl_s and not self._lapse_logged:
                self._lapse_logged = True
                log.error("the worker lease has lapsed: the database refused its renewals for %.0f s (%s); this "
                          "worker carries on and takes it up again once the database can be written (free space "
                          "on PARTNERKIT_DB's filesystem if it is full); `partnerkit status` says so meanwhile",
                          unrenewed, exc, extra={"holder": self.holder})
            return self.held
        if ok:
            if self._failed_renewals:
                log.info("worker lease renewed again after %d failed renewal(s)", self._failed_renewals,
                         extra={"holder": self.holder})
            self._renewed, self._failed_renewals, self._lapse_logged = time.monotonic(), 0, False
        if not ok and self.held:
            self.held = False
            self.lost.set()
            log.error("worker lease lost (another worker took it over); stopping")
        return ok

    def release(self) -> None:
        """Give the lease back (only ours)."""
        if self.held:
            locks.release(self.db, self.name, self.holder)
            self.held = False
            log.info("worker lease released by %s", self.holder)


class _SkipsAtInfo(logging.Filter):
    """Logs apscheduler's "Execution of job ... skipped: maximum number of running instances reached" at INFO, not
    WARNING: shown only where apscheduler's INFO lines are (not at partnerkit's default, partnerkit.logs).

    That skip is max_instances=1 doing its work (a job never overlaps itself): the run still going (a voucher
    fetch or a poll pass waiting 15 s for another process's write lock, a slow provider) is the news, and its
    own job line says it, once per episode (a `busy` WARNING, an error). A WARNING per skipped turn of a 3- or
    5-second job added several to each lock episode's one line. Only that message: a missed run time
    ("Run time of job ... was missed", from apscheduler.executors.*) and any other apscheduler warning stay
    warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "maximum number of running instances reached" not in str(record.msg):
            return True
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


def quiet_skips(logger: logging.Logger | None = None) -> None:
    """Put `_SkipsAtInfo` on apscheduler's scheduler logger (once, however many schedulers are built)."""
    logger = logger or logging.getLogger("apscheduler.scheduler")
    if not any(isinstance(f, _SkipsAtInfo) for f in logger.filters):
        logger.addFilter(_SkipsAtInfo())


class _Reschedules:
    """Whether a job may still move its own next run (`_retrying_sooner`): not once the worker stops.

    `scheduler.shutdown(wait=True)` holds the scheduler's job-store lock while it waits for the running
    jobs, and moving a job takes that lock: a job that failed during the wait (the provider failing,
    a report directory full) and asked for its next run would wait on the shutdown, and the shutdown
    on it, until systemd's SIGKILL. `close()` comes before the shutdown, under the same lock as each move."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = True

    def close(self) -> None:
        with self.lock:
            self.open = False


def build_scheduler(config: Config, *, lease: WorkerLease | None = None, jobs: Sequence[JobSpec] = JOBS,
                    client_factory: Callable[[Config, Database, str], Any] | None = None,
                    reschedules: _Reschedules | None = None) -> BackgroundScheduler:
    """A configured, not yet started scheduler: every job of the table, plus the lease renewal.
    `reschedules`: closed before the scheduler is shut down (see _Reschedules)."""
    # coalesce=True: runs missed while the process was paused or a job was slow collapse into one
    # run, not a burst (every job reads current state, so one run catches up all of them).
    # max_instances=1: a job never overlaps itself (twice the API calls, the same rows contended).
    # misfire_grace_time per job (see JOBS): short for the 3-5 s pollers, long for the hourly check.
    quiet_skips()  # the skips max_instances=1 makes are INFO, not a WARNING each (_SkipsAtInfo)
    scheduler = BackgroundScheduler(
        timezone=timezone.utc,
        executors={"default": ThreadPoolExecutor(max_workers=max(2, len(jobs))),
                   "lease": ThreadPoolExecutor(max_workers=1)},
        job_defaults={"coalesce": True, "max_instances": 1},
    )
    may_run = (lambda: lease.held) if lease is not None else (lambda: True)
    reschedules = reschedules or _Reschedules()
    start = utcnow()
    for offset, spec in enumerate(jobs):
        runner = JobRunner(config, spec, may_run=may_run, client_factory=client_factory)
        if spec.retry_after_error_s is not None:
            runner = _retrying_sooner(scheduler, runner, reschedules)
        scheduler.add_job(runner, IntervalTrigger(seconds=spec.every_s, timezone=timezone.utc), id=spec.id,
                          name=spec.id, misfire_grace_time=spec.misfire_grace_s, coalesce=True, max_instances=1,
                          next_run_time=start + timedelta(milliseconds=200 * offset), replace_existing=True)
    if lease is not None:
        scheduler.add_job(lease.renew, IntervalTrigger(seconds=LEASE_RENEW_S, timezone=timezone.utc),
                          id="renew-lease", name="renew-lease", executor="lease", misfire_grace_time=int(LEASE_RENEW_S),
                          coalesce=True, max_instances=1)
    return scheduler


def put_timers_right(scheduler: BackgroundScheduler, now: datetime | None = None) -> list[str]:
    """Run now each job whose next run lies further ahead than its interval and CLOCK_STEP_MARGIN_S; their ids.

    APScheduler 3.x times an interval job's next run from its last, on the wall clock: after this host's clock is
    stepped back (NTP putting right a clock that ran ahead, a VM resumed from an old snapshot), every job, the lease's
    renewal included, would wait as long as the clock was off (a day ahead: a day without polls, fetches or
    reports, and the lease lapsed; agronholm/apscheduler#351). The worker's loop calls this every second: a moving
    next run is a few job lookups, and nothing to do but after a step. A job moved this way runs now, and its
    interval counts on from that run."""
    now = now or utcnow()
    moved = []
    for job in scheduler.get_jobs():
        interval = getattr(job.trigger, "interval", None)
        if job.next_run_time is None or interval is None:
            continue
        if job.next_run_time - now > interval + timedelta(seconds=CLOCK_STEP_MARGIN_S):
            moved.append((job.id, job.next_run_time))
            job.modify(next_run_time=now)
    if moved:
        log.warning("this host's clock was stepped back: %d job(s) were next due as late as %s; they run now, and on "
                    "their intervals from then", len(moved), iso(max(at for _, at in moved)),
                    extra={"jobs": [job_id for job_id, _ in moved]})
    return [job_id for job_id, _ in moved]


def _retrying_sooner(scheduler: BackgroundScheduler, runner: JobRunner,
                     reschedules: _Reschedules) -> Callable[[], dict[str, Any]]:
    """The runner, followed after a run that ended in an error by a next run sooner than the job's turn
    (JobSpec.retry_in); the interval then counts on from that run. Not once the worker stops (_Reschedules)."""
    def run() -> dict[str, Any]:
        record = runner()
        delay = runner.spec.retry_in(runner.errors_in_row)
        if delay is None:
            return record
        with reschedules.lock:
            job = scheduler.get_job(runner.spec.id) if reschedules.open else None
            if job is not None and job.next_run_time is not None:
                sooner, turn = utcnow() + timedelta(seconds=delay), job.next_run_time
                if sooner < turn:
                    job.modify(next_run_time=sooner)
                    log.info("job %s failed; trying again at %s, not at its turn (%s)", runner.spec.id, iso(sooner),
                             iso(turn), extra={"job": runner.spec.id, "errors_in_row": runner.errors_in_row})
        return record

    return run


def run_once(config: Config, *, jobs: Sequence[JobSpec] = JOBS,
             client_factory: Callable[[Config, Database, str], Any] | None = None) -> list[dict[str, Any]]:
    """One pass of every job, in table order, ignoring intervals, under the lease (for cron and tests).

    SIGTERM or SIGINT stops it as it stops the worker: a running sync walk ends at its next batch with its
    place kept (partnerkit.walks.WalkStopped), and the jobs after it are not run; both have the outcome
    `stopped`."""
    stop = threading.Event()
    db = open_db(config.db_path, busy_timeout_ms=WORKER_BUSY_TIMEOUT_MS)
    lease = WorkerLease(db)
    restore = _install_signal_handlers(stop, stop_walks_too=True)
    try:
        check_account(config, db, client_factory)  # another account's key: refused before any job runs
        lease.acquire(wait=False)
        results = []
        for spec in jobs:
            if stop.is_set():
                results.append({"job": spec.id, "outcome": "stopped", "duration_ms": 0,
                                "result": "not run: the worker was asked to stop (SIGTERM or SIGINT)"})
                continue
            runner = JobRunner(config, spec, may_run=lambda: lease.held, client_factory=client_factory)
            try:
                results.append(runner())
            finally:
                runner.close()
            lease.renew()
        return results
    finally:
        restore()
        allow_walks()
        lease.release()
        db.conn.close()


def run_worker(config: Config, *, wait_for_lease: bool = True, stop: threading.Event | None = None,
               jobs: Sequence[JobSpec] = JOBS,
               client_factory: Callable[[Config, Database, str], Any] | None = None) -> int:
    """Run the scheduler until SIGTERM/SIGINT (or `stop`); return the process exit code."""
    refuse_inside_gunicorn()
    stop = stop or threading.Event()
    _install_signal_handlers(stop)
    db = _open_waiting(config, wait=wait_for_lease, stop=stop)
    if db is None:
        log.info("worker stopped while waiting for its database")
        return 0
    lease = WorkerLease(db)
    try:
        check_account(config, db, client_factory)  # another account's key: refused before any job runs
        try:
            lease.acquire(wait=wait_for_lease, stop=stop)
        except WorkerBusy:
            if not stop.is_set():
                raise
            # SIGTERM to a standby worker is a clean stop (systemd's `stop`), not a failure.
            log.info("worker stopped while standing by for the lease")
            return 0
        reschedules = _Reschedules()
        scheduler = build_scheduler(config, lease=lease, jobs=jobs, client_factory=client_factory,
                                    reschedules=reschedules)
        scheduler.start()
        log.info("worker started with jobs %s", ", ".join(s.id for s in jobs), extra={"holder": lease.holder})
        while not stop.is_set() and not lease.lost.is_set():
            stop.wait(1.0)
            put_timers_right(scheduler)
        log.info("worker stopping: waiting for running jobs (a sync walk ends at its next batch, its place kept)")
        # A running walk ends at its next batch (systemd sends SIGKILL 60 s after SIGTERM); any other job finishes
        # its pass.
        stop_walks()
        reschedules.close()
        scheduler.shutdown(wait=True)  # let a running job finish its transaction
        return 1 if lease.lost.is_set() else 0
    finally:
        allow_walks()
        lease.release()
        db.conn.close()


def _open_waiting(config: Config, *, wait: bool, stop: threading.Event, poll_s: float = LEASE_POLL_S) -> Database | None:
    """The worker's database, waiting (as for a busy lease) while it cannot be opened for writing: a
    file read-only for a moment (a remount, a restore, the wrong owner) is refused at open rather than
    opened read-only for good (partnerkit.store.db), and a worker exiting on it would soon meet
    systemd's restart limit. None when stopped while waiting; without `wait`, the error is raised."""
    refused = 0
    while True:
        try:
            db = open_db(config.db_path, busy_timeout_ms=WORKER_BUSY_TIMEOUT_MS)
            if refused:
                log.info("database opened after %d refused attempt(s)", refused)
            return db
        except StorageError as exc:
            if not wait:
                raise
            refused += 1  # one WARNING, not one every poll_s for as long as it lasts
            log.log(logging.WARNING if refused == 1 else logging.DEBUG, "cannot open the database yet (%s); "
                    "retrying every %.0f s", exc, poll_s)
            if stop.wait(poll_s):
                return None


def _install_signal_handlers(stop: threading.Event, *, stop_walks_too: bool = False) -> Callable[[], None]:
    """SIGTERM and SIGINT set `stop` (and, with `stop_walks_too`, end the running walk at its next batch);
    returns what puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may install handlers; the caller owns `stop` then

    def handle(signum: int, _frame: Any) -> None:
        log.info("worker received %s", signal.Signals(signum).name)
        stop.set()
        if stop_walks_too:
            stop_walks()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore
