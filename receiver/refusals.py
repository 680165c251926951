"""Refused deliveries, counted in memory and saved every few seconds, for `partnerkit status`.

The receiver refuses a delivery before anything is stored (receiver.views: a body too large, a
missing header, a timestamp out of tolerance, a signature no accepted token made, ...). Each refusal
is logged and counted in /metrics, which live in the worker processes; `partnerkit status` is another
process and reads the database. So each refusal is also noted here, in a tally of this process by
minute and reason, and the worker's housekeeping thread (receiver.state.Housekeeper) saves the tally
in one transaction every REFUSALS_SAVE_S and once more when the worker exits. A flood of refused
requests thus costs each worker one small write every few seconds, never one per request, and real
deliveries never queue behind it for SQLite's write lock. A save that fails (the database locked,
read-only or full) gives its tally back, to go with the next save: nothing counted is dropped while
the process lives. A worker killed outright (SIGKILL) loses what it counted since its last save.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime

from sqlite_utils import Database

from partnerkit.store import webhook_refusals
from partnerkit.store.jobs import stamp
from partnerkit.store.webhook_refusals import Tally, minute_of

REFUSALS_SAVE_S = 5.0  # how often the housekeeping thread saves the tally, when there is one


class RefusalCounts:
    """This process's refusals not yet saved, by (minute, reason): requests note, the housekeeping
    thread saves. A few hundred bytes per minute and reason, however many requests."""

    def __init__(self) -> None:
        self._start()
        self.saves = 0  # transactions that saved a tally (each adds one row per minute and reason)

    def _start(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._tally: dict[tuple[str, str], list] = {}  # (minute, reason) -> [count, first_at, last_at]

    def note(self, reason: str, now: datetime) -> None:
        """Count one refusal of `reason` at `now` (a fixed word: never anything the request carried)."""
        if self._pid != os.getpid():  # forked: the parent's tally is the parent's to save
            self._start()
        at = stamp(now)
        key = (minute_of(at), reason)
        with self._lock:
            entry = self._tally.get(key)
            if entry is None:
                self._tally[key] = [1, at, at]
            else:
                entry[0] += 1
                entry[1], entry[2] = min(entry[1], at), max(entry[2], at)

    def pending(self) -> int:
        """Refusals noted and not saved yet."""
        with self._lock:
            return sum(entry[0] for entry in self._tally.values())

    def save(self, db: Database) -> int:
        """Add the tally to the database in one transaction; return how many refusals it held.

        What is noted meanwhile goes to the next save. If the write fails, the tally is given back
        (merged with what was noted meanwhile) and the error raised."""
        with self._lock:
            taken, self._tally = self._tally, {}
        if not taken:
            return 0
        try:
            webhook_refusals.add(db, [Tally(minute, reason, count, first, last)
                                      for (minute, reason), (count, first, last) in taken.items()])
        except BaseException:
            self._give_back(taken)
            raise
        self.saves += 1
        return sum(entry[0] for entry in taken.values())

    def _give_back(self, taken: dict[tuple[str, str], list]) -> None:
        with self._lock:
            for key, (count, first, last) in taken.items():
                entry = self._tally.get(key)
                if entry is None:
                    self._tally[key] = [count, first, last]
                else:
                    entry[0] += count
                    entry[1], entry[2] = min(entry[1], first), max(entry[2], last)
