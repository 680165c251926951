"""Match one UTC day: recharges and orders against the wallet's transactions, drifts recorded.

The rules (DESIGN.md "Worker and reconciliation"; the document's sections in brackets):

- A recharge is matched against **payable**, never face ["Reconcile against payable, not face"].
  SUCCESS (legacy DELIVERED / RECHARGED) and PROCESSING are spend: exactly one debit of payable,
  in the recharge's currency, no credit. FAILED and REVERSED show the debit and its credit back,
  net zero ["FAILED and REVERSED recharges are credited back and are not spend"]. A second debit
  is judged on the net: credited back, it is no longer a duplicate.
- An order matches the ORDER transaction named by its transaction_id, for its amount; FAILED and
  CANCELLED must be refunded ["Order > States": Refunded]. A wallet in another currency than the
  order is a conversion ["wallet auto-selection ... applies forex conversion"]: matched by the
  link and listed as a conversion, never an amount_mismatch.
- Every transaction of the day is linked to a recharge or order, or is a wallet movement
  (top-up, conversion); anything else is an orphan. balance_after must chain by the amounts.

The SQL lives in partnerkit.store.matching; this module only wires a day to it.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from partnerkit.money import from_cents
from partnerkit.store import Database, ledger as ledger_store, matching, matching_ledger, quarantine, transaction
from partnerkit.store.db import connect, database_file
from partnerkit.store.drifts import drift_id, wallet_reference
from partnerkit.store.matching_ledger import LedgerFindings
from partnerkit.store.snapshots import end_read, pin_same_snapshot, pin_snapshot
from partnerkit.timeutil import iso, parse_ts, utcnow

# Transaction types that move the wallet without a recharge or order behind them; never orphans.
WALLET_TYPES = ("TOPUP", "TOP_UP", "DEPOSIT", "FUNDING", "CREDIT_TOPUP", "OPENING_BALANCE",
                *matching.CONVERSION_TYPES)
# Recommended polling: "Beyond 30 min: ... escalate to support with reference_number".
STUCK_AFTER = timedelta(minutes=30)
# From this many transactions in the day, the wallet's side of matching runs on a second connection
# in a thread while the recharges are matched (_LedgerSide); below it, thread and connection cost more
# than they save.
PARALLEL_FROM = 50_000


@dataclass(frozen=True)
class MatchResult:
    """What matching one day found: totals for the report and the drift ids detected."""

    day: date
    matched_at: datetime
    recharges_total: int
    orders_total: int
    transactions_total: int
    drifted: int
    unmatched: int
    recharge_status: dict[str, int]
    order_status: dict[str, int]
    spend: dict[str, Decimal]
    refunds: dict[str, Decimal]
    spend_by_hour: dict[str, list[Decimal]]
    conversions: list[dict[str, Any]]
    detected_ids: list[str]
    changes: dict[str, int] = field(default_factory=dict)
    spend_as_documented: dict[str, Decimal] = field(default_factory=dict)
    wallets: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def matched(self) -> int:
        """Recharges and orders of the day with no drift."""
        return self.recharges_total + self.orders_total - self.drifted


def day_bounds(day: date) -> tuple[str, str]:
    """The day as a half-open ISO range [start, end) comparable with stored UTC timestamps."""
    return f"{day.isoformat()}T00:00:00", f"{(day + timedelta(days=1)).isoformat()}T00:00:00"


_WALLET_MONEY = ("debits", "credits", "opening", "closing", "provider", "ledger_then")
# How the provider's balance compares with the ledger's at the moment it was read (the report's
# `provider_difference_status`): the same; different, but entries dated across the read explain it (TIMING);
# different, and the store holds every entry the provider lists up to the read, so nothing explains it
# (UNEXPLAINED: a `balance_discontinuity` drift, subject `wallet`); different, and a read of the wallet's entries
# begun since is still to come (UNCONFIRMED: entries made while partnerkit read the wallets may explain it).
AGREES, TIMING, UNEXPLAINED, UNCONFIRMED = "agrees", "timing", "unexplained", "unconfirmed"
# The timing check looks at this many index entries on each side of the read's time, and back this far: a
# provider's clock ahead of ours stamps entries it made before the read after it (the demo's sandbox runs 40
# times faster: by count, not time), one behind stamps entries made after the read before it (NTP keeps a real
# one within a second).
TIMING_ENTRIES = 200
CLOCK_BEHIND = timedelta(minutes=1)


def _hour(day: date, hour: int) -> str:
    return f"{day.isoformat()}T{hour:02d}:00:00" if hour < 24 else day_bounds(day)[1]


def wallet_balances(conn: Any, day: date, now: datetime, totals: list[dict[str, Any]], *,
                    snapshots_through: datetime | None = None) -> dict[str, dict[str, Any]]:
    """Per currency, the day's roll-forward in paise (opening and closing balance from the entries'
    balance_after, None where the provider gives none; every entry's debits and credits) and the provider's
    wallet balance from a snapshot, with the ledger's balance at the snapshot's time and how the two compare
    (`compare_wallet`).

    Snapshots up to `now` count, and up to `snapshots_through` when later: the one the report's own sync
    took, stamped when it read the wallets, after the `now` its report carries (reconcile.sync.sync_range).
    A handful of index lookups per currency: each edge entry is looked for within the hour `totals` says
    holds it, the snapshot's time within the day or just after it, and the ledger's balance then from the last
    entry up to it on any day (partnerkit.store.ledger.entry_at): a wallet no entry of the day moved is compared
    too, where an unexplained movement matters most.
    """
    start, end = day_bounds(day)
    hours: dict[str, list[int]] = {}
    wallets: dict[str, dict[str, Any]] = {}
    for t in totals:  # one row per (currency, hour)
        w = wallets.setdefault(t["currency"], {"debits": 0, "credits": 0})
        w["debits"] -= t["all_debit_cents"]
        w["credits"] += t["all_credit_cents"]
        hours.setdefault(t["currency"], []).append(t["hour"])
    for currency, w in wallets.items():
        first = ledger_store.edge_entry(conn, currency, _hour(day, min(hours[currency])), end, last=False)
        last = ledger_store.edge_entry(conn, currency, start, _hour(day, max(hours[currency]) + 1), last=True)
        w["opening"] = None if first is None or first[0] is None else first[0] - first[1]
        w["closing"] = None if last is None else last[0]
    snapshot = ledger_store.snapshot_near(conn, start, end, iso(max(now, snapshots_through or now)))
    if snapshot is not None:
        taken_at, balances = snapshot
        # The report's own sync read these balances after its walks, which began at `now`: what they listed (stamped
        # `now`) was made before the balances were read (compare_wallet).
        listed_by = iso(now) if snapshots_through is not None and taken_at == iso(snapshots_through) else None
        for currency, balance in balances.items():
            w = wallets.setdefault(currency, {"debits": 0, "credits": 0, "opening": None, "closing": None})
            w.update(provider=balance, provider_at=taken_at,
                     **compare_wallet(conn, currency, taken_at, balance, since_day=start[:10], listed_by=listed_by))
    return dict(sorted(wallets.items()))


def compare_wallet(conn: Any, currency: str, taken_at: str, provider: int, *,
                   since_day: str | None = None, listed_by: str | None = None) -> dict[str, Any]:
    """The ledger's balance when the provider's `provider` (paise) was read at `taken_at`, and the verdict.

    `ledger_then`: the balance_after of the last entry up to the read, on any day (None: the store holds none,
    or it carries no balance_after); `ledger_entry`: that entry's id. `listed_by`: when the read's own sync began
    its walks, given when the balance is the one that sync read after them (wallet_balances): an entry those walks
    listed (`synced_at` is exactly `listed_by`) was made before the balance was read, whatever its date (an earlier
    stamp is not enough: another process's read begun earlier may have listed it after the balance was read), so the
    last such
    entry dated after the read (within TIMING_ENTRIES), when there is one, is the ledger's entry then. `verdict`
    (None when not compared):

    - AGREES: the same.
    - TIMING: the clocks, not money: the ledger's chain, unbroken from `ledger_then`, reaches the provider's
      balance through entries dated after the read (made before it on a clock ahead of ours) or, read back,
      through entries dated in the CLOCK_BEHIND before it (made after it on a clock behind ours);
      `explained_by` names them. A deleted movement breaks the chain at the next entry, so it is never timing.
      An entry the walks of `listed_by` listed was made before the read: the chain runs forward only from the
      last such entry, and none is read back (the demo's deleted refund of order 5007 netted with its debit,
      dated after the read, and read as timing). An entry dated out of order is timing too: the provider's
      balance is the balance_after of the entry it made last (by id) from `since_day` (the report's day) up to the
      read, though another is dated later (`explained_by` names the one made last).
    - UNEXPLAINED: not timing, and every day from the ledger entry's through the read's was read in full by a
      read that began after the day ended or after the read of the wallets (partnerkit.store.ledger.read_since):
      the store holds every entry the provider lists up to then, and the money moved without one.
    - UNCONFIRMED: not timing, and no such read yet: entries made while partnerkit read the wallets (after its
      walks: reconcile.sync.sync_range), or on days not read since, may explain it. So may an entry of those days
      held in quarantine as unreadable (listed by the provider, missing from the ledger: the report lists it);
      one withdrawn (no longer listed) is not held against the verdict. The next report of the day after a sync
      (the nightly re-match of a later night, `partnerkit reconcile --date`) judges it again.
    """
    dated = ledger_store.entry_at(conn, currency, taken_at)
    if dated is None or dated.balance_after_cents is None:
        return {"ledger_then": None, "ledger_entry": None, "verdict": None, "explained_by": []}
    since = iso(parse_ts(taken_at, field="taken_at") - CLOCK_BEHIND)  # type: ignore[operator]
    then, around = dated, None
    if listed_by is not None:  # the entries around the read first: one dated after it may have been made before it
        then, around = _made_before(dated, ledger_store.around(conn, currency, taken_at, since=since,
                                                               n=TIMING_ENTRIES), listed_by)
        if then.balance_after_cents is None:
            return {"ledger_then": None, "ledger_entry": None, "verdict": None, "explained_by": []}
    found = {"ledger_then": then.balance_after_cents, "ledger_entry": then.id, "explained_by": []}
    if provider == then.balance_after_cents:
        return {**found, "verdict": AGREES}
    if around is None:
        around = ledger_store.around(conn, currency, taken_at, since=since, n=TIMING_ENTRIES)
    after, before = around
    explained = _timing(then, provider, after, before, listed_by)
    if not explained and since_day is not None and then is dated:
        # The chain's end by the provider's ids, when its dates disagree with them: the last entry it made up to
        # the read says the provider's balance, so the entries dated after it are dated out of order, not money.
        last_made = ledger_store.newest_by_id(conn, currency, min(since_day, dated.created_at[:10]), taken_at)
        if last_made is not None and last_made.id != then.id and last_made.balance_after_cents == provider:
            explained = [last_made.id]
    if explained:
        return {**found, "verdict": TIMING, "explained_by": explained}
    if (not ledger_store.read_since(conn, dated.created_at[:10], taken_at)
            or quarantine.unreadable_transactions(conn, dated.created_at[:10], taken_at[:10])):
        return {**found, "verdict": UNCONFIRMED}
    return {**found, "verdict": UNEXPLAINED,
            "drift": drift_id("balance_discontinuity", "wallet", wallet_reference(currency, then.id))}


_Around = tuple[list[ledger_store.Entry], list[ledger_store.Entry]]  # the entries after the read, and before it


def _made_before(dated: ledger_store.Entry, around: _Around, listed_by: str) -> tuple[ledger_store.Entry, _Around]:
    """The ledger's last entry at the read and the entries around it that may be timing (see compare_wallet):
    the last entry dated after the read that the walks begun at `listed_by` listed, with the entries after it and
    none before (it and every entry before it were made before the read), else `dated` and `around` as read."""
    after = around[0]
    listed = [i for i, entry in enumerate(after) if entry.synced_at == listed_by]
    if not listed:
        return dated, around
    return after[listed[-1]], (after[listed[-1] + 1:], [])


def _timing(then: ledger_store.Entry, provider: int, after: list[ledger_store.Entry],
            before: list[ledger_store.Entry], listed_by: str | None = None) -> list[str]:
    """The entries whose dating across the read explains the provider's balance (see compare_wallet), or []."""
    balance, ids = then.balance_after_cents, []
    for entry in after:  # forward from the ledger's balance then, while the chain holds
        if entry.balance_after_cents is None or balance + entry.amount_cents != entry.balance_after_cents:
            break
        balance = entry.balance_after_cents
        ids.append(entry.id)
        if balance == provider:
            return ids
    ids, balance = [], then.balance_after_cents
    for entry in before:  # backward: the balance before each entry, while the chain holds
        if entry.balance_after_cents is None or entry.balance_after_cents != balance:
            break
        if listed_by is not None and entry.synced_at == listed_by:
            break  # listed by the walks before the balance was read: made before it, not after on a clock behind ours
        balance = entry.balance_after_cents - entry.amount_cents
        ids.insert(0, entry.id)
        if balance == provider:
            return ids
    return []


def wallet_drifts(day: date, wallets: dict[str, dict[str, Any]]) -> list[tuple]:
    """The day's `balance_discontinuity` drifts of subject `wallet` (m_candidate rows): one per currency whose
    provider's balance differs from the ledger's, UNEXPLAINED (compare_wallet). Reference `wallet INR after
    700005` (partnerkit.store.drifts.wallet_reference: the ledger entry the money moved after, so that nights a
    difference stands on without a new entry, and nights a catch-up run holds against one snapshot, find one
    drift, not one each); expected the ledger's balance then, actual the provider's."""
    found = []
    for currency, w in wallets.items():
        if w.get("verdict") != UNEXPLAINED:
            continue
        provider, then = w["provider"], w["ledger_then"]
        gap = from_cents(abs(provider - then))
        way = ("below the ledger's: money left the wallet" if provider < then
               else "above the ledger's: money came into the wallet")
        found.append(("balance_discontinuity", "wallet", wallet_reference(currency, w["ledger_entry"]),
                      then, provider, currency,
                      f"the provider's {currency} balance read at {w['provider_at']} is {gap} {way} after transaction "
                      f"{w['ledger_entry']} without an entry it lists"))
    return found


def _result(day: date, now: datetime, raw: dict[str, Any], ledger: LedgerFindings,
            changes: dict[str, int], wallets: dict[str, dict[str, Any]]) -> MatchResult:
    spend: dict[str, Decimal] = {}
    refunds: dict[str, Decimal] = {}
    hours: dict[str, list[Decimal]] = {}
    cents: dict[str, list[int]] = {}
    for t in ledger.totals:  # one row per (currency, hour): at most 24 per currency
        if t["counted"]:
            totals = cents.setdefault(t["currency"], [0, 0])
            totals[0] -= t["debit_cents"]
            totals[1] += t["credit_cents"]
            hourly = hours.setdefault(t["currency"], [Decimal("0.00")] * 24)
            if t["debit_cents"]:
                hourly[t["hour"]] = from_cents(-t["debit_cents"])
    for currency, (debits, credits) in cents.items():
        spend[currency], refunds[currency] = from_cents(debits), from_cents(credits)
    conversions = [{"order_id": c["order_id"], "transaction_id": c["transaction_id"],
                    "order_currency": c["order_currency"], "order_amount": from_cents(c["order_amount_cents"]),
                    "wallet_currency": c["wallet_currency"], "debited": from_cents(c["debited_cents"]),
                    "charges": from_cents(c["charges_cents"])}
                   for c in raw["conversions"]]
    return MatchResult(
        day=day, matched_at=now, recharges_total=sum(raw["recharge_status"].values()),
        orders_total=raw["orders_total"], transactions_total=sum(t["n"] for t in ledger.totals),
        drifted=raw["drifted"], unmatched=raw["unmatched"], recharge_status=raw["recharge_status"],
        order_status=raw["order_status"],
        spend=spend, refunds=refunds, spend_by_hour=hours, conversions=conversions,
        detected_ids=raw["detected_ids"], changes=changes,
        spend_as_documented={c: from_cents(v) for c, v in raw["spend_cents"].items()},
        wallets={c: {k: from_cents(v) if k in _WALLET_MONEY else v for k, v in w.items()} for c, w in wallets.items()},
    )


class _LedgerSide:
    """The day's transaction findings (partnerkit.store.matching_ledger), computed beside the recharges.

    On a day of PARALLEL_FROM transactions or more (in a database file), they run in a thread on a
    connection of their own, whose read transaction starts on the matcher's snapshot: both begin while a
    third connection holds the write lock for those few milliseconds (partnerkit.store.snapshots), so no
    commit can land between them and both read the same data. sqlite3 releases the GIL while a statement runs, so
    the two sides use both cores. On a smaller day the matcher's connection runs them.
    """

    def __init__(self, conn: sqlite3.Connection, params: dict[str, Any], wallet_types: tuple[str, ...],
                 path: str) -> None:
        self.conn, self.params, self.wallet_types, self.path = conn, params, wallet_types, path
        self.pool: ThreadPoolExecutor | None = None
        self.future: Future | None = None

    def __enter__(self) -> "_LedgerSide":
        if not self.path:
            pin_snapshot(self.conn)
            return self
        side = connect(self.path).conn
        try:
            pin_same_snapshot(self.path, self.conn, side)
        except BaseException:
            side.close()
            raise
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="match-ledger")
        self.future = self.pool.submit(self._on_own_connection, side)
        return self

    def _on_own_connection(self, side: sqlite3.Connection) -> LedgerFindings:
        try:
            try:
                return matching_ledger.ledger_findings(side, self.params, self.wallet_types)
            finally:
                end_read(side)
        finally:
            side.close()

    def result(self) -> LedgerFindings:
        """The findings (computed now on the matcher's connection when no thread was started)."""
        if self.future is None:
            return matching_ledger.ledger_findings(self.conn, self.params, self.wallet_types)
        return self.future.result()

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def match_day(db: Database, day: date, *, now: datetime | None = None,
              wallet_types: tuple[str, ...] = WALLET_TYPES, snapshots_through: datetime | None = None) -> MatchResult:
    """Run every rule over one UTC day; record drifts; return the totals.

    Two transactions, so the write lock is held only for what writes the database (docs/reconcile.md, "How
    matching works"): every rule, the report's totals and the wallet balances are read on one snapshot in a
    deferred transaction (the temp tables they fill are not the main database: other connections commit
    meanwhile), which then ends; one short BEGIN IMMEDIATE merges the candidates into `drifts`, leaving a
    drift recorded or decided since the snapshot as it is (partnerkit.store.drifts.merge_found, `seen`).

    `snapshots_through`: the time the wallet balances of the sync just run were read (see wallet_balances)."""
    now = (now or utcnow()).replace(microsecond=0)
    start, end = day_bounds(day)
    params = {"start": start, "end": end, "day": day.isoformat(), "now": iso(now),
              "stuck_before": iso(now - STUCK_AFTER)}
    path = _parallel_path(db, params)
    with transaction(db, immediate=False) as conn:
        try:
            with _LedgerSide(conn, params, tuple(wallet_types), path) as ledger_side:
                matching.build(conn, params)
                # The totals need none of the wallet's side: here they run while it works, not after it.
                raw = matching.day_summary(conn, params)
                ledger = ledger_side.result()
            wallets = wallet_balances(conn, day, now, ledger.totals, snapshots_through=snapshots_through)
            matching.add_candidates(conn, ledger.candidates + wallet_drifts(day, wallets))
            matching.find(conn, day=day.isoformat())
            raw.update(matching.found_summary(conn))
        except BaseException:
            matching.drop(conn)
            raise
    try:
        with transaction(db) as conn:
            changes = matching.apply_candidates(conn, day=day.isoformat(), now=iso(now))
    finally:
        with transaction(db, immediate=False) as conn:
            matching.drop(conn)
    return _result(day, now, raw, ledger, changes, wallets)


def _parallel_path(db: Database, params: dict[str, Any]) -> str:
    """The database file when the day is big enough for the wallet's side in a thread (_LedgerSide), else ""."""
    with transaction(db, immediate=False) as conn:
        path = database_file(db)
        return path if path and matching.day_transactions(conn, params) >= PARALLEL_FROM else ""
