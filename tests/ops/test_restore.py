"""`partnerkit restore BACKUP`: the backup, and only the backup, ends up in PARTNERKIT_DB.

Run as real processes: a restore is about other processes (one that still has the database open, one
killed mid-write that left its -wal behind), and POSIX locks belong to a whole process.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path

import pytest

from partnerkit.store import open_db, transaction
from partnerkit.store.backup import backup


def partnerkit(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env["PARTNERKIT_DB"] = str(db)
    return subprocess.run([sys.executable, "-m", "partnerkit", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT COUNT(*) FROM meta WHERE key LIKE 'row-%'").fetchone()[0]


def write_rows(path: Path, first: int, count: int) -> None:
    database = open_db(path)
    try:
        for i in range(first, first + count):
            with transaction(database) as conn:
                conn.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, 'x', 'now')", (f"row-{i}",))
    finally:
        database.conn.close()


# A writer killed mid-run: its commits since the last checkpoint live only in the -wal it leaves behind.
KILLED_WRITER = """
import os, signal, sys
from partnerkit.store import open_db, transaction
database = open_db(sys.argv[1])
database.conn.execute("PRAGMA wal_autocheckpoint = 0")
for i in range(100, 300):
    with transaction(database) as conn:
        conn.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, 'x', 'now')", (f"row-{i}",))
