"""Another process holding the write lock for seconds (a big day's nightly match, a backup's checkpoint,
a prune): a command waits it out and says so once, or ends in one line saying nothing was written or
sent; a worker job logs one WARNING per episode, never an ERROR traceback per run.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.processes import is_partnerkit
from partnerkit.store import meta, open_db, transaction
from partnerkit.store.db import COMMAND_BUSY_TIMEOUT_MS, WORKER_BUSY_TIMEOUT_MS, LockWait, connect
from partnerkit.store.migrations import current_version, discover, migrate
from reconcile import scheduler
from reconcile.worker_jobs import JobRunner, JobSpec
from tests.conftest import account_of
from tests.reliability.storage_faults import held_write_lock

NOTICE = "waiting for the database: another "
# Who holds the lock in these tests: a connection of the test's own process (`held_write_lock`), as the notice and
# the error say it (partnerkit.processes.database_writer).
HOLDER = "another connection of this process is writing: a big day's match, a backup, a prune or a key rewrap can " \
         "hold it for seconds"
PRUNE = JobSpec("prune-events", "partnerkit.retention:prune_events", 3600, 60, "housekeeping", calls_api=False)


@pytest.fixture
def run(sandbox_config, monkeypatch):
    """`partnerkit ...` through click, on the sandbox, with a migrated database that knows its account."""
    for name, value in config_as_env(sandbox_config).items():
        monkeypatch.setenv(name, value)
    db = open_db(sandbox_config.db_path)
    account_of(db, sandbox_config.api_key)  # a cashier's store knows its account: no wallet read first
    db.conn.close()
    return lambda *args: CliRunner().invoke(cli, list(args))


@contextmanager
def held_for(db_path, seconds: float, *, until: Callable[[], bool] | None = None, then_s: float = 0.0):
    """The write lock held by another connection for `seconds` from now, in a thread; with `until`, held until it
    is true instead (at most `seconds`: the bound only ends a broken run), then `then_s` more."""
    taken = threading.Event()

    def hold() -> None:
        with held_write_lock(db_path):
            taken.set()
            if until is None:
                time.sleep(seconds)
            else:
                deadline = time.monotonic() + seconds
                while not until() and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(then_s)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        holder.join(seconds + 30)


def recharges_at_the_sandbox(server, number: str) -> list:
    with server.sandbox.lock:
        return [r for r in server.sandbox.recharges.values() if r.mobile_number == number]


def test_a_submit_waits_out_a_hold_shorter_than_its_wait_and_says_so_once(
        run, sandbox_config, sandbox_server, monkeypatch):
    # The notice after 0.3 s, not 1 s: the command has 1.7 s of the hold to reach its wait, on a busy machine too.
    monkeypatch.setattr("partnerkit.store.db.LOCK_NOTICE_AFTER_S", 0.3)
    with held_for(sandbox_config.db_path, 2.0):
        result = run("recharges", "submit", "--mobile", "9811111115", "--operator-id", "1", "--amount", "175",
                     "--format", "json")
    # It did wait for the lock: it says so (below), and it wrote and ended well (exit 0) under a hold of 2 s. Not
    # measured by the clock: that it did not end before the hold did is what exit 0 says already.
    assert result.exit_code == 0, result.output
    notices = [line for line in result.stderr.splitlines() if NOTICE in line]
    assert notices == [f"waiting for the database: {HOLDER}; waiting up to {COMMAND_BUSY_TIMEOUT_MS // 1000} s"]
    assert json.loads(result.stdout)["status"] == "PROCESSING"
    assert len(recharges_at_the_sandbox(sandbox_server, "9811111115")) == 1


def test_each_wait_past_the_threshold_says_so_once_and_a_shorter_one_says_nothing(db_path):
    # A long command (a sync of many pages, `events prune`, `keys rewrap`) may wait again minutes after its
    # first wait ended: that is a new wait, and silence then looks like a hang. A long hold lasts until the
    # waiting connection has said it waits (past the threshold by definition, however busy the machine), then
    # 0.3 s of further tries that must say nothing more; the short one is 0.05 s against the real 1 s threshold.
    notices: list[float] = []
    db = open_db(db_path, busy_timeout_ms=60_000, lock_wait=LockWait(notice=lambda waited, _: notices.append(waited)))
    try:
        seen = []
        for long in (True, False, True):  # a wait past the threshold, a short one, then a long one again
            said = len(notices)
            with held_for(db_path, 30 if long else 0.05, until=(lambda: len(notices) > said) if long else None,
                          then_s=0.3):
                with transaction(db):
                    pass
            seen.append(len(notices))
    finally:
        db.conn.close()
    assert seen == [1, 1, 2]  # one line per long wait (not one per try), none for the short wait
    assert notices == [60.0, 60.0]  # each says how long it may wait


def test_a_hold_longer_than_the_wait_is_one_line_exit_1_nothing_recorded_nothing_sent(
        run, sandbox_config, sandbox_server, monkeypatch):
    monkeypatch.setattr("partnerkit.cli.context.COMMAND_BUSY_TIMEOUT_MS", 1000)  # the 30 s, shortened for the test
    with held_write_lock(sandbox_config.db_path):
        result = run("recharges", "submit", "--mobile", "9811111116", "--operator-id", "1", "--amount", "175")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert error == (f"Error: cannot start a transaction: the database stayed locked for 1 s ({HOLDER}); nothing "
                     "was written by this step; no recharge was sent to the provider; submit it again once the "
                     "database is free")
    assert recharges_at_the_sandbox(sandbox_server, "9811111116") == []
    db = open_db(sandbox_config.db_path)
    try:
        assert db.execute("SELECT COUNT(*) FROM recharges").fetchone()[0] == 0  # no intent left behind
    finally:
        db.conn.close()


def test_a_finance_command_under_a_long_hold_says_to_try_again_and_budget_show_answers_at_once(
        run, sandbox_config, monkeypatch):
    monkeypatch.setattr("partnerkit.cli.context.COMMAND_BUSY_TIMEOUT_MS", 1500)
    with held_write_lock(sandbox_config.db_path):
        shown = run("budget", "show", "--format", "json")
        pruned = run("events", "prune")
    # `budget show` reads the database only: no write lock, so no wait and no notice (it used to need one). The
    # lock is held all through: a command that wanted it would have ended in the 1.5 s wait's error, exit 1.
    assert shown.exit_code == 0, shown.output
    assert NOTICE not in shown.stderr
    assert {row["class"] for row in json.loads(shown.stdout)} == {"general", "order_create"}
    assert pruned.exit_code == 1 and "Traceback" not in pruned.output
    assert pruned.stderr.count(NOTICE) == 1
    assert pruned.stderr.strip().splitlines()[-1].endswith("nothing was written by this step; try again in a minute")


@pytest.fixture
def one_migration_behind(tmp_path, monkeypatch):
    """A database a release behind (its newest migration pending, as after an upgrade), holding one row, and
    the settings that name it; returns the path."""
    path = tmp_path / "partnerkit.db"
    for name, value in {"PARTNERKIT_DB": str(path), "PARTNERKIT_API_BASE_URL": "http://127.0.0.1:9",
                        "PARTNERKIT_API_KEY": "pk_test_behind", "PARTNERKIT_API_SECRET": "sk_test_behind",
                        "PARTNERKIT_WEBHOOK_TOKENS": "bootstrap-token-for-tests"}.items():
        monkeypatch.setenv(name, value)
    db = connect(path)
    migrate(db, discover()[:-1])
    with transaction(db) as conn:
        meta.put(conn, "kept.through.a.busy.open", "yes", now=datetime(2024, 5, 1, tzinfo=timezone.utc))
    db.conn.close()
    return path


def version_and_row(path) -> tuple[int, str | None]:
    db = connect(path)
    try:
        return current_version(db), meta.get(db, "kept.through.a.busy.open")
    finally:
        db.conn.close()


def test_a_migration_pending_at_open_waits_out_a_hold_and_says_so_once(one_migration_behind, monkeypatch):
    # The worker of the release before holds a long write while a person runs a command of the new one:
    # the command's first step, the migration, waits like any write, and says so.
    monkeypatch.setattr("partnerkit.store.db.LOCK_NOTICE_AFTER_S", 0.3)  # the 1 s, shortened for the test
    with held_for(one_migration_behind, 1.0):
        result = CliRunner().invoke(cli, ["drifts", "list", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count(NOTICE) == 1
    assert json.loads(result.stdout) == []
    assert version_and_row(one_migration_behind) == (discover()[-1].version, "yes")


def test_a_migration_pending_at_open_under_a_longer_hold_is_one_line_exit_1_nothing_lost(
        one_migration_behind, monkeypatch):
    monkeypatch.setattr("partnerkit.cli.context.COMMAND_BUSY_TIMEOUT_MS", 1000)  # the 30 s, shortened for the test
    monkeypatch.setattr("partnerkit.store.db.LOCK_NOTICE_AFTER_S", 0.3)
    newest = discover()[-1]
    with held_write_lock(one_migration_behind):
        result = CliRunner().invoke(cli, ["drifts", "list"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.stderr.count(NOTICE) == 1
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert error == (f"Error: cannot apply schema migration {newest.version} ({newest.name}): the database stayed "
                     f"locked for 1 s ({HOLDER}); nothing was written by this step; try again in a minute")
    # Nothing applied, nothing lost: the next command (the lock free) applies it.
    assert version_and_row(one_migration_behind) == (newest.version - 1, "yes")
    assert CliRunner().invoke(cli, ["drifts", "list"]).exit_code == 0
    assert version_and_row(one_migration_behind) == (newest.version, "yes")


def test_a_worker_job_meeting_a_long_hold_logs_one_warning_per_episode_and_runs_again(
        db_path, sandbox_config, monkeypatch, caplog):
    monkeypatch.setattr("reconcile.worker_jobs.WORKER_BUSY_TIMEOUT_MS", 1000)  # the 15 s, shortened for the test
    open_db(db_path).conn.close()
    runner = JobRunner(sandbox_config, PRUNE, client_factory=lambda *_: None)
    try:
        with caplog.at_level(logging.DEBUG, logger="reconcile.worker"):
            with held_write_lock(sandbox_config.db_path):
                outcomes = [runner()["outcome"] for _ in range(2)]
            after = runner()
    finally:
        runner.close()
    assert outcomes == ["busy", "busy"]
    assert after["outcome"] == "ok"
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in loud] == [
        "job prune-events: database busy; the job runs again at its next run (another process held the write lock "
        "for more than 1 s)"]
    assert loud[0].exc_info is None  # a transient, not a traceback
    assert runner.errors_in_row == 0 and runner.busy_in_row == 0  # the episode ended with the run that got through


def test_a_lease_renewal_that_waits_the_worker_s_whole_busy_timeout_still_lands_before_the_lease_lapses():
    assert scheduler.LEASE_RENEW_S + WORKER_BUSY_TIMEOUT_MS / 1000 < scheduler.LEASE_TTL_S
    assert WORKER_BUSY_TIMEOUT_MS > 5000  # longer than the default: a job waits out a few seconds' hold


_HOLD = ("import sqlite3, sys\n"
         "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "conn.execute('BEGIN IMMEDIATE')\n"
         "print('held', flush=True)\n"
         "sys.stdin.readline()\n"
         "conn.execute('ROLLBACK')\n")


class _Holder:
    """Another process holding the write lock (`held_by`), until `release`."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.pid = process, process.pid

    def release(self) -> None:
        """End its transaction and its input (idempotent): a sqlite3 shell and the Python holder both end then."""
        if self.process.stdin.closed:
            return
        try:
            self.process.stdin.write("ROLLBACK;\n")  # the shell's; a line that ends the Python holder's wait
            self.process.stdin.close()
        except BrokenPipeError:
            pass


