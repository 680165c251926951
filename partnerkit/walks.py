"""Long walks of the provider's list pages that keep their place, and the stop that ends them at a batch.

A sync reads every page of a list: recharges and transactions by date range (reconcile.sync), orders down to a
time (partnerkit.vouchers.catch_up_orders; the order list has no date filter). On a busy day that is hundreds of
pages, more than an hour's budget. `KeptWalk` notes where such a walk is (partnerkit.store.ledger `sync_walks`)
so that the next walk of the same entity and range reads on from there instead of from page 1, and `stop_walks`
ends every walk of this process at its next batch, its place kept (`WalkStopped`): SIGTERM or SIGINT to the
worker (reconcile.scheduler), Ctrl-C to a command that walks (`partnerkit orders sync`, `reconcile`).

Owned here, not by reconcile, because the order walk is partnerkit's and partnerkit never imports reconcile.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager
from datetime import datetime, timedelta
from time import monotonic
from typing import Any, Callable, Iterator

from partnerkit.errors import ApiError, PartnerKitError
from partnerkit.store import ledger as ledger_store
from partnerkit.timeutil import iso, parse_ts

log = logging.getLogger(__name__)

RESUME_WITHIN = timedelta(hours=6)  # an interrupted walk older than this starts over (see KeptWalk)
PLACE_EVERY_S = 5.0  # how often a running walk notes the page it has stored up to (see KeptWalk.between_batches)
WORKER_STOPPING = "the worker is stopping (SIGTERM or SIGINT)"
# Why a walk asked for records as fresh as a moment (`fresh_since`) was not walked: a complete read begun since
# then has covered its range (the order sync's `stopped`; reconcile.sync.SyncSummary.read_already).
READ_ALREADY = "read already"


class WalkStopped(PartnerKitError):
    """This process is stopping (SIGTERM to the worker, Ctrl-C to a command): a walk ended between two batches,
    everything it read stored and its place kept, so the next walk of the same range reads on from there."""


# Set while this process stops (reconcile.scheduler on SIGTERM or SIGINT to the worker, `worker --once` or `run`;
# the commands that walk on Ctrl-C): every running walk ends at its next batch, as a budget stop ends it. One per
# process, as the signal is; the reason goes into WalkStopped's message.
_STOPPING = threading.Event()
_WHY = [WORKER_STOPPING]


def stop_walks(reason: str = WORKER_STOPPING) -> None:
    """Ask every walk of this process to end at its next batch, its place kept (WalkStopped, saying `reason`)."""
    _WHY[0] = reason
    _STOPPING.set()


def allow_walks() -> None:
    """Walks run to their end again (the worker or command that asked them to stop has stopped)."""
    _STOPPING.clear()


def walks_stopping() -> bool:
    """Whether this process has asked its walks to stop."""
    return _STOPPING.is_set()


_SIGNALS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped (SIGTERM)"}


@contextmanager
def stopped_by_signals(say: Callable[[str], None]) -> Iterator[None]:
    """For a command that walks (`orders sync`, `reconcile`): the first SIGINT (Ctrl-C) or SIGTERM ends its walk
    at the next batch, everything read stored and its place kept (WalkStopped, which the command line prints as
    its one-line error); `say` tells the user at once, since a page in flight may take seconds. A second signal
    acts as usual (KeyboardInterrupt, or the end of the process); the place noted every PLACE_EVERY_S is kept.
    Before, Ctrl-C raised KeyboardInterrupt wherever the walk was, and its place was kept only as far as a kill's."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may install handlers
        return
    previous: dict[int, Any] = {}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def handle(signum: int, _frame: Any) -> None:
        restore()  # a second signal stops the command at once
        say(f"{_SIGNALS[signum]}: the sync stops after the page it is reading, its place kept (again to stop at once)")
        stop_walks(_SIGNALS[signum])

    previous.update({sig: signal.signal(sig, handle) for sig in _SIGNALS})
    try:
        yield
    finally:
        restore()
        allow_walks()


