"""`partnerkit status` names a nightly run that failed at once, with why, when and which night, until a run
succeeds (or the night is reported by hand); and a PARTNERKIT_REPORT_DIR that cannot take the files before
the night comes. Before, only "overdue ... the log lines say why", from two hours past the due hour.

Root may write any directory whatever its mode, so an unwritable report directory is a file where the
directory should be (as tests/worker/test_worker.py puts a directory where the database file belongs), or a
real read-only tmpfs (tests/reliability/storage_faults.py)."""

from __future__ import annotations

import re
from datetime import date, timedelta

from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.status import collect, gauges
from partnerkit.store import reports
from partnerkit.timeutil import utcnow
from reconcile.jobs import due_at
from reconcile.worker_jobs import JOBS, JobRunner
from tests.conftest import account_of
from tests.reliability.storage_faults import tiny_filesystem

NIGHTLY = next(s for s in JOBS if s.id == "nightly-report")
FAILED = "the nightly report run failed at "


def _lines(status: dict, start: str) -> list[str]:
    return [line for line in status["attention"] if line.startswith(start)]


def _failed_night(config, db) -> tuple[dict, str]:
    """The worker's nightly-report job run once with a file where PARTNERKIT_REPORT_DIR should be: its record, and
    the night it was reporting (its error names it)."""
    config.report_dir.write_text("a file where the report directory belongs\n")
    runner = JobRunner(config, NIGHTLY)
    try:
        record = runner()
    finally:
        runner.close()
    assert record["outcome"] == "error", record
    night = re.search(r"writing the report of (\d{4}-\d{2}-\d{2}) into PARTNERKIT_REPORT_DIR", record["result"])
    assert night is not None, record["result"]
    return record, night.group(1)


def test_a_failed_nightly_run_is_named_at_once_and_cleared_by_the_next_run_that_succeeds(sandbox_config, db):
    account_of(db, sandbox_config.api_key)
    before = utcnow().replace(microsecond=0)
    failed, night = _failed_night(sandbox_config, db)
    status = collect(sandbox_config, db)
    scraped = gauges(sandbox_config, db)  # what the receiver's /metrics carries
    sandbox_config.report_dir.unlink()  # fixed: the next attempt writes the night
    runner = JobRunner(sandbox_config, NIGHTLY)
    try:
        done = runner()
    finally:
        runner.close()
    after = collect(sandbox_config, db)
    scraped_after = gauges(sandbox_config, db)

    assert status["nightly_last_error"] == failed["result"]
    assert before <= status["nightly_last_error_at"] <= utcnow()
    assert status["nightly_last_error_dates"] == [night]
    [line] = _lines(status, FAILED)
    assert f" reporting {night}: {failed['result']}" in line
    assert "Make PARTNERKIT_REPORT_DIR writable again" in line and f"`partnerkit reconcile --date {night}`" in line
    assert status["report_dir_unwritable"] == f"{sandbox_config.report_dir} is a file, not a directory"
    [dir_line] = _lines(status, "PARTNERKIT_REPORT_DIR cannot take the nightly report's files: ")
    assert f"{sandbox_config.report_dir} is a file, not a directory" in dir_line

    assert done["outcome"] == "ok" and [r["date"] for r in done["result"]] == [night]
    assert (after["nightly_last_error"], after["nightly_last_error_at"], after["nightly_last_error_dates"]) == (
        None, None, [])
    assert after["report_dir_unwritable"] is None and after["report_dir_free_bytes"] > 0
    assert not _lines(after, FAILED) and not _lines(after, "PARTNERKIT_REPORT_DIR")
    # An alert on the scrape alone fires at the failure, whatever the hour (partnerkit_report_overdue waits for the
    # due hour to pass).
    assert (scraped["nightly_failed"], scraped["report_dir_unwritable"]) == (1, 1)
    assert (scraped_after["nightly_failed"], scraped_after["report_dir_unwritable"]) == (0, 0)


def test_the_failed_run_stands_in_for_the_overdue_line_until_the_night_is_reported_by_hand(sandbox_config, db):
    account_of(db, sandbox_config.api_key)
    failed, night = _failed_night(sandbox_config, db)
    late = due_at(date.fromisoformat(night), sandbox_config.due_hour_utc) + timedelta(hours=2, minutes=1)
    with freeze_time(late):
        status = collect(sandbox_config, db)
    sandbox_config.report_dir.unlink()
    by_hand = CliRunner().invoke(cli, ["reconcile", "--date", night], env=config_as_env(sandbox_config))
    with freeze_time(late):
        reported = collect(sandbox_config, db)

    assert status["report_overdue_date"] == night
    [line] = _lines(status, FAILED)
    assert f"; the report for {night} is overdue. " in line
    assert not [line for line in status["attention"] if " is overdue (" in line], "one line for one cause"
    assert by_hand.exit_code == 0, by_hand.output
    # The worker has not run again, but the night it failed has its report now: nothing is left to say.
    assert reported["nightly_last_error"] is None and reported["report_overdue_date"] is None
    assert not _lines(reported, FAILED)


def test_a_run_that_failed_after_saving_its_night_is_still_named(sandbox_config, db):
    """A run fails matching an earlier day again, its night's report already saved: not cleared by that report."""
    from partnerkit.store import nightly_failure

    night = "2026-11-20"
    reports.save_report(db, {"date": night, "generated_at": "2026-11-21T01:00:00Z", "summary": {}, "drifts": []})
    nightly_failure.failed(db, "OSError: [Errno 28] No space left on device (writing the report of 2026-11-14 "
                           "into PARTNERKIT_REPORT_DIR /srv/reports)", [night], utcnow())
    assert collect(sandbox_config, db)["nightly_last_error_dates"] == [night]
    reports.save_report(db, {"date": night, "generated_at": "2026-11-21T01:20:00Z", "summary": {}, "drifts": []})
    assert collect(sandbox_config, db)["nightly_last_error"] is None  # reported again since


def test_a_report_directory_on_a_read_only_filesystem_is_named_before_the_night(tmp_path, sandbox_config, db):
    from dataclasses import replace

    with tiny_filesystem(tmp_path / "ro", "1m", read_only=True) as mount:
        config = replace(sandbox_config, report_dir=mount / "reports")  # not there yet: the run would make it
        status = collect(config, db)
    healthy = collect(replace(sandbox_config, report_dir=tmp_path / "not" / "yet"), db)

    assert status["report_dir_unwritable"] == f"{mount} is on a filesystem mounted read-only"
    [line] = _lines(status, "PARTNERKIT_REPORT_DIR cannot take the nightly report's files: ")
    assert "make it a directory the services' user can write, mounted read-write, with room" in line
    assert healthy["report_dir_unwritable"] is None and not _lines(healthy, "PARTNERKIT_REPORT_DIR")