@contextmanager
def held_by(program: str, db_path):
    """The write lock held by another process, until `release`: a `sqlite3` shell inside a transaction, or a Python
    process whose command line reads as partnerkit's console script (`partnerkit -c ...`)."""
    if program == "sqlite3":
        if shutil.which("sqlite3") is None:
            pytest.skip("no sqlite3 shell on this machine")
        process = subprocess.Popen(["sqlite3", str(db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        process.stdin.write("BEGIN IMMEDIATE;\nSELECT 'held';\n")
        process.stdin.flush()
    else:
        process = subprocess.Popen(["partnerkit", "-c", _HOLD, str(db_path)], executable=sys.executable,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    holder = _Holder(process)
    try:
        assert process.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.release()
        process.wait(30)
        process.stdout.close()


@pytest.mark.parametrize("program, said", [
    ("sqlite3", "another process (pid {pid}: sqlite3), not partnerkit, is writing: it holds the lock until its "
                "transaction ends (in a sqlite3 shell, until COMMIT or ROLLBACK there)"),
    ("partnerkit", "another partnerkit process (pid {pid}) is writing: a big day's match, a backup, a prune or a "
                   "key rewrap can hold it for seconds"),
])
def test_the_notice_names_the_process_holding_the_lock_and_partnerkit_only_when_it_is(db_path, monkeypatch,
                                                                                     program, said):
    monkeypatch.setattr("partnerkit.store.db.LOCK_NOTICE_AFTER_S", 0.3)
    writers: list[str] = []
    db = open_db(db_path)
    db.conn.close()
    with held_by(program, db_path) as holder:
        def noticed(waited: float, writer: str) -> None:
            writers.append(writer)
            holder.release()  # let go once named

        db = open_db(db_path, busy_timeout_ms=60_000, lock_wait=LockWait(notice=noticed))
        try:
            with transaction(db):  # its BEGIN waits for the lock
                pass
        finally:
            db.conn.close()
    assert writers == [said.format(pid=holder.pid)]


@pytest.mark.parametrize("argv, ours", [
    (["/opt/partnerkit/.venv/bin/partnerkit", "worker"], True),
    (["/opt/partnerkit/.venv/bin/python3", "/opt/partnerkit/.venv/bin/partnerkit", "status"], True),
    (["python3", "-m", "partnerkit", "orders", "sync"], True),
    (["/usr/bin/python3", "-m", "receiver.gunicorn_app", "--bind", "127.0.0.1:8000"], True),
    (["gunicorn: worker [partnerkit-receiver]"], True),
    (["sqlite3", "/var/lib/partnerkit/partnerkit.db"], False),  # the path names partnerkit; the program does not
    (["/opt/partnerkit/.venv/bin/python3", "backup.py", "/var/lib/partnerkit/partnerkit.db"], False),
    (["python3", "-m", "sqlite3", "partnerkit.db"], False),
])
def test_a_command_line_is_partnerkit_by_its_program_never_by_its_arguments(argv, ours):
    assert is_partnerkit(argv) is ours
