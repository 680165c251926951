"""Directories the kit creates: private to their owner at every level, and the renames into them durable.

`Path.mkdir(mode=0o700, parents=True)` applies the mode to the last directory only; the parents it
creates get 0777 less the umask (0777 under umask 000), and anyone could then rename the private
directory out from under the database and put their own in its place.

A file renamed into place (a backup, a restored database) is on disk once its directory is: the rename
is an entry of the directory, and a power cut loses it with the directory's unsynced blocks, however
well the file itself was synced. `sync_directory` after the rename, before saying it is done.

A file that holds a secret and was made by someone else (a database copied in, a config file written under
umask 022) is only warned about, never changed: `warn_if_readable_by_others` names it and the `chmod` to run.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
_WARNED: set[str] = set()  # the files `warn_if_readable_by_others(once=True)` named in this process
_WARNED_LOCK = threading.Lock()


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


def warn_if_readable_by_others(path: str | os.PathLike, what: str, logger: logging.Logger, *,
                               also: str = "", once: bool = False) -> None:
    """A WARNING naming `what` (e.g. "the voucher key file") at `path` and the `chmod 600` to run, when its mode
    gives the group or other users any access; `also` ends the line (what it holds, files to treat alike).
    `once`: at most one per file a process (a database opened by every connection). A file gone meanwhile says
    nothing: whoever opens it next says what is wrong."""
    key = os.path.abspath(path)
    if once:
        with _WARNED_LOCK:
            if key in _WARNED:
                return
            _WARNED.add(key)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & 0o077:
        logger.warning("%s %s can be read by other users; run: chmod 600 %s%s", what, path, path, also)
