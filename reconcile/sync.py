"""Syncs: the provider's recharges, orders, transactions and wallet balances into SQLite.

"The provider's API is the truth": each sync reads every page of a date range and upserts
idempotently, so running it twice changes nothing. After the first run a sync is incremental:
it starts from its watermark (the last day it completed) less LOOKBACK, so a recharge created
just before midnight and settled after it is read again. Only a sync that read every page marks
its days as covered; the matcher trusts absence ("unknown_to_provider") only for covered days, and
only such a sync withdraws the stored transactions of its days the provider no longer lists.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from itertools import islice
from time import monotonic
from typing import Any, Callable, Iterable, Iterator

from partnerkit.account import wallet_id, wallet_list
from partnerkit.money import MoneyError, cents, to_decimal
from partnerkit.store import ledger as ledger_store
from partnerkit.store import quarantine
from partnerkit.store.budget import walk_reserve
from partnerkit.client._records import Recharge
from partnerkit.store.recharges import (
    FINAL, LEGACY_SUCCESS, known_recharge_states, mark_recharges_seen, release_quarantined, upsert_from_provider,
)
from partnerkit.timeutil import iso, parse_ts, utcnow
from partnerkit.walks import READ_ALREADY, RESUME_WITHIN, KeptWalk
from reconcile.ledger import canonical_json
from reconcile.ledger_writer import TransactionPages, read_span, withdraw_unlisted

log = logging.getLogger(__name__)

BATCH = 1000
LOOKBACK = timedelta(days=1)
SETTLED_AFTER = timedelta(hours=1)  # see transactions_from
# Every page is a request of the hourly budget (docs/reconcile.md, "Budget"): 5000 takes a fifth of
# the requests 1000-record pages took. The list allows 10000 (Limits); half of that keeps a page's
# answer near 3 MB and its parsed records near 7 MB, from a provider whose speed with its largest
# pages nobody has measured (a read timeout costs the page again).
RECHARGE_PAGE = 5000
TRANSACTION_PAGE = 500
UPSERT_GROUP = 1000  # records waiting for the worker's upsert (see RechargePages)
SEEN_GROUP = 50_000  # provider ids noted as seen per transaction (see RechargePages)

# Called after each batch a sync stores, with the entity ("recharges", "orders", "transactions") and how many of its
# records were read so far: `partnerkit reconcile` prints it now and then, since a busy day is minutes of pages.
Progress = Callable[[str, int], None]


@dataclass
class SyncSummary:
    """What one sync run read and stored."""

    from_day: str
    to_day: str
    recharges: int = 0
    recharges_new: int = 0
    transactions: int = 0
    quarantined: int = 0
    orders: Any = None
    wallets: int = 0
    wallets_at: str | None = None  # when the wallet balances were read (see sync_range)
    read_already: list[str] = field(default_factory=list)  # entities not read again (`fresh_since`: see sync_range)
    errors: list[str] = field(default_factory=list)


def days_between(first: date, last: date) -> list[str]:
    """Every day from first to last inclusive, as YYYY-MM-DD."""
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def _batches(items: Iterable[Any], size: int | None = None) -> Iterator[list[Any]]:
    """Lists of `size` items (BATCH, read when called, as the page sizes are)."""
    size = size or BATCH
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def _complete_through(to_day: date, now: datetime) -> str:
    """The watermark a sync may claim: never a day that has not ended yet."""
    return min(to_day, now.date() - timedelta(days=1)).isoformat()


_STAMPS: dict[datetime, str] = {}  # updated_at -> stored text; a day's recharges share their seconds


def _stored_time(moment: Any) -> str | None:
    """A recharge's updated_at or created_at as the worker's upsert stores it (None when the record has none)."""
    if type(moment) is not datetime:
        return None
    text = _STAMPS.get(moment)
    if text is None:
        if len(_STAMPS) >= 4096:  # a day's pages move forward in time: recent seconds are the ones that repeat
            _STAMPS.clear()
        text = _STAMPS[moment] = iso(moment)  # type: ignore[assignment]
    return text


# Stored status of a provider status for the unchanged-record test; None: let the worker's upsert judge it.
_STORED_STATUS = {**{s: s for s in FINAL}, "PROCESSING": "PROCESSING", **{s: "SUCCESS" for s in LEGACY_SUCCESS}}


def _partition(db: Any, batch: list[Any]) -> tuple[list[int], list[Any]]:
    """(ids of the client records already stored unchanged, the records the worker's upsert must see).

    Only the client's `Recharge` records (validated by `Recharge.from_payload` at the boundary) linked
    to a stored row can be unchanged: the same status and updated_at, or a stale PROCESSING read of a
    final row (the worker's upsert skips both), and in either case the row's creation time (a record of
    another recharge under the row's id, which the upsert quarantines, is not a read of the row's own:
    a recharge settled at once has no updated_at, so status and updated_at alone took it for the row's).
    The stored states come with one query per page.
    """
    typed = [r.id for r in batch if type(r) is Recharge]
    known = known_recharge_states(db, typed) if typed else {}
    seen: list[int] = []
    rest = []
    for record in batch:
        state = known.get(record.id) if type(record) is Recharge else None
        if state is not None and (state[2] is None or state[2] == record.raw.get("created_at")
                                  or state[2] == _stored_time(record.created_at)):
            status = _STORED_STATUS.get(record.status)
            if status is not None:
                stored, updated_at, _ = state
                if stored in FINAL and status == "PROCESSING":
                    seen.append(record.id)
                    continue
                # The provider's own text first (the usual case, a string compare), else the parsed time
                # as the worker stores it (a time written another way, "+00:00" for "Z").
                if stored == status and (updated_at == record.raw.get("updated_at")
                                         or updated_at == _stored_time(record.updated_at)):
                    seen.append(record.id)
                    continue
        rest.append(record)
    return seen, rest


def store_recharge_page(db: Any, batch: list[Any], now: datetime) -> tuple[set[int], int]:
    """Store one page of the provider's recharge list; return (provider ids seen, rows inserted).

    The page goes through the worker's `upsert_from_provider`, except the client records already
    stored unchanged, which that upsert would skip anyway: they are found with one query per page
    (`known_recharge_states`) instead of being mapped one by one. On a day partnerkit submitted
    itself, that is nearly every record, so a large sync costs a read per page, not a write per row.
    """
    seen, rest = _partition(db, batch)
    if not rest:
        return set(seen), 0
    result = upsert_from_provider(db, rest, now)
    _log_rejected(result.rejected)
    return set(seen) | result.seen_provider_ids, result.inserted


def _log_rejected(rejected: list[tuple[int | None, str]]) -> None:
    """One WARNING for the records the worker's upsert quarantined instead of storing (unreadable, or another
    recharge under a stored id), with the first reasons: names, ids and times, no secret."""
    if rejected:
        log.warning("quarantined %d recharge record(s), not stored: %s", len(rejected),
                    "; ".join(reason for _, reason in rejected[:3]))


class RechargePages:
    """A sync's recharge pages into the store: `store_recharge_page`, with the upserts grouped.

    Each `upsert_from_provider` call is a transaction that rewrites every recharge index page its
    records touch; a day's ~2% changed records spread one call over 20 records of every page, so
    the same pages were committed a thousand times. Here the records that need the upsert wait
    until UPSERT_GROUP are pending. A page that names a pending record (same id or reference), or
    carries anything but client `Recharge` records, flushes first: every record is still judged
    against the state the records before it left, as page by page. `close()` flushes the rest.

    The ids the provider listed are noted as seen (`recharge_seen`) SEEN_GROUP at a time, not per
    page: a commit per page of a million-record day was a thousand commits. Nothing is lost by
    waiting: a sync that stops half-way claims no coverage (`record_sync` runs after `close()`),
    and the next run notes every id again.
    """

    def __init__(self, db: Any, now: datetime, *, held: set[int] | None = None) -> None:
        self.db, self.now, self.stamp = db, now, iso(now)
        self.held = held or set()  # quarantined recharge ids, released when read unchanged
        self.pending: list[Any] = []
        self.keys: set[Any] = set()
        self.seen: list[int] = []  # provider ids listed, not yet noted in recharge_seen
        self.records = self.inserted = 0

    def add(self, batch: list[Any]) -> None:
        """Store one page (its unchanged records at once, the others with the next group)."""
        self.records += len(batch)
        typed = all(type(r) is Recharge for r in batch)
        if not typed or (self.keys and not (self.keys.isdisjoint([r.id for r in batch])
                                            and self.keys.isdisjoint([r.reference_number for r in batch]))):
            self.flush()
            if not typed:
                ids, inserted = store_recharge_page(self.db, batch, self.now)
                self._note_seen(ids)
                self.inserted += inserted
                return
        seen, rest = _partition(self.db, batch)
        self._note_seen(seen)
        if self.held and not self.held.isdisjoint(seen):
            back = self.held.intersection(seen)
            release_quarantined(self.db, sorted(back))  # and the reasons noted on their rows
            self.held -= back
        self.pending += rest
        self.keys.update(k for r in rest for k in (r.id, r.reference_number))
        if len(self.pending) >= UPSERT_GROUP:
            self.flush()

    def flush(self) -> None:
        """Hand the pending records to the worker's upsert and note them seen."""
        if self.pending:
            result = upsert_from_provider(self.db, self.pending, self.now)
            _log_rejected(result.rejected)
            self._note_seen(result.seen_provider_ids)
            self.inserted += result.inserted
            self.pending, self.keys = [], set()

    def _note_seen(self, ids: Iterable[int], *, now: bool = False) -> None:
        self.seen.extend(ids)
        if self.seen and (now or len(self.seen) >= SEEN_GROUP):
            mark_recharges_seen(self.db, sorted(self.seen), self.stamp)
            self.seen = []

    def close(self) -> tuple[int, int]:
        """Flush; return (records read, rows inserted)."""
        self.flush()
        self._note_seen((), now=True)
        return self.records, self.inserted

    def settle(self, page: int | None) -> int | None:
        """Given a page (`KeptWalk.between_batches`: its place is due), write everything added so far (the pending
        upserts and seen marks) and return it: the walk reads it now and may note it as its place. None: None."""
        if page is None:
            return None
        self.flush()
        self._note_seen((), now=True)
        return page


def sync_recharges(db: Any, client: Any, first: date, last: date, *, now: datetime,
                   progress: Progress | None = None, claim_through: date | None = None,
                   fresh_since: datetime | None = None) -> tuple[int, int]:
    """Read every recharge created in [first, last] through the worker's upsert; return (seen, new).
    A complete read marks [first, claim_through] covered (default: through `last`; see `sync_range`, also for
    `fresh_since`).

    A record the client cannot read (MalformedResponse: a field missing or malformed) is quarantined
    with the reason (partnerkit.store.quarantine) and the rest of its page is stored as usual; one
    bad record never stops the sync (nor, through it, the nightly report). A quarantined record
    read correctly again is released: by the worker's upsert, or here when it is stored unchanged.
    """
    pages = RechargePages(db, now, held=_held_recharges(db))

    def hold(bad: Any) -> None:
        log.warning("quarantined an unreadable recharge record: %s", bad)
        quarantine.hold(db, "recharge", [(f"recharge record unreadable: {bad}", bad.body)], now=now)

    walk = KeptWalk(db, "recharges", first.isoformat(), last.isoformat(), now, fresh_since=fresh_since)
    records = client.iter_recharges(from_date=first, to_date=last, limit=RECHARGE_PAGE, on_malformed=hold,
                                    **walk.options())
    for batch in _batches(walk.records(records)):
        pages.add(batch)  # records partnerkit never submitted are inserted by the worker's upsert, origin 'provider'
        if progress is not None:
            progress("recharges", pages.records)
        if not walk.between_batches(pages.settle):
            break
    seen, new = pages.close()
    began = walk.finish()
    ledger_store.record_sync(db, "recharges", from_day=first.isoformat(), to_day=last.isoformat(), started_at=began,
                             count=seen, days=days_between(first, min(last, claim_through or last)),
                             advance_to=_complete_through(last, now))
    return seen, new


def _held_recharges(db: Any) -> set[int]:
    """Provider ids of the recharge records quarantined now (usually none)."""
    ids = set()
    for entry in quarantine.held(db, "recharge"):
        ident = entry["key"].partition(":")[2]
        if ident.isdigit():
            ids.add(int(ident))
    return ids


def sync_transactions(db: Any, client: Any, first: date, last: date, *, now: datetime,
                      progress: Progress | None = None, claim_through: date | None = None,
                      fresh_since: datetime | None = None) -> tuple[int, int]:
    """Read every wallet transaction of [first, last] through the alias mapping; return (stored, quarantined).
    A complete read marks [first, claim_through] covered (default: through `last`; see `sync_range`, also for
    `fresh_since`).

    A record that fits no alias is quarantined (`transaction:<id>` when it shows an integer id) and the
    rest of its page stored; a quarantined id this sync stores correctly is released (TransactionPages).
    A read that reaches the end of the list (in one run or, read on from where one stopped, in several)
    then withdraws the stored transactions it did not list between the earliest and the latest it listed
    (`withdraw_unlisted`, `read_span`: the provider's days may not be UTC days): they leave the figures, and
    stay in the quarantine until a read lists them again.
    """
    stamp = iso(now)
    held = _held_transactions(db)
    stored_upto = ledger_store.transaction_rowid_mark(db)
    walk = KeptWalk(db, "transactions", first.isoformat(), last.isoformat(), now, fresh_since=fresh_since)
    records = client.iter_transactions(from_date=first, to_date=last, limit=TRANSACTION_PAGE, **walk.options())
    with TransactionPages(db, stamp, held=held) as pages:
        read = 0
        for batch in _batches(walk.records(records)):
            pages.add(batch)
            read += len(batch)
            if progress is not None:
                progress("transactions", read)
            if not walk.between_batches(pages.settle):
                break
        stored, bad_count = pages.close()
    for ident in sorted(i for i in pages.released if held.get(i)):
        log.warning("transaction %s is listed by the provider again: restored", ident)
    began = walk.finish()  # raises for a read stopped part-way: nothing is withdrawn
    span = read_span(db, first, last, pages.span, began=began, stamp=stamp)  # what every part of the read listed
    withdraw_unlisted(db, first, last, span=span, listed_since=began, stored_upto=stored_upto, stamp=stamp)
    ledger_store.record_sync(db, "transactions", from_day=first.isoformat(), to_day=last.isoformat(),
                             started_at=began, count=stored, days=days_between(first, min(last, claim_through or last)),
                             advance_to=_complete_through(last, now))
    return stored, bad_count


def _held_transactions(db: Any) -> dict[str, bool]:
    """Ids (as stored) of the transactions quarantined now (usually none), read once per sync, each with
    whether it was withdrawn (see `withdraw_unlisted`)."""
    quarantine.rekey_transactions(db)  # entries held before ids were keyed (see there)
    return quarantine.held_transaction_ids(db)


def sync_orders(config: Any, db: Any, client: Any, first: date, *, now: datetime,
                progress: Progress | None = None, fresh_since: datetime | None = None) -> Any:
    """Orders through the receiver's one order sync (partnerkit.vouchers.catch_up_orders)."""
    from partnerkit.vouchers import catch_up_orders  # the receiver owns the order sync

    return catch_up_orders(config, db, client, since=_midnight(first), now=now, progress=progress,
                           fresh_since=fresh_since)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=timezone.utc)


def _read_since(db: Any, entity: str, first: date, last: date, fresh_since: datetime) -> str | None:
    """When the oldest of the complete reads that cover every day of [first, last] of `entity` began, if each
    began at or after `fresh_since`; else None."""
    oldest = None
    for day in days_between(first, last):
        synced = ledger_store.coverage(db, entity, day)
        if synced is None or parse_ts(synced, field="synced_at") < fresh_since:
            return None
        oldest = min(oldest or synced, synced)
    return oldest


def _read_already(db: Any, summary: SyncSummary, entity: str, first: date, last: date,
                  fresh_since: datetime | None) -> bool:
    """Whether the walk of `entity` over [first, last] would be pure waste (see `sync_range`): noted in `summary`."""
    if fresh_since is None:
        return False
    since = _read_since(db, entity, first, last, fresh_since)
    if since is None:
        return False
    log.info("%s of %s..%s not read again: read in full by a sync that began at %s, after %s", entity, first, last,
             since, iso(fresh_since))
    # A place kept by a walk of this range that never read on (another range's read covered the days) goes:
    # `syncs_reading_on` would name it for hours, and a later walk has nothing to read on for.
    ledger_store.forget_walk(db, entity, first.isoformat(), last.isoformat(),
                             older_than=iso(fresh_since - RESUME_WITHIN))
    summary.read_already.append(entity)
    return True


def wallet_rows(body: Any, taken_at: str) -> tuple[list[tuple[str, str, str, int, str]], list[tuple[str, Any]]]:
    """Snapshot tuples from GET /wallets, and the (reason, record) pairs that could not be read.

    The shape is not shown in the document: the list and a wallet's id are read as partnerkit.account reads
    them (`wallet_list`, `wallet_id`: the account a database serves is known by its wallets), the balance
    from `balance`, `available_balance` or `amount`, keys in any case."""
    items = wallet_list(body)
    if items is None:
        return [], [("wallet list unreadable: not a list of wallets", body)]
    rows, bad = [], []
    for item in items:
        if not isinstance(item, dict):
            bad.append(("wallet record unreadable: not an object", item))
            continue
        record = {str(k).lower(): v for k, v in item.items()}
        balance = next((record[k] for k in ("balance", "available_balance", "amount") if k in record), None)
        currency = record.get("currency")
        try:
            amount = to_decimal(balance, field="balance", strict=True)
        except MoneyError as exc:
            bad.append((f"wallet record unreadable: {exc}", item))
            continue
        if not isinstance(currency, str) or not currency.strip():
            bad.append(("wallet record unreadable: no currency", item))
            continue
        rows.append((taken_at, wallet_id(item), currency.strip().upper(), cents(amount), canonical_json(item)))
    return rows, bad


def snapshot_wallets(db: Any, client: Any, *, now: datetime) -> int:
    """Store the current wallet balances; return how many wallets.

    A wallet record without a readable balance or currency is quarantined (`wallet:<id>`, reported
    with the day's report) instead of skipped; a later snapshot that reads that wallet releases it."""
    rows, bad = wallet_rows(client.list_wallets(), iso(now))
    stored = ledger_store.record_wallet_snapshots(db, rows)
    if bad:
        log.warning("quarantined %d unreadable wallet record(s): %s", len(bad), "; ".join(r for r, _ in bad[:5]))
        quarantine.hold(db, "wallet", bad, now=now, day=now.date().isoformat())
    readable = [int(row[1]) for row in rows if row[1].isdecimal()]
    if readable:
        quarantine.release(db, "wallet", readable)
    return stored


def sync_range(config: Any, db: Any, client: Any, first: date, last: date, *, now: datetime | None = None,
               orders: bool = True, progress: Progress | None = None,
               transactions_first: date | None = None, claim_through: date | None = None,
               fresh_since: datetime | None = None) -> SyncSummary:
    """Sync recharges, orders, transactions and wallet balances for [first, last], every page
    (transactions from `transactions_first` when given: see `transactions_from`).

    `claim_through`: the last day whose coverage (`sync_coverage`) the read claims, when not `last`: a
    night's sync also reads the day after it, which may not be over (reconcile.jobs.sync_window); read
    while it lasts, that day is not one the store can vouch for, and the day's own full read claims it.

    `fresh_since` (the nightly run: when its nights became due, reconcile.jobs.nightly) asks for records as they
    stood at that moment or later, and no fresher: an entity whose every day of the range a complete read that
    began then or later has covered already (`sync_coverage`; for orders, the last order walk down to `first`)
    is not read again (`summary.read_already`). Such a read is what the nightly run's own would have been: the
    15-minute sync's read of the same days a moment before (every night, the two are due together), or one that
    read on from where the nightly run's walk was stopped or killed (a restarted worker runs sync-recent first).
    Its walks read on only from a place kept by a walk begun then or later, and from page 1 otherwise
    (partnerkit.walks.KeptWalk). The day after the nights counts only once a read has claimed it: the nightly
    run's own read of it while it lasts claims nothing (`claim_through`), the 15-minute sync's does.

    The walks leave the voucher fetches and the recharge poller their reserve of the hour
    (`walk_reserve`): a busy day's pages outnumber the hour's budget, and a sync stopped by it
    (BudgetExhausted) reads on from its page next time (partnerkit.walks.KeptWalk), while a customer waiting for
    vouchers, or a PROCESSING recharge due for its read, would not wait well.

    The wallet balances are read last and stamped with the moment they were read: `now` plus the time
    the walks took (on a busy day, minutes). Stamped with `now`, entries the provider made during the
    walks were in its balance but not in the ledger up to the stamp, and the day's report showed them
    as a `provider_difference` the ledger does not explain (`summary.wallets_at` gives the stamp)."""
    now = (now or utcnow()).replace(microsecond=0)
    began = monotonic()
    client = client.leaving(walk_reserve(config.hourly_budget, config.poller_budget_share))
    summary = SyncSummary(first.isoformat(), last.isoformat())
    if not _read_already(db, summary, "recharges", first, last, fresh_since):
        summary.recharges, summary.recharges_new = sync_recharges(db, client, first, last, now=now, progress=progress,
                                                                  claim_through=claim_through, fresh_since=fresh_since)
    if orders:
        try:
            summary.orders = sync_orders(config, db, client, first, now=now, progress=progress,
                                         fresh_since=fresh_since)
            if summary.orders.stopped == READ_ALREADY:  # the order sync's own call (partnerkit.vouchers)
                summary.read_already.append("orders")
        except ImportError as exc:  # the receiver's order sync is not installed in this build
            summary.errors.append(f"order sync unavailable: {exc}")
            log.warning("order sync unavailable: %s", exc)
    if not _read_already(db, summary, "transactions", transactions_first or first, last, fresh_since):
        summary.transactions, summary.quarantined = sync_transactions(db, client, transactions_first or first, last,
                                                                      now=now, progress=progress,
                                                                      claim_through=claim_through,
                                                                      fresh_since=fresh_since)
    read_at = (now + timedelta(seconds=monotonic() - began)).replace(microsecond=0)
    summary.wallets, summary.wallets_at = snapshot_wallets(db, client, now=read_at), iso(read_at)
    return summary


def transactions_from(db: Any, first: date, now: datetime) -> date:
    """The first day from `first` on whose transactions an incremental sync must still read.

    A wallet transaction is a ledger entry: once written it is not rewritten, and what happens later
    (a refund, a reversal) is a new entry on the day it happens. So a past day that a complete sync
    read after it had ended (SETTLED_AFTER later: the nightly run does) holds nothing new, and the
    15-minute sync skips it, while it still re-reads that day's recharges (a status can change late).
    On a busy day that was most of the sync's requests: transactions come 500 to a page.
    `partnerkit reconcile --date` and the nightly run read their days in full, whatever this says.
    """
    day = first
    while day < now.date():
        synced = ledger_store.coverage(db, "transactions", day.isoformat())
        ended = datetime.combine(day + timedelta(days=1), time(0), tzinfo=timezone.utc)
        if synced is None or parse_ts(synced, field="synced_at") < ended + SETTLED_AFTER:
            break
        day += timedelta(days=1)
    return day


def incremental_start(db: Any, today: date) -> date:
    """Where an incremental sync starts: the older watermark less LOOKBACK, or today on the first run."""
    marks = [ledger_store.get_watermark(db, e) for e in ("recharges", "transactions")]
    if any(m is None for m in marks):
        return today
    return min(date.fromisoformat(m) for m in marks if m) - LOOKBACK + timedelta(days=1)  # type: ignore[arg-type]
