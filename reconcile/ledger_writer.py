"""Transaction pages into the store: mapped in the sync's thread, written by a thread of their own.

`reconcile.sync.sync_transactions` reads every page of the provider's transaction list into
`TransactionPages`; `store_transaction_page` stores one page directly (the plain way, same result).
After a complete read, `withdraw_unlisted` takes the stored transactions it no longer listed out.
"""

from __future__ import annotations

import logging
import queue
import threading
from datetime import date, datetime, timedelta
from typing import Any, Iterable

from partnerkit.money import fmt, from_cents
from partnerkit.store import ledger as ledger_store
from partnerkit.store import quarantine
from partnerkit.store.db import database_file
from reconcile.ledger import canonical_json
from reconcile.ledger_fast import map_page, record_json

log = logging.getLogger(__name__)

STAGE_ROWS = 20_000  # transaction rows per copy into the store
# A complete read that no longer lists more than half of its days' stored transactions is taken for the
# provider's fault (an empty answer, a list cut short), not for that many withdrawals: it withdraws none.
# Up to this many at once are withdrawn whatever the share (a quiet day has only a few entries).
WITHDRAW_ALWAYS = 10
_LOST_MOST = ("the provider's transaction list of %s..%s no longer lists more than half of the %d stored transactions"
              " it could check (those between the first and last entries it listed): none withdrawn (a list that loses that much at once is taken for the provider's"
              " fault); the next complete read of those days checks again")


def hull(one: tuple[str, str] | None, other: tuple[str, str] | None) -> tuple[str, str] | None:
    """The smallest span holding both (either may be None)."""
    if one is None or other is None:
        return one or other
    return min(one[0], other[0]), max(one[1], other[1])


def _quarantine(db: Any, bad: list[Any], stamp: str) -> set[str]:
    """Hold the records the mapping refused; return the ids (as stored) of those keyed by their id."""
    log.warning("quarantined %d transaction record(s): %s", len(bad), "; ".join(q.reason for q in bad[:5]))
    items = [(q.key, q.reason, canonical_json(q.raw), _day_of(q.raw)) for q in bad]
    ledger_store.quarantine(db, items, stamp)
    return {ident for key, *_ in items if (ident := quarantine.id_in_key("transaction", key)) is not None}


def _noted(written: Any) -> list[str]:
    """The ids of a write's records held because their id names a stored transaction they are not, logged
    (one WARNING a batch: the reasons carry ids, amounts and times, never a secret)."""
    if written.given_twice:
        log.warning("quarantined %d transaction record(s) whose id names a stored transaction they are not (the"
                    " stored ones kept as they were): %s", len(written.given_twice),
                    ", ".join(written.given_twice[:10]) + (", ..." if len(written.given_twice) > 10 else ""))
    return written.given_twice


def store_transaction_page(db: Any, batch: list[Any], stamp: str) -> tuple[int, int]:
    """Map one page of transaction records (the one alias mapping) and store it; return (stored, quarantined).

    A record whose id names a stored transaction it is not is quarantined, the stored row kept
    (`partnerkit.store.ledger.GivenTwice`). It releases nothing from the quarantine: that is the sync's
    (`TransactionPages`, given what is held).
    """
    page = map_page(batch)
    given_twice = _noted(ledger_store.store_transactions(db, page.runs, page.shapes, stamp, record_json=record_json))
    if page.bad:
        _quarantine(db, page.bad, stamp)
    return page.stored - len(given_twice), len(page.bad) + len(given_twice)


class _Writer(threading.Thread):
    """Copies stages into the store, in the order they come, until told to stop. A walk's page put between
    them (`mark`) becomes `written` once every stage before it is copied."""

    def __init__(self, path: str, stamp: str) -> None:
        super().__init__(name="transaction-writer", daemon=True)
        self.path, self.stamp = path, stamp
        self.stages: queue.Queue = queue.Queue(maxsize=2)  # at most ~3 stages in memory
        self.error: BaseException | None = None
        self.written: int | None = None  # the last page marked whose stages before it are all copied
        self.given_twice: list[str] = []  # ids of records held instead of stored (read once the thread is joined)

    def run(self) -> None:
        while (stage := self.stages.get()) is not None:
            if isinstance(stage, int):  # a page marked after the stages before it
                if self.error is None:
                    self.written = stage
                continue
            try:
                if self.error is None:
                    self.given_twice += _noted(ledger_store.copy_stage(stage, self.path, self.stamp))
            except BaseException as exc:  # handed to the sync's thread by put() / finish()
                self.error = exc
            finally:
                stage.close()

    def put(self, stage: Any) -> None:
        self._raise()
        self.stages.put(stage)

    def mark(self, page: int) -> None:
        """`written` becomes `page` once the stages put before it are copied."""
        self.put(page)

    def finish(self) -> None:
        """Copy what is queued, stop, and raise what the copies raised."""
        self.stages.put(None)
        self.join()
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error


