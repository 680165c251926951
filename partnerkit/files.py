"""Directories the kit creates: private to their owner at every level, and the renames into them durable.

`Path.mkdir(mode=0o700, parents=True)` applies the mode to the last directory only; the parents it
creates get 0777 less the umask (0777 under umask 000), and anyone could then rename the private
directory out from under the database and put their own in its place.

A file renamed into place (a backup, a restored database) is on disk once its directory is: the rename
is an entry of the directory, and a power cut loses it with the directory's unsynced blocks, however
well the file itself was synced. `sync_directory` after the rename, before saying it is done.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700


def make_private_dirs(directory: str | os.PathLike) -> None:
    """Create `directory` and each missing parent with mode 0700, whatever the umask; leave existing ones as
    they are. A file where a directory belongs raises FileExistsError naming it, as mkdir does."""
    missing = []
    current = Path(directory)
    while not current.is_dir() and current.parent != current:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # another process created it meanwhile: theirs stands
        os.chmod(path, PRIVATE_DIR_MODE)  # a umask such as 0277 would otherwise take the owner's own rights


def sync_directory(directory: str | os.PathLike) -> None:
    """fsync `directory`, so that the renames into it survive a power cut. A filesystem that cannot sync a
    directory (EINVAL) leaves them as they stand; any other error is raised."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)
