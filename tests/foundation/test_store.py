"""The store: pragmas, private files, and migrations safe twice and from two processes."""

import contextlib
import os
import stat
import subprocess
import sys
import threading
from datetime import datetime, timezone

import pytest

from partnerkit.errors import StorageError
from partnerkit.store import open_db, transaction, webhook_tokens
from partnerkit.store.migrations import current_version, discover, migrate


def test_open_creates_a_private_wal_database(tmp_path):
    path = tmp_path / "sub" / "partnerkit.db"
    db = open_db(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert current_version(db) == discover()[-1].version


def test_migrate_twice_is_a_no_op(tmp_path):
    db = open_db(tmp_path / "x.db")
    tables = set(db.table_names())
    assert migrate(db) == discover()[-1].version
    assert set(db.table_names()) == tables


def test_two_processes_migrate_the_same_file_at_once(tmp_path):
    path = tmp_path / "race.db"
    code = "import sys; from partnerkit.store import open_db; open_db(sys.argv[1]); print('ok')"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    db = open_db(path)
    assert current_version(db) == discover()[-1].version


def test_newer_schema_is_refused(tmp_path):
    db = open_db(tmp_path / "x.db")
    db.execute("PRAGMA user_version = 999")
    with pytest.raises(StorageError, match="newer than this partnerkit"):
        migrate(db)


@pytest.mark.parametrize("after, problem", [
    (0, "migration number {v} is used more than once ({name}, extra): each module needs its own, a new one the "
        "newest module's VERSION + 1"),  # a developer who numbered a new module as the newest one
    (2, "migration numbers must run 1..N without gaps: {missing} is missing"),
])
def test_a_migration_number_used_twice_or_skipped_is_named_as_such(tmp_path, monkeypatch, after, problem):
    """A module of the package's own kind, found beside it (the package's search path extended for the test)."""
    import importlib
    import re

    from partnerkit.store import migrations as package

    newest = discover()[-1]
    (tmp_path / "m9999_extra.py").write_text(f'VERSION = {newest.version + after}\nNAME = "extra"\n'
                                             'STATEMENTS = ("SELECT 1",)\n')
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    try:
        with pytest.raises(RuntimeError) as refused:
            discover()
    finally:
        sys.modules.pop(f"{package.__name__}.m9999_extra", None)
    expected = problem.format(v=newest.version, name=newest.name, missing=newest.version + 1)
    assert str(refused.value).startswith(expected)
    assert re.search(r"; found \[1, 2, .*\]$", str(refused.value))


def test_transaction_rolls_back_and_converts_sqlite_errors(tmp_path):
    db = open_db(tmp_path / "x.db")
    with transaction(db) as conn:
        conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('a', '1', 'now')")
    with pytest.raises(StorageError, match="database write failed"):
        with transaction(db) as conn:
            conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('b', '2', 'now')")
            conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('a', '3', 'now')")  # unique
    assert [r[0] for r in db.execute("SELECT key FROM meta")] == ["a"]


def test_unwritable_location_is_a_storage_error(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    with pytest.raises(StorageError, match="cannot open database .*: .*blocked is a file where a directory is needed"):
        open_db(blocked / "x.db")


def test_a_directory_as_database_is_named_as_such(tmp_path):
    with pytest.raises(StorageError, match="cannot open database .*: it is a directory, not a database file"):
        open_db(tmp_path)


@contextlib.contextmanager
def _another_writer(path):
    """Another process's writer, played by a thread with its own connection: it holds the write lock
    (BEGIN IMMEDIATE) until the event this yields is set, then commits."""
    release, taken = threading.Event(), threading.Event()

    def hold() -> None:
        other = open_db(path)
        other.execute("BEGIN IMMEDIATE")
        taken.set()
        release.wait(10)
        other.execute("COMMIT")
        other.conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    try:
        yield release
    finally:
        release.set()
        holder.join(10)


def test_a_short_lock_waits_connection_begins_once_another_writer_commits(tmp_path):
    # The timer's thread commits for the other writer 0.05 s on; the busy timeout is for a busy machine.
    db = open_db(tmp_path / "pk.db", busy_timeout_ms=30_000, short_lock_waits=True)
    with _another_writer(tmp_path / "pk.db") as release:
        threading.Timer(0.05, release.set).start()  # the other writer commits while we wait
        with transaction(db) as conn:  # not "database is locked": the BEGIN waited for the lock
            conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('k', 'v', 'now')")
    assert db.execute("SELECT value FROM meta WHERE key = 'k'").fetchone() == ("v",)
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 0  # SQLite's own handler is off: the BEGIN waited


def test_begin_gives_up_after_the_busy_timeout_with_a_storage_error(tmp_path):
    db = open_db(tmp_path / "pk.db", busy_timeout_ms=200, short_lock_waits=True)
    with _another_writer(tmp_path / "pk.db"):
        with pytest.raises(StorageError, match="cannot start a transaction: database is locked"):
            with transaction(db):
                pass
    with transaction(db) as conn:  # and the connection is usable once the lock is free
        conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('k', 'v', 'now')")


def test_updating_a_saved_webhook_keeps_its_token_and_every_detail_not_given(tmp_path):
    db = open_db(tmp_path / "x.db")
    now = datetime(2025, 3, 14, tzinfo=timezone.utc)
    webhook_tokens.save(db, "7", b"sealed", now=now, name="first", url="https://a.example/w", events=["order.failed"])
    assert webhook_tokens.update_details(db, "7", url="https://b.example/w") is True
    assert webhook_tokens.update_details(db, "8", name="no such row") is False
    saved, = webhook_tokens.listing(db)
    assert (saved["name"], saved["url"], saved["events"]) == ("first", "https://b.example/w", ["order.failed"])
    webhook_tokens.update_details(db, "7", events=["order.delivered"])
    assert webhook_tokens.listing(db)[0]["events"] == ["order.delivered"]
    assert webhook_tokens.sealed(db) == [("7", b"sealed")]


def test_database_file_names_the_file_behind_a_handle(tmp_path):
    from partnerkit.store.db import connect, database_file

    db = open_db(tmp_path / "partnerkit.db")
    assert database_file(db) == str(tmp_path / "partnerkit.db")
    assert database_file(connect(":memory:")) is None
    db.conn.close()


def test_connections_pinned_on_one_snapshot_read_the_same_data_whatever_commits_meanwhile(db_path):
    """partnerkit.store.snapshots: what the day's match reads on, its wallet side on a second connection."""
    from partnerkit.store.db import connect
    from partnerkit.store.snapshots import end_read, pin_same_snapshot

    db, writer = open_db(db_path), open_db(db_path)
    db.execute("INSERT INTO counters (name, value) VALUES ('pinned', 1)")
    first, second = connect(db_path).conn, connect(db_path).conn
    first.execute("BEGIN")
    pin_same_snapshot(db_path, first, second)  # `second` had no transaction open: it is begun too
    with transaction(writer) as conn:  # another connection commits while both read
        conn.execute("UPDATE counters SET value = 2 WHERE name = 'pinned'")
    read = "SELECT value FROM counters WHERE name = 'pinned'"
    assert first.execute(read).fetchone() == second.execute(read).fetchone() == (1,)
    for conn in (first, second):
        end_read(conn)
        assert not conn.in_transaction and conn.execute(read).fetchone() == (2,)
        conn.close()
    db.conn.close()
    writer.conn.close()