class TransactionPages:
    """A sync's transaction pages into the store: mapped in this thread, written by another.

    Mapping is Python (it holds the GIL); writing is SQLite (it releases the GIL while a statement
    runs). Each page is mapped (`map_page`) and its rows staged in memory (`ledger_store.Stage`);
    every STAGE_ROWS rows the stage goes to a writer thread, which copies it into `transactions`
    with one INSERT ... SELECT while the next pages are mapped: both cores, and one statement per
    batch costs less than binding every row into the indexed table. Stages are copied in page order,
    so a record listed twice ends as its last copy. A sync of fewer rows (or of an in-memory store)
    never starts the thread: it copies its one stage itself. Use as a context manager.

    A walk's place is noted only once the rows before it are written: `settle(page)` hands what is staged
    to the writer with the page marked after it, and answers the last marked page the writer has passed.

    `held`: the ids (as stored) of the transactions quarantined under `transaction:<id>` when the sync
    started. One this sync stores correctly (its last copy readable) is released by `close()`, once
    every row is written. Usually nothing is held, and then no page costs anything more.

    A record whose id names a stored transaction it is not (`partnerkit.store.ledger.GivenTwice`) is held
    by the write that finds it, the stored row kept: counted as quarantined, not stored, and its id is
    released by no copy of this sync (the id was given twice in it). The write finds them only when it
    changed fewer rows than it was handed: a day of new transactions pays nothing for the check.
    """

    def __init__(self, db: Any, stamp: str, *, held: Iterable[str] = ()) -> None:
        self.db, self.stamp = db, stamp
        self.path = database_file(db)
        self.stage: Any = None
        self.writer: _Writer | None = None
        self.stored = self.quarantined = 0
        self.held = set(held)
        self.readable: set[str] = set()  # held ids whose latest copy in this sync was stored
        self.released: set[str] = set()  # those released by close()
        self.given_twice: list[str] = []  # ids of records held because their id names another stored transaction
        # The earliest and the latest created_at among the first and the last row of each batch added (given twice
        # too: the provider listed an entry then): a span this read listed, for withdraw_unlisted. Two rows a batch,
        # nothing per record: exact for a list in time order (newest first, as the sandbox's), narrower otherwise.
        self.span: tuple[str, str] | None = None

    def add(self, batch: list[Any]) -> None:
        """Map one page; stage its rows; quarantine what fits no alias."""
        page = map_page(batch)
        if page.runs:
            edges = page.runs[0][1][0][7], page.runs[-1][1][-1][7]  # created_at (ledger_store.ROW_COLUMNS)
            self.span = hull(self.span, (min(edges), max(edges)))
        if self.held:
            self.readable.update(self.held.intersection([row[0] for _, rows in page.runs for row in rows]))
        if page.bad:
            ids = _quarantine(self.db, page.bad, self.stamp)
            self.quarantined += len(page.bad)
            self.held |= ids  # held now, whether or not it was before: a later readable copy releases it
            self.readable -= ids  # an unreadable copy after a readable one keeps it held (in one page too)
        self.stored += page.stored
        if self.path is None:
            self.given_twice += _noted(ledger_store.store_transactions(self.db, page.runs, page.shapes, self.stamp,
                                                                       record_json=record_json))
            return
        if self.stage is None:
            self.stage = ledger_store.Stage(record_json=record_json)
        self.stage.add(page.runs, page.shapes)
        if self.stage.rows >= STAGE_ROWS:
            self._hand_over()

    def _hand_over(self) -> None:
        """The stage to the writer thread (started with the first)."""
        if self.writer is None:
            self.writer = _Writer(self.path, self.stamp)  # type: ignore[arg-type]
            self.writer.start()
        stage, self.stage = self.stage, None
        self.writer.put(stage)

    def settle(self, page: int | None) -> int | None:
        """The last page a walk read whose rows before it are all written, to note as the walk's place
        (`partnerkit.walks.KeptWalk.between_batches`), without waiting for the writer; None before the first.
        Given `page` (the walk reads it now, every record it handed out before that added here: its place is
        due), what is staged goes to the writer now with `page` marked after it, to be answered once the
        writer has passed the mark (a batch or two later); before the writer is started (fewer than STAGE_ROWS
        rows so far), it is copied here and `page` answered at once. Without one, only the answer."""
        if page is None:
            return self.writer.written if self.writer is not None else None
        if self.path is None:
            return page  # an in-memory store: each page is stored as it is added
        if self.writer is None:  # fewer than STAGE_ROWS rows so far: copied here, as close() copies them
            stage, self.stage = self.stage, None
            if stage is not None:
                self._copy(stage)
            return page
        if self.stage is not None:
            self._hand_over()
        self.writer.mark(page)
        return self.writer.written

    def close(self) -> tuple[int, int]:
        """Write what is staged and wait for the writer; return (stored, quarantined)."""
        stage, self.stage = self.stage, None
        if stage is not None:
            if self.writer is not None:
                self.writer.put(stage)
            else:
                self._copy(stage)
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.finish()
            self.given_twice += writer.given_twice
        if self.given_twice:  # another transaction under a stored id: held, whatever else this sync listed
            self.stored -= len(self.given_twice)
            self.quarantined += len(self.given_twice)
            self.readable.difference_update(self.given_twice)
            self.given_twice = []
        if self.readable:  # every row is written: a crash before this leaves them held for the next sync
            quarantine.release(self.db, "transaction", sorted(self.readable))
            self.released |= self.readable
            self.readable.clear()
        return self.stored, self.quarantined

    def _copy(self, stage: Any) -> None:
        """Copy a stage in this thread (no writer started) and free it."""
        try:
            self.given_twice += _noted(ledger_store.copy_stage(stage, self.path, self.stamp))  # type: ignore[arg-type]
        finally:
            stage.close()

    def __enter__(self) -> "TransactionPages":
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is None:
            return
        if self.stage is not None:  # a failed sync: what was copied stays (idempotent), the rest is dropped
            self.stage.close()
            self.stage = None
        if self.writer is not None:
            try:
                self.writer.finish()
            except BaseException:  # the sync's own exception is the one to raise
                pass


