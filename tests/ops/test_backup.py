"""`partnerkit backup`: a consistent, private copy taken while the database is being written."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from bench.reconcile import day as synthetic
from partnerkit.cli import cli
from partnerkit.errors import StorageError
from partnerkit.store import bulk, open_db, transaction
from partnerkit.store.backup import backup

RECHARGES = 20_000  # a few MB: ~1,800 pages, hundreds of steps at 4 pages a step


@pytest.fixture(scope="module")
def built_store(tmp_path_factory):
    """A database file holding a day of recharges and orders as the worker and the order sync leave them: built
    once for the module (1-3 s), copied by each test that needs it."""
    path = tmp_path_factory.mktemp("day") / "partnerkit.db"
    db = open_db(path)
    orders, vouchers = synthetic.orders(RECHARGES)
    with transaction(db) as conn:
        bulk.bulk_load_recharges(conn, synthetic.worker_rows(RECHARGES))
        bulk.bulk_load_orders(conn, orders, vouchers)
    db.conn.close()
    return path


@pytest.fixture
def store(built_store, db_path):
    """The day's store at db_path, this test's own copy."""
    shutil.copy(built_store, db_path)
    db = open_db(db_path)
    yield db
    db.conn.close()


def _count(conn, sql: str) -> int:
    return conn.execute(sql).fetchone()[0]


class Writer(threading.Thread):
    """Commits one row after another on its own connection, as a receiver does, until told to stop or
    `limit_s` is up; `commits[i]` is the time the i-th commit returned."""

    def __init__(self, path, limit_s: float) -> None:
        super().__init__(daemon=True)
        self.path, self.limit_s = path, limit_s
        self.stop, self.commits, self.timed_out = threading.Event(), [], False

    def run(self) -> None:
        db = open_db(self.path)
        end = time.monotonic() + self.limit_s
        try:
            while not self.stop.is_set():
                if time.monotonic() > end:
                    self.timed_out = True
                    return
                with transaction(db) as conn:
                    conn.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, 'x', 'now')",
                                 (f"w{len(self.commits):06d}",))
                self.commits.append(time.monotonic())
                time.sleep(0.002)
        finally:
            db.conn.close()


def test_backup_finishes_and_is_consistent_while_another_connection_keeps_committing(store, db_path, tmp_path):
    """SQLite restarts a step-wise backup from page 1 at every commit of another connection between two
    steps: a copy longer than the gap between two commits never ended. The writer commits every few ms
    for the whole copy (slowed to a few ms a step: a slow disk), bounded by 20 s."""
    steps, restarts = [], []

    def slow_disk(copied: int, total: int) -> None:
        if steps and copied < steps[-1]:
            restarts.append(copied)
        steps.append(copied)
        time.sleep(0.002)

    writer = Writer(db_path, limit_s=20)
    writer.start()
    try:
        while len(writer.commits) < 5 and writer.is_alive():  # bounded by the writer's own limit
            time.sleep(0.01)
        before = len(writer.commits)
        started = time.monotonic()
        done = backup(store, tmp_path / "copy.db", pages_per_step=4, progress=slow_disk)
        finished = time.monotonic()
    finally:
        writer.stop.set()
        writer.join(timeout=30)
    during = sum(started < at < finished for at in writer.commits)
    assert not writer.timed_out, f"the backup outlasted 20 s of writes ({len(restarts)} restarts from page 1)"
    assert restarts == []
    assert len(steps) > 100 and during > 50, (len(steps), during)  # the writes really fell between the steps
    assert stat.S_IMODE(os.stat(done.path).st_mode) == 0o600
    with sqlite3.connect(done.path) as copy:
        assert _count(copy, "PRAGMA integrity_check") == "ok"
        assert _count(copy, "SELECT COUNT(*) FROM recharges") == _count(store.conn, "SELECT COUNT(*) FROM recharges")
        assert _count(copy, "SELECT COUNT(*) FROM orders") == _count(store.conn, "SELECT COUNT(*) FROM orders")
        written = [row[0] for row in copy.execute("SELECT key FROM meta WHERE key LIKE 'w%' ORDER BY key")]
    # The database as of one moment: the writer's first N commits, every one of them, for an N between
    # the commits made before the backup began and those made by its end.
    assert written == [f"w{i:06d}" for i in range(len(written))]
    assert before <= len(written) <= len(writer.commits)
    assert done.size_bytes == os.stat(done.path).st_size


def test_backup_never_overwrites(db, tmp_path):
    (tmp_path / "exists.db").write_text("precious")
    with pytest.raises(StorageError, match="already exists"):
        backup(db, tmp_path / "exists.db")
    assert (tmp_path / "exists.db").read_text() == "precious"


def test_backup_command(tmp_path):
    open_db(tmp_path / "live.db").conn.close()
    env = {"PARTNERKIT_DB": str(tmp_path / "live.db")}
    result = CliRunner().invoke(cli, ["backup", str(tmp_path / "b.db")], env=env)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b.db").exists()
    lines = result.stderr.splitlines()
    assert lines[0] == f"backing up {tmp_path / 'live.db'} ({os.stat(tmp_path / 'b.db').st_size / 1e6:,.1f} MB) to " \
                       f"{tmp_path / 'b.db'}"
    assert lines[1].startswith(f"backed up {tmp_path / 'live.db'} to {tmp_path / 'b.db'} (") and " MB in " in lines[1]
    again = CliRunner().invoke(cli, ["backup", str(tmp_path / "b.db")], env=env)
    assert again.exit_code == 1
    assert "already exists" in again.output


def test_a_long_copy_says_how_far_it_is(store, db_path, tmp_path, monkeypatch):
    monkeypatch.setattr("partnerkit.cli.backup.PROGRESS_EVERY_S", 0.0)  # every step, not every 5 s
    monkeypatch.setattr("partnerkit.store.backup.PAGES_PER_STEP", 512)
    result = CliRunner().invoke(cli, ["backup", str(tmp_path / "b.db")], env={"PARTNERKIT_DB": str(db_path)})
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if line.startswith("backup: ")]
    assert len(progress) >= 2, result.stderr
    assert progress[0].endswith(" copied") and " MB of " in progress[0]


def _killed_backup(db_path, destination):
    """A `backup` process killed (SIGKILL) half-way through its copy; return what it left in the directory."""
    script = ("import sys, time\n"
              "from partnerkit.store import open_db\n"
              "from partnerkit.store.backup import backup\n"
              "backup(open_db(sys.argv[1]), sys.argv[2], pages_per_step=8, progress=lambda c, t: time.sleep(0.05))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(db_path), str(destination)])
    partial = destination.with_name(f".{destination.name}.backup-{proc.pid}")
    try:
        deadline = time.monotonic() + 60  # a process starting on a busy machine
        while not (partial.exists() and partial.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert partial.exists(), "the backup never began its copy"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    return sorted(p.name for p in destination.parent.iterdir())


def test_the_copy_of_a_killed_backup_is_removed_by_the_next_one_and_named(store, db_path, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".notes.backup-1").write_text("not a copy: a file of someone else's")
    left = _killed_backup(db_path, out / "monday.db")
    assert any(name.startswith(".monday.db.backup-") and name[-1].isdigit() for name in left), left
    assert "monday.db" not in left
    result = CliRunner().invoke(cli, ["backup", str(out / "tuesday.db")], env={"PARTNERKIT_DB": str(db_path)})
    assert result.exit_code == 0, result.output
    removed = [name for name in left if name.startswith(".monday.db.backup-") and name[-1].isdigit()]
    assert f"removed {out / removed[0]}, the unfinished copy of a backup that was killed" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [".notes.backup-1", "tuesday.db"]


def test_the_copy_of_a_running_backup_is_left_alone(db, tmp_path):
    import fcntl

    running = tmp_path / ".monday.db.backup-4242"
    running.write_bytes(b"SQLite format 3\0" + bytes(100))
    fd = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = backup(db, tmp_path / "tuesday.db")
    finally:
        os.close(fd)
    assert done.leftovers == ()
    assert running.exists()


def test_partial_files_of_an_earlier_release_are_named_not_deleted(db, db_path, tmp_path):
    old = tmp_path / "monday.db.partial"
    old.write_bytes(b"SQLite format 3\0" + bytes(100))
    (tmp_path / "monday.db.partial-journal").write_bytes(b"journal")
    (tmp_path / "notes.partial").write_text("someone else's")
    result = CliRunner().invoke(cli, ["backup", str(tmp_path / "tuesday.db")], env={"PARTNERKIT_DB": str(db_path)})
    assert result.exit_code == 0, result.output
    assert (f"left by killed backups of an earlier release (delete them unless such a backup is running): "
            f"{old}, {old}-journal") in result.stderr
    assert old.exists() and (tmp_path / "monday.db.partial-journal").exists()


def test_backup_onto_a_full_disk_fails_in_one_line_and_leaves_nothing(db, tmp_path):
    from tests.reliability.storage_faults import fill, tiny_filesystem

    with tiny_filesystem(tmp_path / "small", "1m") as small:
        filler = fill(small)
        with pytest.raises(StorageError, match=r"backup to .*copy\.db failed: .*(full|No space)"):
            backup(db, small / "copy.db")
        left = sorted(p.name for p in small.iterdir())
        filler.unlink()
        again = open_db(backup(db, small / "copy.db").path)  # space is back: the same name is free to use
        checked = again.execute("PRAGMA integrity_check").fetchone()[0]
        again.conn.close()
    assert checked == "ok"
    assert left == ["filler.bin"], "no partial copy is left behind"


def test_backup_leaves_only_the_backup_file(db, tmp_path):
    out = tmp_path / "out"
    backup(db, out / "copy.db")
    assert sorted(p.name for p in out.iterdir()) == ["copy.db"], "no -wal or -shm of the partial copy is left"


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync the kit asks for, as (inode, is a directory, names in it then): the real call still runs."""
    seen: list[tuple[int, bool, set[str]]] = []
    real = os.fsync

    def watched(fd: int) -> None:
        info = os.fstat(fd)
        directory = stat.S_ISDIR(info.st_mode)
        seen.append((info.st_ino, directory, set(os.listdir(fd)) if directory else set()))
        real(fd)

    monkeypatch.setattr(os, "fsync", watched)
    return seen


