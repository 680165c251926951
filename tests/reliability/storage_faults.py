"""Storage faults for the reliability tests: a database held locked, a tiny filesystem filled to
the last byte, a read-only one, and a signed webhook sent by hand.

Why a real tmpfs rather than SQLite's `PRAGMA max_page_count`: that pragma belongs to one
connection, and the connections that must fail live inside gunicorn's workers and the worker
process, where a test cannot reach without changing our code. A tmpfs of a few MiB makes every
process see ENOSPC, which SQLite reports as SQLITE_FULL ("database or disk is full"), exactly as on
a full production disk, and deleting one file gives the space back. Mounting needs root (or
CAP_SYS_ADMIN); where that is missing the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import requests

from receiver.signature import sign

CHUNK = 64 * 1024


def mount_tmpfs(path: Path, size: str, *, read_only: bool = False) -> None:
    """Mount a tmpfs of `size` on `path`; pytest.skip when this machine does not allow it."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; run the storage tests as root (CI does)")
    options = f"size={size},mode=0700" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def remount(path: Path, *, read_only: bool) -> None:
    subprocess.run(["mount", "-o", "remount," + ("ro" if read_only else "rw"), str(path)], check=True)


def unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)  # a straggler still has a file open


@contextmanager
def tiny_filesystem(path: Path, size: str = "16m", *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs mounted for the duration of the block (unmounted even if the test fails)."""
    mount_tmpfs(path, size, read_only=read_only)
    try:
        yield path
    finally:
        unmount(path)


def fill(directory: Path, max_bytes: int = 256 * 1024 * 1024) -> Path:
    """Write a filler file until the filesystem refuses (ENOSPC), to the last page; return it."""
    filler = directory / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written, size = 0, CHUNK
    try:
        while written < max_bytes and size >= 1:  # bounded: max_bytes, and the chunk only shrinks
            try:
                written += os.write(fd, b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size //= 2  # fill the remainder with smaller writes, down to one byte
    finally:
        os.close(fd)
    assert written < max_bytes, f"{directory} never filled up"
    return filler


def truncate_wal(db_path: Path, *, attempts: int = 200) -> None:
    """Fold the WAL into the database and cut it to zero bytes: the next commit must grow it.

    The busy timeout covers waiting for the write lock and for readers, but not for the checkpoint
    lock: while a receiver or the worker runs its own automatic checkpoint (after a commit that took
    the WAL past its threshold), SQLite answers busy at once. So a busy answer is tried again, a
    bounded number of times (about 10 s in all), as CI once showed it must be.
    """
    conn = sqlite3.connect(db_path, timeout=10)
    try:
        for _ in range(attempts):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0:
                return
            time.sleep(0.05)
        raise AssertionError(f"the WAL could not be truncated in {attempts} attempts")
    finally:
        conn.close()


@contextmanager
def held_write_lock(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the database's write lock (BEGIN EXCLUSIVE) for the block."""
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def signed_webhook(url: str, token: str, *, event_id: str | None = None, order_id: int = 9_000_001,
                   status: str = "PENDING") -> requests.Response:
    """POST one correctly signed order event, as the provider would."""
    event_id = event_id or f"evt_storage_{uuid.uuid4().hex[:12]}"
    body = json.dumps({"event_id": event_id, "event_type": "order." + status.lower(),
                       "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "data": {"id": order_id, "status": status}}).encode()
    stamp = str(int(time.time()))
    return requests.post(url, data=body, timeout=30, headers={
        "Content-Type": "application/json", "X-Timestamp": stamp, "X-Signature": sign(token, stamp, body),
        "X-Event-ID": event_id})