def read_span(db: Any, first: date, last: date, listed: tuple[str, str] | None, *, began: str,
              stamp: str) -> tuple[str, str] | None:
    """The span a complete read of [first, last] listed: `listed`, its last part's (`TransactionPages.span`),
    and, when it read on from a place an earlier part kept (`began`, when its first part began, is not this
    part's `stamp`), the span of the rows its first part stamped (`began`) and no read has listed since.

    Any records a complete read listed bound a stretch of time it covered whole (see withdraw_unlisted), so
    the hull of its first and last parts covers the parts between as well. The first part's span is not
    kept with the walk's place: it is found from the rows themselves, by two probes of the created_at index
    within the read's UTC days, outside what the last part listed (a list newest first, as the sandbox's,
    leaves the first part the newest rows: the probe from the end stops at once). A row of the first part
    listed again by another read since carries that read's time and is passed over: the span is narrower
    for it, never wider than what the read listed.
    """
    if began == stamp:
        return listed
    start, end = first.isoformat(), (last + timedelta(days=1)).isoformat()
    below = ledger_store.stamped_span(db, start, min(end, listed[0]) if listed else end, synced_at=began)
    above = ledger_store.stamped_span(db, max(start, listed[1]) if listed else start, end, synced_at=began)
    return hull(hull(listed, below), above)


def _window(first: date, last: date, span: tuple[str, str]) -> tuple[str, str] | None:
    """[start, end) of the withdrawal check: the span's seconds, within a day either side of the read's days."""
    start, end = max(span[0][:19], (first - timedelta(days=1)).isoformat()), (last + timedelta(days=2)).isoformat()
    if span[1][:19] < end:  # the second after the latest listed (a stray year 9999 stays clipped)
        end = (datetime.fromisoformat(span[1][:19]) + timedelta(seconds=1)).isoformat()
    return (start, end) if start < end else None


