"""A storage fault that lasts is one log line per episode, not one per run: a full database disk (the 3- and
5-second jobs logged about 1,900 ERRORs an hour), and apscheduler's skip of a job whose previous run still
waits (a WARNING per skipped turn beside the job's one `busy` line). A real tmpfs filled to its last byte,
as tests/reliability/test_storage.py does; mounting needs root, and is skipped with the reason elsewhere."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from apscheduler.events import EVENT_JOB_MAX_INSTANCES

from partnerkit.store import meta, open_db, transaction
from partnerkit.timeutil import utcnow
from reconcile.scheduler import build_scheduler
from reconcile.worker_jobs import JobRunner, JobSpec
from tests.reliability.crash_stack import wait_until
from tests.reliability.storage_faults import fill, tiny_filesystem, truncate_wal

FULL = "database or disk is full"
WORK = {"write": True}  # what `write_job` does on its next run: write a row, or find nothing to do
RELEASE = threading.Event()


def write_job(config, db, client):
    """A test job that writes a row each run (as the poller's budget take and a voucher fetch's store do), or,
    told to, finds nothing to do and writes nothing (an idle pass)."""
    if not WORK["write"]:
        return {"written": 0}
    with transaction(db) as conn:
        meta.put(conn, "test.write_job", "x" * 8192, now=utcnow())  # two pages: the WAL must grow
    return {"written": 1}


def held_job(config, db, client):
    """A test job whose run lasts until the test releases it (a run waiting out another process's lock)."""
    RELEASE.wait(60)  # the bound only ends a broken run
    return {"written": 0}


WRITER = JobSpec("write-job", f"{__name__}:write_job", 3, 3, "test", calls_api=False)


def _loud(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO
            and r.name == "reconcile.worker"]


def test_a_full_disk_is_one_error_per_episode_then_one_info_once_the_job_writes_again(tmp_path, sandbox_config,
                                                                                       caplog):
    with tiny_filesystem(tmp_path / "data", "16m") as data:
        config = replace(sandbox_config, db_path=data / "partnerkit.db")
        open_db(config.db_path).conn.close()
        runner = JobRunner(config, WRITER, client_factory=lambda *a: None)
        try:
            WORK["write"] = True
            assert runner()["outcome"] == "ok"
            truncate_wal(config.db_path)
            filler = fill(data)
            with caplog.at_level(logging.DEBUG, logger="reconcile.worker"):
                full = [runner() for _ in range(3)]
                WORK["write"] = False  # passes with nothing to do while the disk is still full: no sign either way
                idle = [runner() for _ in range(2)]
                WORK["write"] = True
                full.append(runner())
                filler.unlink()  # space is back; the tmpfs still has under 100 MB free
                WORK["write"] = False
                idle.append(runner())
                WORK["write"] = True
                back = runner()
            episode = _loud(caplog)
            debug = [r for r in caplog.records if r.levelno == logging.DEBUG and "still cannot be written" in r.getMessage()]

            caplog.clear()  # a second episode is logged again
            truncate_wal(config.db_path)
            filler = fill(data)
            with caplog.at_level(logging.INFO, logger="reconcile.worker"):
                again = [runner() for _ in range(2)]
            filler.unlink()
            second = _loud(caplog)
        finally:
            runner.close()

    assert [r["outcome"] for r in full] == ["error"] * 4 and all(FULL in r["result"] for r in full)
    assert [r["outcome"] for r in idle] == ["ok"] * 3 and back["outcome"] == "ok"
    [(level, first), (info_level, cleared), after] = episode
    assert after == ("INFO", "job write-job ok")  # the run that wrote, logged as usual
    assert level == "ERROR" and first.startswith("job write-job error: the database cannot be written (StorageError: ")
    assert f"{FULL}): free space on PARTNERKIT_DB's filesystem (`df -h` and `du` on its directory" in first
    assert "further failures for this reason are logged at DEBUG until it writes again" in first
    assert info_level == "INFO" and cleared.startswith("job write-job: the database can be written again; its full "
                                                       "or read-only filesystem cleared after ")
    assert cleared.endswith(" s, 4 failure(s)")
    assert len(debug) == 3  # the episode's other failed runs, still there at DEBUG
    assert [r["outcome"] for r in again] == ["error", "error"]
    assert [level for level, _ in second] == ["ERROR"] and second[0][1].startswith("job write-job error: ")


def test_apschedulers_skip_of_a_job_still_running_is_info_not_a_warning(sandbox_config, caplog):
    """A run waiting out a lock made one `busy` WARNING, and apscheduler one WARNING per skipped turn beside it."""
    from partnerkit.logs import configure_logging

    configure_logging(sandbox_config)  # apscheduler.scheduler at WARNING, as in the worker
    spec = JobSpec("held", f"{__name__}:held_job", 0.05, 1, "test", calls_api=False)
    skipped: list[object] = []

    def run_until_skipped(times: int) -> None:
        RELEASE.clear()
        scheduler = build_scheduler(sandbox_config, jobs=(spec,), client_factory=lambda *a: None)
        scheduler.add_listener(skipped.append, EVENT_JOB_MAX_INSTANCES)
        scheduler.start()
        try:
            wait_until(lambda: len(skipped) >= times, timeout=60, step=0.05, what=f"{times} skipped turns")
        finally:
            RELEASE.set()
            scheduler.shutdown(wait=True)

    run_until_skipped(3)
    at_default = [r for r in caplog.records if "maximum number of running instances" in r.getMessage()]
    caplog.clear()
    skipped.clear()
    with caplog.at_level(logging.INFO, logger="apscheduler.scheduler"):  # where apscheduler's INFO lines show
        run_until_skipped(2)
    shown = [r for r in caplog.records if "maximum number of running instances" in r.getMessage()]
    caplog.clear()
    logging.getLogger("apscheduler.scheduler").warning("Executor lookup failed")  # any other of its warnings
    other = [(r.levelname, r.getMessage()) for r in caplog.records]

    assert at_default == [], "a skip is no WARNING at partnerkit's levels"
    assert len(shown) >= 2 and {r.levelname for r in shown} == {"INFO"}
    assert other == [("WARNING", "Executor lookup failed")], "only the skip is held at INFO"