class KeptWalk:
    """One entity's walk of a range: from page 1, or on from where an interrupted one stopped.

    A walk the budget or the provider stops (any ApiError: BudgetExhausted, a 429, a 5xx or timeout
    after the client's retries) ends its records there instead of raising at once, so the sync stores
    everything it read; `finish()` then notes the page to read next (partnerkit.store.ledger
    `keep_walk_position`) and raises. A walk this process is asked to stop (`stop_walks`: SIGTERM to
    the worker) ends the same way at its next batch (WalkStopped). The next walk of the same entity and
    range, within RESUME_WITHIN, starts at that page, and the coverage it claims when it reaches the end
    counts from when the first part began. Before, each run started at page 1 again, and a day with more
    pages than an hour's budget was never read to its end. Re-reading a page is harmless (every write is
    an upsert), and no record is skipped: the lists grow at their ends (newest first), which moves older
    records onto later pages, never earlier ones.

    `fresh_since` (the nightly run: when its nights became due): only a walk whose first part began then or
    later is read on from, whatever its age; one begun before is read again from page 1, because the pages it
    read before its place show the records as they were before the nights had settled (a recharge still
    PROCESSING that failed at 00:50, read at 00:45), which the report must not be built on.

    A walk that is killed (SIGKILL, the OOM killer, a power cut) never reaches `finish()`, so while it
    runs it also notes its place every PLACE_EVERY_S (`between_batches`): the page it reads now, once
    every record handed out before it is written (the sync's `settle`). A kill then costs the pages read
    since, not the whole walk. `keep=False`: a walk that never keeps a place (its range moves from run to
    run) but still ends at its next batch when asked to stop.
    """

    def __init__(self, db: Any, entity: str, first: str, last: str, now: datetime, *,
                 fresh_since: datetime | None = None, keep: bool = True) -> None:
        self.db, self.entity, self.now, self.keeps = db, entity, now, keep
        self.days = (first, last)
        self.started, self.start_page = iso(now), 1
        self.walk: Any = None
        self.stopped: ApiError | WalkStopped | None = None
        self.began = monotonic()
        self.place_due = self.began + PLACE_EVERY_S
        kept = ledger_store.walk_position(db, entity, *self.days) if keep else None
        if kept is not None:
            page, started, _ = kept
            begun = parse_ts(started, field="started_at")
            if begun is not None and begun <= now and (
                    now <= begun + RESUME_WITHIN if fresh_since is None else begun >= fresh_since):
                self.start_page, self.started = page, started
                log.info("%s sync of %s..%s reads on from page %d (begun %s)", entity, *self.days, page, started)
            elif fresh_since is not None and begun is not None and begun < fresh_since:
                log.info("%s sync of %s..%s reads from page 1, not on from page %d: that walk began at %s, before "
                         "the nights were due (%s)", entity, *self.days, page, started, iso(fresh_since))
        self.kept = self.start_page  # the place noted last (a walk from page 1 has none to note)

    def options(self) -> dict[str, int]:
        """The client's start_page, when reading on (stand-ins without it are only ever asked from page 1)."""
        return {"start_page": self.start_page} if self.start_page > 1 else {}

    def follow(self, walk: Any) -> None:
        """The walk whose `next_page` (the page it reads next; None: it cannot read on) is this one's place."""
        self.walk = walk

    def records(self, walk: Any) -> Iterator[Any]:
        """The walk's records until it ends, or until the provider or the budget stops it; none when this
        process is stopping already (a sync that waited for another to end), before a page is asked for."""
        self.follow(walk)
        if not self.may_begin():
            return
        try:
            yield from walk
        except ApiError as exc:
            self.stopped = exc

    def may_begin(self) -> bool:
        """False (and stopped) when this process is stopping already: the walk asks for no page at all."""
        if _STOPPING.is_set():
            self.stopped = WalkStopped(_WHY[0])
            return False
        return True

    def between_batches(self, settle: Callable[[int | None], int | None]) -> bool:
        """After each batch the sync hands to the store: False when the walk must end here (this process is
        stopping: `stop_walks`). Every PLACE_EVERY_S, `settle(page)` is given the page the client's walk reads
        now (`next_page`: every record of the pages before it has been handed out); between those, `settle(None)`.
        Either way it answers the last page whose records before it are all written (a writer thread may catch
        up to one a batch or two later), or None; a page past the one noted last is noted."""
        if _STOPPING.is_set():
            self.stopped = WalkStopped(_WHY[0])
            return False
        page = None
        now = monotonic()
        if now >= self.place_due:
            self.place_due = now + PLACE_EVERY_S
            page = getattr(self.walk, "next_page", None)  # None: a stand-in's walk, which cannot read on
        written = settle(page)
        if written is not None and written > self.kept:
            self._keep(written, "noted while reading: a walk killed after this reads on from here")
        return True

    def _keep(self, page: int, reason: str) -> None:
        if not self.keeps:
            return
        at = (self.now + timedelta(seconds=monotonic() - self.began)).replace(microsecond=0)
        ledger_store.keep_walk_position(self.db, self.entity, *self.days, next_page=page, started_at=self.started,
                                        stopped_at=iso(at), reason=reason)
        self.kept = page

    def finish(self) -> str:
        """After everything read is stored: keep the place and raise if the walk was stopped; else the
        time the walk began (its coverage counts from there)."""
        if self.stopped is not None:
            next_page = getattr(self.walk, "next_page", None) if self.keeps else None
            if next_page is not None:
                if next_page > self.kept:  # not where it began: that place is kept already, or page 1
                    self._keep(next_page, str(self.stopped))
                log.info("%s sync of %s..%s stopped before %s: %s", self.entity, *self.days,
                         "its first page" if next_page == 1 else f"page {next_page}", self.stopped)
            if isinstance(self.stopped, WalkStopped):
                where = ("part-way, keeping no place (its next run starts over)" if not self.keeps else
                         "part-way" if next_page is None else "before its first page" if next_page == 1 else
                         f"before page {next_page}, which its next run reads on from")
                raise WalkStopped(f"the {self.entity} sync of {self.days[0]}..{self.days[1]} stopped {where}: "
                                  f"{self.stopped}")
            raise self.stopped
        if self.keeps:
            ledger_store.forget_walk(self.db, self.entity, *self.days, older_than=iso(self.now - RESUME_WITHIN))
        return self.started
