"""The receiver's gunicorn masters, as each records itself in `meta` (no table of its own, no migration).

A master writes one row when it is ready (`started`: who it is, where it listens, since when) and marks it
once more when it stops cleanly (`stopped`); its web workers never write here, and no request does. A master
killed (kill -9, the OOM killer, a power cut) never gets to mark its row: `partnerkit status` reads the rows
(`masters`) and names such a master of its own host (partnerkit.status). One row per master, keyed by its id
(`host:pid:pid-namespace:random`, as the worker lease's holder), so two masters on one database (other
ports) never overwrite each other. The rows stay few: a master starting drops the rows its caller judges
superseded (a master killed on an address this one now listens on: this start is its restart) and those stopped
cleanly over KEEP_STOPPED ago, and keeps of the rest the rows its caller vouches for (a master that runs, one killed
whose address no master listens on again yet: `partnerkit status` names it), plus the newest KEPT stopped cleanly
and the newest KEPT never marked stopped (masters of hosts it cannot see). A row is crowded out only by newer rows
of its own kind: a receiver restarted again and again never pushes out another receiver's row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from partnerkit.store import meta
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso, parse_ts

PREFIX = "receiver.master."
KEEP_STOPPED = timedelta(days=30)  # a master stopped cleanly is forgotten this long after it stopped
KEPT = 5  # of each kind: the newest masters stopped cleanly kept, and the newest never marked stopped that
# no one vouches for (another host's or container's, which this host cannot judge)


@dataclass(frozen=True)
class Master:
    """A receiver's gunicorn master as it recorded itself: its id, the addresses it listened on, when it was
    ready, and when it stopped cleanly (None: still running, or killed)."""

    holder: str  # host:pid:pid-namespace:random (partnerkit.processes reads it)
    bind: tuple[str, ...]
    started_at: datetime
    stopped_at: datetime | None = None

    @property
    def host(self) -> str:
        return self.holder.split(":")[0]

    @property
    def pid(self) -> int | None:
        parts = self.holder.split(":")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None

    def _value(self) -> str:
        return json.dumps({"bind": list(self.bind), "started_at": iso(self.started_at),
                           "stopped_at": iso(self.stopped_at)})


def _read(key: str, value: str) -> Master | None:
    """One row as a Master; None for a row this release cannot read (never an error: status must still run)."""
    try:
        record = json.loads(value)
        started = parse_ts(record["started_at"])
        if started is None:
            return None
        return Master(key[len(PREFIX):], tuple(str(b) for b in record.get("bind") or ()), started,
                      parse_ts(record.get("stopped_at")))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def masters(db: Database) -> list[Master]:
    """The recorded masters, the newest start first (a few rows: see the module's docstring)."""
    found = [m for key, value in meta.with_prefix(db, PREFIX) if (m := _read(key, value)) is not None]
    return sorted(found, key=lambda m: m.started_at, reverse=True)


def started(db: Database, master: Master, *, superseded: Callable[[Master], bool], now: datetime,
            kept: Callable[[Master], bool] = lambda other: False) -> None:
    """Record `master` as serving, in one transaction with the pruning: the rows `superseded` judges so and those
    stopped cleanly over KEEP_STOPPED before `now` are dropped; the rows `kept` vouches for stay, whatever their
    number; of the others, the newest KEPT - 1 stopped cleanly stay (`master` makes KEPT once it stops), and the
    newest KEPT never marked stopped."""
    with transaction(db) as conn:
        meta.put(conn, PREFIX + master.holder, master._value(), now=now)
        stopped_rows: list[tuple[str, Master]] = []
        unmarked_rows: list[tuple[str, Master]] = []
        for key, value in meta.with_prefix(conn, PREFIX):
            other = _read(key, value)
            if other is None or other.holder == master.holder:
                continue  # a row of a later release is left as it is
            if superseded(other) or (other.stopped_at is not None and now - other.stopped_at > KEEP_STOPPED):
                meta.delete(conn, key)
            elif not kept(other):
                (unmarked_rows if other.stopped_at is None else stopped_rows).append((key, other))
        for rows, room in ((stopped_rows, KEPT - 1), (unmarked_rows, KEPT)):  # `master`, stopped, is the KEPT-th
            rows.sort(key=lambda row: row[1].started_at, reverse=True)
            for key, _ in rows[room:]:
                meta.delete(conn, key)


def stopped(db: Database, holder: str, *, now: datetime) -> bool:
    """Mark the master `holder` stopped cleanly at `now`; False when its row is gone (pruned meanwhile)."""
    with transaction(db) as conn:
        value = meta.get(conn, PREFIX + holder)
        master = _read(PREFIX + holder, value) if value is not None else None
        if master is None:
            return False
        meta.put(conn, PREFIX + holder, Master(holder, master.bind, master.started_at, now)._value(), now=now)
        return True