def withdraw_unlisted(db: Any, first: date, last: date, *, span: tuple[str, str] | None, listed_since: str,
                      stored_upto: int, stamp: str) -> list[str]:
    """After a read of every page of [first, last] begun at `listed_since`: take the stored transactions
    it certainly covered and did not list out of the ledger, into the quarantine; return their ids.

    "The provider's API is the truth": an entry the provider stopped listing must leave the day's
    figures and matching (a drift that stood only on it is no longer detected, and resolves itself),
    and stays as evidence: held as `transaction:<id>` with the record and the reason, in the day's
    report, released (and stored again) when a later read lists it. `stored_upto`: the highest rowid
    when the read began (`ledger_store.transaction_rowid_mark`). Only the withdrawn rows cost Python;
    the check itself is one query (`unlisted_transactions`). Call it only for a read that reached
    the end of its list: a read the budget or the provider stopped has not seen what it did not list.

    Which entries the read covered: the provider's document does not say in which time zone it reads
    `from_date`/`to_date`, so a read of day D may list [D-1 18:30Z, D 18:30Z) (IST). What a complete read
    lists is every entry of one stretch of time, whatever the zone, so an entry between the earliest and
    the latest created_at it listed (`span`, see `read_span`; whole seconds, inclusive) that it did not list
    is gone, and one outside them may simply lie beyond the provider's day. Only the span is checked, on
    either side of the read's UTC days too (a day at most: no zone is further from UTC); an empty read
    (span None) withdraws nothing. A read that would withdraw more than WITHDRAW_ALWAYS, and more than
    half of the span's stored transactions, withdraws none and logs an ERROR (see WITHDRAW_ALWAYS).
    """
    if span is None:
        _listed_nothing(db, first, last)
        return []
    window = _window(first, last, span)
    if window is None:
        return []
    start, end = window

    def unlisted(limit: int) -> list:
        return ledger_store.unlisted_transactions(db, start, end, listed_since=listed_since, stored_upto=stored_upto,
                                                  limit=limit)
    rows = unlisted(WITHDRAW_ALWAYS + 1)
    if not rows:
        return []
    if len(rows) > WITHDRAW_ALWAYS:
        stored = ledger_store.count_transactions(db, start, end)
        rows = unlisted(stored // 2 + 1)
        if len(rows) > stored // 2:
            log.error(_LOST_MOST, first.isoformat(), last.isoformat(), stored)
            return []
    items = [(row[0], withdrawn_reason(row), record_json(row, shape, raw), row[7][:10]) for row, shape, raw in rows]
    taken = ledger_store.withdraw_transactions(db, items, listed_since=listed_since, seen_at=stamp)
    for ident, reason in taken:
        log.warning("transaction %s %s", ident, reason)
    return [ident for ident, _ in taken]


def _listed_nothing(db: Any, first: date, last: date) -> None:
    """An empty complete read withdraws nothing (it covered no stretch of time it can vouch for). Over
    WITHDRAW_ALWAYS stored transactions of its days it is the list the guard takes for the provider's fault,
    and says so, as it did when the check was by the read's days; one index count, for an empty read only."""
    stored = ledger_store.count_transactions(db, first.isoformat(), (last + timedelta(days=1)).isoformat())
    if stored > WITHDRAW_ALWAYS:
        log.error(_LOST_MOST, first.isoformat(), last.isoformat(), stored)
    elif stored:
        log.info("the provider's transaction list of %s..%s listed nothing: its %d stored transaction(s) are not"
                 " withdrawn (an empty list does not show which stretch of time it covered)", first.isoformat(),
                 last.isoformat(), stored)


def withdrawn_reason(row: tuple) -> str:
    """The quarantine reason of a withdrawn transaction (row: partnerkit.store.ledger.ROW_COLUMNS values).

    `withdrawn: no longer listed by the provider on a full read of 2026-11-22 (was: RECHARGE_REFUND CREDIT
    50.00 INR, reference RCH1, recharge 100001)`. Names and amounts only: a transaction carries no secret.
    """
    _, kind, paise, order_id, reference, recharge_id, currency, created_at, _ = row
    direction = "CREDIT" if paise > 0 else "DEBIT" if paise < 0 else None
    entry = " ".join(p for p in (kind, direction, fmt(from_cents(abs(paise))), currency) if p)
    links = [f"{name} {value}" for name, value in (("reference", reference), ("order", order_id),
                                                  ("recharge", recharge_id)) if value is not None]
    return (f"{quarantine.WITHDRAWN}no longer listed by the provider on a full read of {created_at[:10]}"
            f" (was: {', '.join([entry] + links)})")


def _day_of(raw: Any) -> str | None:
    """The day a quarantined record claims, when it has a readable date at all."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            if str(key).lower() in ("created_at", "timestamp") and isinstance(value, str) and len(value) >= 10:
                return value[:10]
    return None