os.kill(os.getpid(), signal.SIGKILL)
"""

# A process that has the database open (a receiver, the status timer's check) until it is killed.
HOLDER = """
import sys, time
from partnerkit.store.db import connect
database = connect(sys.argv[1])
database.execute("SELECT COUNT(*) FROM meta").fetchone()
print("open", flush=True)
time.sleep(60)
"""


@pytest.fixture
def crashed(tmp_path):
    """A database with a backup of its first 100 rows, then 200 more written by a process killed with its -wal."""
    live = tmp_path / "lib" / "partnerkit.db"
    write_rows(live, 0, 100)
    database = open_db(live)
    backup(database, tmp_path / "backup.db")
    database.conn.close()
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(live)], timeout=60)
    assert killed.returncode == -9
    assert Path(f"{live}-wal").stat().st_size > 0  # the crash the restore is for
    return live, tmp_path / "backup.db"


def test_restore_after_a_crash_gives_exactly_the_backup(crashed):
    live, saved = crashed
    done = partnerkit("restore", str(saved), db=live)
    assert done.returncode == 0, done.stderr
    assert rows(live) == 100  # not the backup with the stale -wal replayed onto it
    assert not Path(f"{live}-wal").exists() or Path(f"{live}-wal").stat().st_size == 0
    assert stat.S_IMODE(live.stat().st_mode) == 0o600
    with closing(sqlite3.connect(live)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 9
    kept = sorted(p.name for p in live.parent.iterdir() if p.name.startswith("partnerkit.db.replaced-"))
    assert kept == [kept[0], f"{kept[0]}-wal"]
    # Nothing is deleted: the crashed database with its -wal, as they were (the -wal is not folded into it).
    assert rows(live.parent / kept[0]) == 300
    assert f"restored {saved} to {live} (schema" in done.stderr
    assert f"the database it replaced is kept as {live.parent / kept[0]} with its wal" in done.stderr
    assert "start the receiver, the worker and partnerkit-status.timer again" in done.stderr
    assert not list(live.parent.glob(".partnerkit.db.restoring-*"))


def test_the_stale_wal_is_moved_aside_with_the_database_it_belongs_to(crashed):
    from partnerkit.store.backup import restore

    live, saved = crashed
    done = restore(saved, live, latest_schema=99)
    assert done.replaced is not None and [p.name for p in done.replaced_files] == [f"{done.replaced.name}-wal"]
    assert not Path(f"{live}-wal").exists() and not Path(f"{live}-shm").exists()
    assert rows(live) == 100
    assert rows(done.replaced) == 300  # the replaced file opens with its own -wal: its last commits are there


def test_restore_refuses_while_another_process_has_the_database_open(crashed):
    live, saved = crashed
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(live)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        before = live.read_bytes()
        refused = partnerkit("restore", str(saved), db=live)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            f"Error: {live} is open in another process (the receiver, the worker or a `partnerkit` command such as "
            "the status timer's): stop them first"]
        assert live.read_bytes() == before and not list(live.parent.glob("*.replaced-*"))
    finally:
        holder.kill()
        holder.wait()
    assert partnerkit("restore", str(saved), db=live).returncode == 0  # once it is gone
    assert rows(live) == 100


def test_restore_names_a_running_worker_by_its_lease(tmp_path):
    from reconcile.scheduler import WorkerLease, new_holder

    live = tmp_path / "partnerkit.db"
    write_rows(live, 0, 3)
    database = open_db(live)
    backup(database, tmp_path / "backup.db")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = new_holder().split(":")
        holder[1] = str(sleeper.pid)  # a live process of this host holds the lease
        WorkerLease(database, holder=":".join(holder), ttl_s=30).acquire(wait=False)
        database.conn.close()
        refused = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert refused.returncode == 1
    assert refused.stderr.strip() == (f"Error: the worker {':'.join(holder)} holds the lease on {live}: stop it first "
                                      "(systemctl stop partnerkit-worker)")


def _newer_schema(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA user_version = 99")


def _not_partnerkit(path: Path) -> None:
    path.unlink()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("PRAGMA user_version = 3")


def _damaged(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(3 * page, len(data), page):  # scribble over every page after the schema's
        data[offset + 8:offset + 64] = b"\xff" * 56
    path.write_bytes(bytes(data))


def _garbage(path: Path) -> None:
    path.write_bytes(b"not an SQLite file at all " * 100)


def _open_copy(path: Path) -> None:
    Path(f"{path}-wal").write_bytes(b"")  # copied with `cp` while open: its -wal beside it


@pytest.mark.parametrize("spoil, says", [
    (_newer_schema, "has schema version 99, newer than this release's"),
    (_not_partnerkit, "is not a partnerkit database"),
    (_damaged, "fails SQLite's integrity check"),
    (_garbage, "is not a usable SQLite database"),
    (_open_copy, "has a -wal file beside it"),
])
def test_a_backup_that_is_not_fit_is_refused_and_nothing_changes(spoil, says, tmp_path):
    live = tmp_path / "partnerkit.db"
    write_rows(live, 0, 400)
    database = open_db(live)
    backup(database, tmp_path / "backup.db")
    database.conn.close()
    spoil(tmp_path / "backup.db")
    before = sorted(p.name for p in tmp_path.iterdir()), live.read_bytes()
    refused = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: backup {tmp_path / 'backup.db'} ") and says in lines[0]
    assert (sorted(p.name for p in tmp_path.iterdir()), live.read_bytes()) == before


def test_restore_onto_a_new_machine_creates_a_private_database(tmp_path):
    origin = tmp_path / "old" / "partnerkit.db"
    write_rows(origin, 0, 5)
    database = open_db(origin)
    backup(database, tmp_path / "backup.db")
    database.conn.close()
    old = os.umask(0)
    try:
        done = partnerkit("restore", str(tmp_path / "backup.db"), db=tmp_path / "new" / "lib" / "partnerkit.db")
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    target = tmp_path / "new" / "lib" / "partnerkit.db"
    assert rows(target) == 5 and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    assert "the database it replaced" not in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only root restores a file for another user")
def test_restore_run_as_root_keeps_the_service_users_ownership(tmp_path):
    live = tmp_path / "partnerkit.db"
    write_rows(live, 0, 2)
    database = open_db(live)
    backup(database, tmp_path / "backup.db")
    database.conn.close()
    os.chown(live, 65534, 65534)
    done = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    assert done.returncode == 0, done.stderr
    assert (live.stat().st_uid, live.stat().st_gid) == (65534, 65534)  # the services can still open it


def test_restore_says_which_voucher_key_the_restored_values_need(tmp_path):
    from partnerkit.store import webhook_tokens
    from partnerkit.timeutil import utcnow

    origin = tmp_path / "old.db"
    database = open_db(origin)
    webhook_tokens.save(database, "7", b"sealed with the key of the backup's time", now=utcnow())
    backup(database, tmp_path / "backup.db")
    database.conn.close()
    live = tmp_path / "lib" / "partnerkit.db"
    missing = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    assert missing.returncode == 0, missing.stderr
    assert (f"1 stored voucher(s) and webhook token(s) are sealed with the voucher key: the voucher key file "
            f"{live}.voucher.key is missing: put back the one saved with the backup") in missing.stderr
    Path(f"{live}.voucher.key").write_text("a-key-file-put-back-beside-it\n")
    again = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    assert again.returncode == 0, again.stderr
    assert f"the key file {live}.voucher.key must hold the key of the backup's time" in again.stderr


# `partnerkit restore` SIGKILLed right before its Nth step on a file of the database's directory (a link,
# a rename, a copy: what a power cut or a killed SSH session picks at random); a step it never reaches
# lets it finish.
KILLED_RESTORE = """
import os, shutil, signal, sys
directory, before, seen = sys.argv[1], int(sys.argv[2]), [0]
def counted(step):
    def wrapper(*args, **kwargs):
        path = args[0] if isinstance(args[0], (str, os.PathLike)) else args[0].name  # a file object: its name
        if os.fspath(path).startswith(directory):
            seen[0] += 1
            if seen[0] == before:
                os.kill(os.getpid(), signal.SIGKILL)
        return step(*args, **kwargs)
    return wrapper
