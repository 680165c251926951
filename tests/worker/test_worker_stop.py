"""Stopping the worker (SIGTERM, `stop`) while a job runs: the running sync walk is told to end, and a job that
fails during the stop does not hold the process up (systemd's SIGKILL comes 60 s after its SIGTERM)."""

from __future__ import annotations

import sys
import threading
import time

from partnerkit import walks
from reconcile.scheduler import run_worker
from reconcile.worker_jobs import JobSpec
from tests.standin import StandIn

STARTED, FAIL = threading.Event(), threading.Event()
WALKS_STOPPED: list[bool] = []


def fails_while_the_worker_stops(config, db, client):
    """A job still running when the worker stops, which then fails (the provider failing, a full disk)."""
    STARTED.set()
    FAIL.wait(10)
    WALKS_STOPPED.append(walks.walks_stopping())  # a sync walk running now would end at its next batch
    raise OSError(28, "No space left on device")


def test_a_job_that_fails_while_the_worker_stops_does_not_hold_the_stop_up(config, monkeypatch):
    # It asks for its next run sooner (retry_after_error_s), which takes the scheduler's job-store lock that
    # the shutdown holds while it waits for the job: before, each waited for the other until SIGKILL.
    monkeypatch.delitem(sys.modules, "gunicorn", raising=False)  # the receiver's tests import it
    STARTED.clear()
    FAIL.clear()
    WALKS_STOPPED.clear()
    spec = JobSpec("flaky", f"{__name__}:fails_while_the_worker_stops", 3600, 3600, "test", retry_after_error_s=300)
    stop = threading.Event()
    codes: list[object] = []

    def worker() -> None:
        try:
            codes.append(run_worker(config, stop=stop, jobs=(spec,), client_factory=lambda *a: StandIn()))
        except Exception as exc:  # noqa: BLE001 - shown by the assertion below
            codes.append(exc)

    thread = threading.Thread(target=worker, daemon=True)  # daemon: a deadlock must not hang the suite
    thread.start()
    assert STARTED.wait(10), "the job never started"
    stop.set()
    time.sleep(1.5)  # the worker sees the stop within a second and waits for its running job
    stopped = time.monotonic()
    FAIL.set()
    thread.join(timeout=15)
    assert not thread.is_alive(), "the worker did not stop: the failed job and the shutdown wait for each other"
    assert codes == [0]
    assert time.monotonic() - stopped < 5
    assert WALKS_STOPPED == [True]
    assert not walks.walks_stopping(), "walks run to their end again once the worker has stopped"