def test_a_backup_syncs_its_directory_after_the_rename_before_it_is_reported_done(db, tmp_path, fsyncs):
    """A rename is an entry of the directory: a backup reported done must survive a power cut, rename included."""
    out = tmp_path / "out"
    done = backup(db, out / "copy.db")
    assert fsyncs == [(out.stat().st_ino, True, {"copy.db"})]  # once, after the rename, the copy's name gone
    assert done.path == out / "copy.db"


def test_a_restore_syncs_its_directory_with_the_same_helper(tmp_path, fsyncs):
    from partnerkit.store.backup import restore

    live = tmp_path / "lib" / "partnerkit.db"
    open_db(live).conn.close()
    source = open_db(tmp_path / "source.db")
    backup(source, tmp_path / "saved.db")
    source.conn.close()
    fsyncs.clear()
    restore(tmp_path / "saved.db", live, latest_schema=99)
    synced_dirs = [(inode, names) for inode, directory, names in fsyncs if directory]
    assert synced_dirs[-1][0] == live.parent.stat().st_ino and "partnerkit.db" in synced_dirs[-1][1]
    assert not [n for n in synced_dirs[-1][1] if ".restoring-" in n]  # after the rename of the copy


def test_backup_help_names_its_argument():
    help_text = CliRunner().invoke(cli, ["backup", "--help"]).output
    assert "backup [OPTIONS] DESTINATION" in help_text
    assert "Copy the live database to DESTINATION, a new file" in help_text
    assert "as of the moment the backup starts" in help_text
