"""Directories the kit creates are 0700 at every level, and a database it cannot use is named for why."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from partnerkit.config import load_config
from partnerkit.crypto import load_cipher
from partnerkit.errors import StorageError
from partnerkit.files import make_private_dirs, sync_directory
from partnerkit.store import open_db
from partnerkit.store.db import connect
from reconcile.jobs import write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_000():
    old = os.umask(0)  # the kit must make its directories private itself
    yield
    os.umask(old)


def test_the_database_key_file_and_report_directories_are_private_at_every_level(tmp_path, umask_000):
    # The reviewer's case: only d2 and r3 were 0700; d1, r1 and r2 were 0777, so anyone could move the
    # database's private directory aside and put their own in its place.
    config = load_config(environ={"PARTNERKIT_DB": str(tmp_path / "d1" / "d2" / "x.db"),
                                  "PARTNERKIT_REPORT_DIR": str(tmp_path / "r1" / "r2" / "r3")})
    open_db(config.db_path).conn.close()
    load_cipher(config)  # generates the key file beside the database
    write_atomic(config.report_dir / "partnerkit-report-2026-01-01.json", "{}")
    made = [tmp_path / "d1", tmp_path / "d1" / "d2", tmp_path / "r1", tmp_path / "r1" / "r2", config.report_dir]
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in made} == {
        str(p.relative_to(tmp_path)): "0o700" for p in made}
    assert mode(config.key_file) == 0o600 and mode(config.db_path) == 0o600


def test_existing_directories_are_left_as_they_are(tmp_path, umask_000):
    shared = tmp_path / "srv"
    shared.mkdir(mode=0o755)
    make_private_dirs(shared / "partnerkit" / "state")
    assert mode(shared) == 0o755
    assert mode(shared / "partnerkit") == mode(shared / "partnerkit" / "state") == 0o700


def test_a_restrictive_umask_does_not_lock_the_owner_out(tmp_path):
    old = os.umask(0o277)
    try:
        make_private_dirs(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700


def test_a_file_where_a_directory_belongs_is_named(tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(FileExistsError) as info:
        make_private_dirs(tmp_path / "a-file" / "deeper")
    assert info.value.filename == str(tmp_path / "a-file")
    with pytest.raises(StorageError, match="a-file is a file where a directory is needed"):
        open_db(tmp_path / "a-file" / "deeper" / "x.db")


def _open_as_nobody(path: Path) -> str:
    """connect(path) in a child process running as `nobody` (root ignores permissions); its error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgid(65534)
            os.setuid(65534)
            connect(path).conn.close()
            message = "opened"
        except BaseException as exc:  # noqa: BLE001 - whatever it is, the parent asserts on it
            message = str(exc)
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    try:
        os.waitpid(pid, 0)
        return os.read(read, 65536).decode()
    finally:
        os.close(read)


def test_a_writable_database_in_an_unwritable_directory_names_the_directory(tmp_path):
    # SQLite says "attempt to write a readonly database": the file is writable, but in WAL mode it must
    # create the -wal and -shm files beside it.
    if os.geteuid() == 0:
        # Outside pytest's 0700 temporary root, which `nobody` could not even traverse.
        outer = Path(tempfile.mkdtemp(prefix="partnerkit-n1-", dir="/tmp"))
        try:
            state = outer / "state"
            open_db(state / "x.db").conn.close()
            os.chmod(outer, 0o755)
            os.chmod(state, 0o755)  # root's directory, readable by all
            os.chown(state / "x.db", 65534, 65534)  # nobody's file, mode 0600
            message = _open_as_nobody(state / "x.db")
        finally:
            shutil.rmtree(outer)
    else:
        state = tmp_path / "state"
        open_db(state / "x.db").conn.close()
        os.chmod(state, 0o555)
        try:
            with pytest.raises(StorageError) as info:
                connect(state / "x.db")
        finally:
            os.chmod(state, 0o700)
        message = str(info.value)
    assert f"its directory {str(state)!r} cannot be written by this user" in message
    assert "-wal and -shm" in message and "readonly database" not in message


def _failing_directory_fsync(monkeypatch, code: int) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_filesystem_that_cannot_sync_a_directory_keeps_its_renames(tmp_path, monkeypatch):
    from partnerkit.store.backup import backup

    _failing_directory_fsync(monkeypatch, errno.EINVAL)  # as some network and FUSE filesystems answer
    sync_directory(tmp_path)
    database = open_db(tmp_path / "live.db")
    try:
        assert backup(database, tmp_path / "copy.db").path.exists()
    finally:
        database.conn.close()


def test_a_directory_sync_that_fails_otherwise_is_an_error(tmp_path, monkeypatch):
    _failing_directory_fsync(monkeypatch, errno.EIO)
    with pytest.raises(OSError, match="Input/output error"):
        sync_directory(tmp_path)
