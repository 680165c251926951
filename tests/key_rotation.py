"""Another process rotates and retires the key file while it holds the database's write lock (tests' helper).

What a value sealed before a wait for the write lock meets: `keys rotate; keys retire` beside it, run while a big
day's match or a backup's checkpoint holds the lock. Used by the voucher fetch's and the webhook token's tests.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from partnerkit.rotation import retire_key_file, rotate_key_file
from partnerkit.store import open_db


def rotate_and_retire_behind_the_lock(config: Any, done: threading.Event, *, pause_s: float = 0.5) -> None:
    """Take the write lock in another connection (as another process), then return; in a thread, after `pause_s`
    (the code under test has sealed its value and waits for the lock), rotate the key file, retire the old key
    (nothing stored needs it yet), set `done` and release the lock."""
    locked = threading.Event()

    def hold() -> None:
        other = open_db(config.db_path)
        try:
            other.conn.execute("BEGIN IMMEDIATE")  # a big day's match, a backup's checkpoint ...
            locked.set()
            time.sleep(pause_s)
            rotate_key_file(config.key_file)
            assert retire_key_file(config.key_file, other)[1] == 1  # nothing stored needs the old key yet
            done.set()
            other.conn.execute("ROLLBACK")
        finally:
            other.conn.close()

    threading.Thread(target=hold, daemon=True).start()
    assert locked.wait(10)