os.replace, os.link, shutil.copyfileobj = counted(os.replace), counted(os.link), counted(shutil.copyfileobj)
sys.argv = ["partnerkit", "restore", sys.argv[3]]
from partnerkit.cli import main
sys.exit(main())
"""


def killed_restore(live: Path, saved: Path, before: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    env["PARTNERKIT_DB"] = str(live)
    return subprocess.run([sys.executable, "-c", KILLED_RESTORE, str(live.parent), str(before), str(saved)],
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("crash_wal", [False, True], ids=["closed cleanly", "with a crash's -wal"])
@pytest.mark.parametrize("before", [1, 2, 3, 4, 5])
def test_a_restore_killed_at_any_step_leaves_the_old_database_or_the_backup_never_none(tmp_path, before, crash_wal):
    live = tmp_path / "lib" / "partnerkit.db"
    write_rows(live, 0, 100)
    database = open_db(live)
    backup(database, tmp_path / "backup.db")  # 100 rows
    database.conn.close()
    write_rows(live, 300, 20)  # the old database: 120 rows, in the file
    old = 120
    if crash_wal:
        assert subprocess.run([sys.executable, "-c", KILLED_WRITER, str(live)], timeout=60).returncode == -9
        old = 320  # 200 of them only in its -wal
    run = killed_restore(live, tmp_path / "backup.db", before)
    assert run.returncode in (0, -9), run.stderr
    # The steps: a link, the rename; with a -wal, two copies and their renames, the rename.
    assert (run.returncode == -9) == (before <= (5 if crash_wal else 2))
    # Whatever the moment: a whole database at the path, the old one with all its commits or the backup,
    # and never a -wal beside it that is not its own (sqlite3 replays one found there).
    assert live.is_file()
    assert rows(live) == (100 if run.returncode == 0 else old)
    if run.returncode == 0:
        return
    # The operator runs it again: it finishes, and removes the copy the killed run left.
    leftovers = [p for p in live.parent.glob(".partnerkit.db.restoring-*") if p.name.rsplit("-", 1)[1].isdigit()]
    assert leftovers  # the checked copy of the backup, made before any step on the database
    again = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    assert again.returncode == 0, again.stderr
    assert rows(live) == 100
    assert not list(live.parent.glob(".partnerkit.db.restoring-*"))
    for leftover in leftovers:
        assert f"removed {leftover}, the copy of an earlier restore that was killed before it finished" in again.stderr
    kept = [p for p in live.parent.iterdir() if ".replaced-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert kept and max(rows(p) for p in kept) == old  # the old database's commits, all kept aside


def test_restore_clears_the_backups_worker_lease_and_names_what_it_holds_last(tmp_path):
    """The backup was made while a worker ran: its lease, restored as it was, would make `status` report a crash
    of that worker. And what cannot come back from the provider is named, with the backup's times."""
    from partnerkit.store import drifts, reports, webhook_tokens
    from reconcile.scheduler import WorkerLease

    origin = tmp_path / "old.db"
    database = open_db(origin)
    WorkerLease(database, holder="gone-host:4242:4026531836:0badf00d", ttl_s=30).acquire(wait=False)
    ident = drifts.open_drift(database, kind="orphan_transaction", subject="transaction", reference="7001",
                              expected=None, actual="12.00", currency="INR", detected_at="2026-11-20T01:00:00Z",
                              day="2026-11-19")
    drifts.set_resolution(database, ident, "resolved", note="fee agreed, ticket 4411", by="alice",
                          at="2026-11-20T09:15:00Z")
    drifts.open_drift(database, kind="missing_debit", subject="recharge", reference="RCH1", expected="98.00",
                      actual="0.00", currency="INR", detected_at="2026-11-20T10:00:00Z", day="2026-11-20")
    reports.save_report(database, {"date": "2026-11-19", "generated_at": "2026-11-20T01:00:03Z", "summary": {}})
    webhook_tokens.save(database, "3", b"sealed", now=datetime(2026, 11, 18, 8, 0, tzinfo=timezone.utc))
    backup(database, tmp_path / "backup.db")
    database.conn.close()
    live = tmp_path / "lib" / "partnerkit.db"
    done = partnerkit("restore", str(tmp_path / "backup.db"), db=live)
    assert done.returncode == 0, done.stderr
    with closing(sqlite3.connect(live)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM locks WHERE name = 'worker'").fetchone()[0] == 0
    assert ("cleared the worker lease the backup carried (gone-host:4242:4026531836:0badf00d): that worker is not "
            "running") in done.stderr
    status = partnerkit("status", "--format", "json", db=live)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["worker_lease_holder"] is None
    assert not any("stopped without releasing its lease" in line for line in json.loads(status.stdout)["attention"])
    lines = done.stderr.splitlines()
    # The newest decision is alice's, not the later detection partnerkit recorded itself.
    assert ("the backup's newest drift decision: 2026-11-20T09:15:00Z; newest report: 2026-11-19 (generated "
            "2026-11-20T01:00:03Z); newest webhook token saved: 2026-11-18T08:00:00Z") in lines
    assert lines[-6].startswith("start the receiver, the worker and partnerkit-status.timer again")
    assert "  - finance re-applies the drift decisions made after 2026-11-20T09:15:00Z" in done.stderr
    assert "`partnerkit webhooks list`: a webhook with TOKEN_SAVED no was registered after the backup" in done.stderr
    assert "`unknown_to_partner` drifts whose detail says they carry partnerkit's own client_reference" in done.stderr


def test_restore_of_a_backup_without_a_decision_or_a_token_says_so_in_words(crashed):
    """It printed "finance re-applies the drift decisions made after none"."""
    live, saved = crashed
    done = partnerkit("restore", str(saved), db=live)
    assert done.returncode == 0, done.stderr
    assert ("the backup's newest drift decision: none; newest report: none; newest webhook token saved: none"
            in done.stderr.splitlines())
    assert ("drift resolutions and escalations made since the backup, which holds none, with their history; webhook "
            "tokens saved since the backup, which holds none (the provider shows a token only once)") in done.stderr
    assert ("  - finance re-applies every drift decision made since the backup, which holds none (`partnerkit drifts "
            "list --resolution pending`)") in done.stderr.splitlines()
    assert "after none" not in done.stderr


def test_a_restore_refuses_while_another_restore_of_the_database_runs(crashed):
    """Its copy is locked while it runs: a second restore leaves it alone instead of taking it for a leftover."""
    import fcntl

    live, saved = crashed
    running = live.with_name(f".{live.name}.restoring-{os.getpid() + 1}")
    running.write_bytes(b"half a copy")
    with open(running, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        refused = partnerkit("restore", str(saved), db=live)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (f"Error: another `partnerkit restore` of {live} is running (its copy "
                                      f"{running}): let it finish")
    assert running.read_bytes() == b"half a copy" and rows(live) == 300


def test_a_restored_copy_forgets_the_receiver_masters_of_its_time(tmp_path):
    """A backup taken while the receiver ran holds its master's row, never marked stopped in the copy: restored,
    `partnerkit status` would name that master as killed until a receiver starts. The copy forgets them."""
    from partnerkit.store import receivers
    from partnerkit.store.backup import restore

    live, saved = tmp_path / "lib" / "partnerkit.db", tmp_path / "backup.db"
    write_rows(live, 0, 3)
    database = open_db(live)
    now = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)
    master = receivers.Master(f"{os.uname().nodename}:999999:0:abc", ("127.0.0.1:8000",), now)
    receivers.started(database, master, superseded=lambda other: False, now=now)
    assert [m.holder for m in receivers.masters(database)] == [master.holder]
    backup(database, saved)
    database.conn.close()

    done = restore(saved, live, latest_schema=99)
    assert done.replaced is not None
    assert rows(live) == 3
    restored = open_db(live)
    try:
        assert receivers.masters(restored) == []
    finally:
        restored.conn.close()
