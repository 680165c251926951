"""The receiver's facts for `partnerkit status`: which gunicorn masters serve, and one killed on this host.

The master records itself when it is ready and marks itself stopped when it stops cleanly
(`note_receiver_started`, `note_receiver_stopped`: receiver.gunicorn_app's `when_ready` and `on_exit` hooks,
in the master only, never in a web worker or a request; partnerkit.store.receivers keeps the rows). A master
that never marked itself stopped and whose process is gone was killed: `status` names it at once, as it
names a worker that died holding its lease. Whether it runs is `processes.holder_alive`'s answer, so a
master of another host or container is never judged (it cannot be seen from here).
"""

from __future__ import annotations

import socket
from datetime import datetime
from typing import Any, Iterable

from partnerkit.processes import holder_alive, new_holder
from partnerkit.store import Database, receivers
from partnerkit.timeutil import iso, utcnow


def master_running(master: receivers.Master) -> bool | None:
    """Whether a recorded master still runs: True or False for one of this host and pid namespace (a pid reused
    by a later process is not it), None when this process cannot see it (another host or container)."""
    return holder_alive(master.holder, since=master.started_at.timestamp())


def note_receiver_started(db: Database, bind: Iterable[str], *, now: datetime | None = None) -> str:
    """Record that this process, a receiver's gunicorn master, now serves on `bind`; its id (for
    `note_receiver_stopped`).

    The rows it drops are its predecessors only: masters of this host killed (no longer running, never marked
    stopped) that listened on an address this one listens on, the restart that repairs them. It never drops a
    master that runs (the other half of a blue/green pair, another port's receiver), nor one killed on an address
    it does not serve: that one stays named by `partnerkit status` until a master listens on its address again,
    whatever else starts on this host meanwhile."""
    now = now or utcnow()
    holder = new_holder()  # the worker lease holder's form
    addresses = tuple(bind)
    verdicts: dict[str, bool | None] = {}

    def running(other: receivers.Master) -> bool | None:  # None: stopped cleanly, or not judged from here
        if other.holder not in verdicts:
            verdicts[other.holder] = None if other.stopped_at is not None else master_running(other)
        return verdicts[other.holder]

    receivers.started(db, receivers.Master(holder, addresses, now), now=now,
                      superseded=lambda other: running(other) is False and not set(other.bind).isdisjoint(addresses),
                      kept=lambda other: running(other) is not None)
    return holder


def note_receiver_stopped(db: Database, holder: str, *, now: datetime | None = None) -> None:
    """Record that the master `holder` stopped cleanly (gunicorn's shutdown ran to its end)."""
    receivers.stopped(db, holder, now=now or utcnow())


def receiver_facts(db: Database) -> dict[str, Any]:
    """The status fields: `receiver_running` (True while a master recorded on this host runs, False when
    masters were recorded here and none runs, None when none was, or only on hosts this cannot see) and
    `receiver_masters` (each recorded master, the newest first, with `running` as `master_running` says,
    False once it stopped cleanly)."""
    shown = []
    for master in receivers.masters(db):
        running = False if master.stopped_at is not None else master_running(master)
        shown.append({"pid": master.pid, "host": master.host, "bind": list(master.bind),
                      "started_at": iso(master.started_at), "stopped_at": iso(master.stopped_at),
                      "running": running})
    host = socket.gethostname()
    here = [m["running"] for m in shown if m["host"] == host and m["running"] is not None]
    return {"receiver_running": any(here) if here else None, "receiver_masters": shown}
