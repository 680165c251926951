"""Room for the database: free space on PARTNERKIT_DB's filesystem, the WAL's size, a read-only mount.

SQLite needs room to write: each commit appends to the WAL (the `-wal` file beside the database), and
a checkpoint copies the WAL's pages into the database file, which can grow by as much. On a full or
read-only filesystem every write fails ("database or disk is full"): the receiver answers 503 (the
provider retries each delivery for 15 minutes), the worker's jobs fail, and the worker cannot renew its
lease, so after 30 s it looks dead. `partnerkit status` reports this room and asks for attention below
`FREE_FLOOR_BYTES`, or below the WAL's size when that is larger, before the disk is full.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# 100 MiB: hours of a busy store's writes (webhooks, the syncs' pages, the poller's marks come to tens of
# MB a day), so the line comes while there is time to free space, and far above what one checkpoint needs
# unless the WAL has grown past it (a reader holding it open): then the WAL's size is the floor.
FREE_FLOOR_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class Room:
    """What PARTNERKIT_DB's filesystem leaves the database: free bytes (None: unknown), the WAL's bytes,
    and whether the filesystem is mounted read-only."""

    free_bytes: int | None
    wal_bytes: int
    read_only: bool

    @property
    def floor_bytes(self) -> int:
        """Below this much free space a person should act: FREE_FLOOR_BYTES, or the WAL's size if larger."""
        return max(FREE_FLOOR_BYTES, self.wal_bytes)

    @property
    def low(self) -> bool:
        """The database may soon (or already) fail to write: read-only, or under `floor_bytes` free."""
        return self.read_only or (self.free_bytes is not None and self.free_bytes < self.floor_bytes)


def room(db_path: str | os.PathLike) -> Room:
    """The room PARTNERKIT_DB's filesystem leaves (statvfs of its directory: the space this user may take)."""
    path = Path(db_path)
    if str(db_path) == ":memory:":
        return Room(None, 0, False)
    try:
        wal = path.with_name(path.name + "-wal").stat().st_size
    except OSError:
        wal = 0
    try:
        fs = os.statvfs(path.parent if str(path.parent) else ".")
    except OSError:
        return Room(None, wal, False)
    return Room(fs.f_bavail * fs.f_frsize, wal, bool(fs.f_flag & os.ST_RDONLY))


def megabytes(size: int) -> str:
    """A size as whole MB ("37 MB"), one decimal under 10 MB ("0.4 MB"), "under 0.1 MB" below that (0 bytes: "0 MB")."""
    mb = size / (1024 * 1024)
    if size == 0:
        return "0 MB"
    if mb < 0.1:
        return "under 0.1 MB"
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"
