"""`partnerkit backup`: a consistent, private copy taken while the database is being written."""

from __future__ import annotations

import os
import stat
import threading

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.errors import StorageError
from partnerkit.store import open_db, transaction
from partnerkit.store.backup import backup


def test_backup_while_writing_is_consistent_and_private(db, tmp_path):
    stop = threading.Event()

    def writer():
        conn_db = open_db(db.conn.execute("PRAGMA database_list").fetchone()[2])
        i = 0
        while not stop.is_set() and i < 2000:
            with transaction(conn_db) as conn:
                conn.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, 'x', 'now')", (f"k{i}",))
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        target = backup(db, tmp_path / "copy.db", pages_per_step=1)
    finally:
        stop.set()
        thread.join()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    copy = open_db(target)
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert "inbox" in copy.table_names() and "recharges" in copy.table_names()


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
    again = CliRunner().invoke(cli, ["backup", str(tmp_path / "b.db")], env=env)
    assert again.exit_code == 1
    assert "already exists" in again.output


def test_backup_onto_a_full_disk_fails_in_one_line_and_leaves_nothing(db, tmp_path):
    from tests.reliability.storage_faults import fill, tiny_filesystem

    with tiny_filesystem(tmp_path / "small", "1m") as small:
        filler = fill(small)
        with pytest.raises(StorageError, match=r"backup to .*copy\.db failed: .*(full|No space)"):
            backup(db, small / "copy.db")
        left = sorted(p.name for p in small.iterdir())
        filler.unlink()
        again = open_db(backup(db, small / "copy.db"))  # space is back: the same name is free to use
        checked = again.execute("PRAGMA integrity_check").fetchone()[0]
        again.conn.close()
    assert checked == "ok"
    assert left == ["filler.bin"], "no partial copy is left behind"


def test_backup_leaves_only_the_backup_file(db, tmp_path):
    out = tmp_path / "out"
    backup(db, out / "copy.db")
    assert sorted(p.name for p in out.iterdir()) == ["copy.db"], "no -wal or -shm of the partial copy is left"


def test_backup_help_names_its_argument():
    help_text = CliRunner().invoke(cli, ["backup", "--help"]).output
    assert "backup [OPTIONS] DESTINATION" in help_text
    assert "Copy the live database to DESTINATION, a new file" in help_text
