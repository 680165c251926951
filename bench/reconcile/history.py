"""`python -m bench.reconcile.history [--days N] [--size S] [--repeat R] [--plans]`: the nightly job and the
commands on a store with N days of history, against the same on a store with one day.

A store is built as partnerkit lives its days, the synthetic day of bench.reconcile.day once a day
(`index` k: its ids, references and wallet balance follow the k days before it):
- during day k: the rows the worker's submits left and the receiver's voucher orders (as bench.reconcile.run's
  setup), a webhook per order through the receiver's inbox (1 in 20 delivered twice), its voucher fetch
  job claimed and done, a wallet snapshot every 15 minutes, a refused delivery an hour;
- at 01:05 the next day, `reconcile.jobs.nightly` with a stand-in provider: the day's recharges and
  transactions through `reconcile.sync` (what bench.reconcile.run times as its load), orders, wallets,
  `match_day`, `report_day`, and the re-matches of earlier days with open drifts;
- the next morning: the worker's prune-events job, the poller's reads settling the day's PROCESSING
  recharges (SUCCESS), and finance resolving the day's pending drifts one by one (`set_resolution`),
  escalating 1 in 50; an escalation is resolved a week later.
So the drifts pending on any morning are the newest day's (same on both stores), and the nightly run
re-matches the 7 days before (escalations still open), as it does in production. No ANALYZE: the kit
never runs it, so the planner works without statistics, as on a partner's store.

Then each phase below runs on the store of 1 day and on the store of N days, in the same process,
alternated, R times each (phases that write run on a fresh copy of the store as it stood before the
newest night); the table gives CPU seconds (every thread; the machine is shared) and wall seconds,
median and spread, and the ratio N days / 1 day of the medians. --plans runs every phase once on each
store instead (partnerkit.store.plans) and lists each statement whose plan (EXPLAIN QUERY PLAN) reads
the whole of a table that grows with history, or whose work on the N-day store is more than twice its
work on the 1-day store.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from datetime import date, datetime, time as clock, timedelta, timezone
from functools import lru_cache
from io import StringIO
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.reconcile import day as synthetic
from bench.reconcile import run as single
from partnerkit.client._pagination import page_from_headers
from partnerkit.client._records import OrderSummary
from partnerkit.config import Config, load_config
from partnerkit.crypto import Cipher
from partnerkit.retention import prune_events
from partnerkit.status import collect, gauges
from partnerkit.store import drifts, inbox, jobs, ledger, matching, open_db, recharges, reports, transaction
from partnerkit.store import plans as plan_store
from partnerkit.store import webhook_refusals
from receiver.envelope import normalise
from receiver.metrics import DatabaseCollector
from reconcile import sync
from reconcile.jobs import RECHECK_DAYS, due_dates, nightly, report_day, sync_recent
from reconcile.matcher import match_day
from reconcile.poller import _items as poll_items
from reconcile.polling import plan as poll_plan

NIGHT = clock(1, 5)  # the nightly run's time, the next day (PARTNERKIT_DUE_HOUR_UTC 1)
ESCALATE_EVERY = 50  # finance escalates one drift in this many, and resolves the rest
ESCALATION_DAYS = 7  # an escalation is resolved this many days later
CIPHER = Cipher(b"bench-history-voucher-key-32byte")


def night_of(index: int) -> datetime:
    """When the nightly run reports the index-th day: NIGHT the day after."""
    return datetime.combine(synthetic.day_of(index + 1), NIGHT, tzinfo=timezone.utc)


class Provider(single.StandIn):
    """The provider's lists of the days built so far, as the client yields them (a stand-in client).

    Recharge and transaction pages are bench.reconcile.run's Provider's (the recharge generation counted
    apart in gen_s, the transaction pages read from the day's file); orders and wallets are what the
    order catch-up and the wallet snapshot read."""

    def __init__(self, n: int, pages: dict[int, Path]) -> None:
        self.n, self.pages = n, pages
        self.days: list[single.Provider] = []
        self.orders_s = self.orders_cpu_s = 0.0  # building the order list's records (generation, not timed)

    @property
    def gen_s(self) -> float:
        """Seconds spent making the provider's records (recharges and orders): subtracted from a phase."""
        return sum(d.gen_s for d in self.days) + self.orders_s

    @property
    def gen_cpu_s(self) -> float:
        return sum(d.gen_cpu_s for d in self.days) + self.orders_cpu_s

    def _of(self, from_date: Any, to_date: Any) -> Iterator[single.Provider]:
        first = (date.fromisoformat(str(from_date)) - synthetic.DAY).days
        last = (date.fromisoformat(str(to_date)) - synthetic.DAY).days
        for index in range(max(first, 0), last + 1):
            if index in self.pages:
                self.days.append(single.Provider(self.n, self.pages[index], index=index))
                yield self.days[-1]

    def iter_recharges(self, *, from_date, to_date, limit, on_malformed=None) -> Iterator:
        for day in self._of(from_date, to_date):
            yield from day.iter_recharges(from_date=from_date, to_date=to_date, limit=limit)

    def iter_transactions(self, *, from_date, to_date, limit) -> Iterator:
        for day in self._of(from_date, to_date):
            yield from day.iter_transactions(from_date=from_date, to_date=to_date, limit=limit)

    def list_orders(self, *, page: int = 1, limit: int = 100, **_: Any) -> Any:
        """The orders of the newest two days, newest first (the walk stops at the first one before `since`)."""
        started, cpu = time.perf_counter(), time.process_time()
        rows = _order_list(self.n, max(self.pages))
        items = [OrderSummary.from_payload({
            "id": oid, "reference_code": f"ORD{oid}", "transaction_id": tid, "product_id": 7, "denomination": "500.00",
            "quantity": quantity, "amount": f"{amount // 100}.{amount % 100:02d}", "status": status.lower(),
            "currency": currency, "placed_at": placed_at})
            for oid, status, currency, quantity, amount, tid, placed_at, _ in rows[(page - 1) * limit:page * limit]]
        answer = page_from_headers(items, {"X-Total-Count": str(len(rows))}, page=page, limit=limit)
        self.orders_s += time.perf_counter() - started
        self.orders_cpu_s += time.process_time() - cpu
        return answer

    def list_wallets(self) -> Any:
        return {"data": [{"id": 1, "currency": "INR", "balance": "1000.00"}]}


@lru_cache(maxsize=4)
def _order_list(n: int, newest: int) -> list[tuple]:
    """The provider's order list when `newest` is the newest day: its orders and the day before's, newest first."""
    return [row for index in (newest, newest - 1) if index >= 0 for row in reversed(synthetic.orders(n, index=index)[0])]


def _daytime(db: Any, n: int, index: int, pages: Path) -> None:
    """What the worker's submits and the receiver leave during the day (untimed)."""
    single.setup(db, n, pages, index=index, analyze=False)
    day = synthetic.day_of(index)
    for oid, _, _, quantity, amount, _, placed_at, _ in synthetic.orders(n, index=index)[0]:
        body = json.dumps({"event_id": f"evt-{oid}-delivered", "event_type": "order.delivered", "created_at": placed_at,
                           "data": {"id": oid, "reference_code": f"ORD{oid}", "status": "DELIVERED", "quantity": quantity,
                                    "amount": f"{amount // 100}.{amount % 100:02d}"}}).encode()
        at = datetime.fromisoformat(placed_at.replace("Z", "+00:00")) + timedelta(seconds=2)
        for delivery in range(1 + (oid % 20 == 0)):
            inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=at + timedelta(minutes=delivery))
    done_at = night_of(index) - timedelta(hours=1)
    claimed = jobs.claim(db, owner="bench", now=done_at, lease_until=done_at + timedelta(minutes=5), limit=10**9)
    with transaction(db) as conn:
        for job in claimed:
            jobs.finish(conn, job, now=done_at, state="done")
    snapshots = [(f"{day.isoformat()}T{m // 60:02d}:{m % 60:02d}:00Z", "1", "INR", 100000, None) for m in range(0, 1440, 15)]
    ledger.record_wallet_snapshots(db, snapshots)
    webhook_refusals.add(db, [webhook_refusals.Tally(f"{day.isoformat()}T{h:02d}:00Z", "missing_signature", 1,
                                                      f"{day.isoformat()}T{h:02d}:00:01.000000Z",
                                                      f"{day.isoformat()}T{h:02d}:00:01.000000Z") for h in range(24)])


def _morning(db: Any, config: Config, n: int, index: int) -> None:
    """The morning after the index-th night: the worker prunes, the poller settles the day's PROCESSING
    recharges, finance works through the day's drifts."""
    morning = night_of(index) + timedelta(hours=8)
    prune_events(config, db, now=morning)  # the worker's job, every 6 hours
    recharges.upsert_from_provider(db, synthetic.settled(n, index=index), morning, insert_unknown=False)
    pending = drifts.list_drifts(db, report_date=synthetic.day_of(index).isoformat(), resolution="pending")
    for number, drift in enumerate(pending):
        escalate = number % ESCALATE_EVERY == 0
        drifts.set_resolution(db, drift.id, "escalated" if escalate else "resolved", by="finance", at=morning,
                              note="sent to support" if escalate else "checked with the provider")
    if index >= ESCALATION_DAYS:
        week_ago = synthetic.day_of(index - ESCALATION_DAYS).isoformat()
        for drift in drifts.list_drifts(db, report_date=week_ago, resolution="escalated"):
            drifts.set_resolution(db, drift.id, "resolved", by="finance", at=morning, note="credited by support")


@dataclass(frozen=True)
class Generated:
    """Seconds a phase spent making the stand-in provider's records, to subtract from its time."""

    wall: float
    cpu: float


@dataclass
class Store:
    """A store whose newest day is `newest`: `path` after its nightly run, `before` just before it."""

    label: str
    path: Path
    before: Path
    newest: int


@dataclass
class History:
    """The stores of one run and what the phases need."""

    n: int
    workdir: Path
    pages: dict[int, Path] = field(default_factory=dict)
    stores: list[Store] = field(default_factory=list)

    def config(self, path: Path) -> Config:
        """The settings of the store at `path`, with a report directory of its own (`_reports`)."""
        return load_config(environ={"PARTNERKIT_DB": str(path), "PARTNERKIT_REPORT_DIR": str(_reports(path)),
                                    "PARTNERKIT_VOUCHER_KEY": "bench-history-voucher-key-32byte"})

    def provider(self, upto: int) -> Provider:
        return Provider(self.n, {i: p for i, p in self.pages.items() if i <= upto})


def _reports(path: Path) -> Path:
    """The report directory of the store at `path`: its own, so that a copy's files and its database agree."""
    return path.with_name(path.stem + "-reports")


def _copy(src: Path, dst: Path) -> Path:
    """A copy of a store (its WAL checkpointed into the file first), with an empty report directory: a phase runs
    on a fresh copy of the store as it stood before, which has no stored report of the night, and the files an
    earlier run left would be kept aside as written by another store ("replaced ... not in database"), a warning
    a run and a cost a partner's nightly run does not have."""
    with sqlite3.connect(src) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm"):
        Path(str(dst) + suffix).unlink(missing_ok=True)
    shutil.copyfile(src, dst)
    shutil.rmtree(_reports(dst), ignore_errors=True)
    return dst


def build(n: int, days: int, workdir: Path, log: Callable[[str], None]) -> History:
    """Live `days` days on one store; keep copies of it before and after the first and the last night."""
    history = History(n, workdir)
    path = workdir / "store.db"
    db = open_db(path)
    started = time.perf_counter()
    for index in range(days):
        history.pages[index] = workdir / f"pages-{index}.jsonl"
        _daytime(db, n, index, history.pages[index])
        keep = index in (0, days - 1)
        if keep:
            before = _copy(path, workdir / f"before-{index + 1}.db")
        config = history.config(path)
        nightly(config, db, history.provider(index), now=night_of(index))
        if keep:
            label = f"{index + 1} day{'s' if index else ''}"
            history.stores.append(Store(label, _copy(path, workdir / f"after-{index + 1}.db"), before, index))
        _morning(db, config, n, index)
        log(f"day {index + 1}/{days} built ({time.perf_counter() - started:.0f} s)")
    db.conn.close()
    return history


# ---- what is timed --------------------------------------------------------------------------------------

def _cli(history: History, store: Store, *args: str) -> None:
    from click.testing import CliRunner

    from partnerkit.cli import cli

    env = {"PARTNERKIT_DB": str(store.path), "PARTNERKIT_REPORT_DIR": str(history.workdir / "reports"),
           "PARTNERKIT_VOUCHER_KEY": "bench-history-voucher-key-32byte"}
    done = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    if done.exit_code != 0:
        raise RuntimeError(f"partnerkit {' '.join(args)}: exit {done.exit_code}: {done.output[-300:]}")


def _day(store: Store) -> str:
    return synthetic.day_of(store.newest).isoformat()


def _nightly_steps(history: History, store: Store, copy: Path) -> dict[str, tuple[float, float]]:
    """The newest night's sync, match and report, each timed, on `copy` (the store before that night). The report
    is given the match's result, as bench.reconcile.run's is: without it report_day matches the day again, and the
    phase timed a second match of the day with the report."""
    db, now, day = open_db(copy), night_of(store.newest), synthetic.day_of(store.newest)
    provider = history.provider(store.newest)
    out, matched = {}, {}
    for name, work in (("nightly: sync recharges", lambda: sync.sync_recharges(db, provider, day, day, now=now)),
                       ("nightly: sync transactions", lambda: sync.sync_transactions(db, provider, day, day, now=now)),
                       ("nightly: match", lambda: matched.setdefault("result", match_day(db, day, now=now))),
                       ("nightly: report", lambda: report_day(history.config(copy), db, day, now=now,
                                                              result=matched["result"]))):
        gen, gen_cpu = provider.gen_s, provider.gen_cpu_s
        wall, cpu = _timed(work)
        out[name] = (wall - (provider.gen_s - gen), cpu - (provider.gen_cpu_s - gen_cpu))
    db.conn.close()
    return out


def _nightly_whole(history: History, store: Store, copy: Path) -> dict[str, tuple[float, float]]:
    """reconcile.jobs.nightly as the worker runs it: the newest night, then the re-matches of earlier days."""
    db = open_db(copy)
    provider = history.provider(store.newest)
    wall, cpu = _timed(lambda: nightly(history.config(copy), db, provider, now=night_of(store.newest)))
    db.conn.close()
    return {"nightly: jobs.nightly, whole": (wall - provider.gen_s, cpu - provider.gen_cpu_s)}


WRITES: tuple[Callable[[History, Store, Path], dict[str, tuple[float, float]]], ...] = (_nightly_steps, _nightly_whole)


def _rematch(history: History, store: Store, db: Any) -> None:
    """A day matched and reported again, as each of the nightly run's re-matches is (here the newest day)."""
    report_day(history.config(store.path), db, synthetic.day_of(store.newest), now=night_of(store.newest))


def _nightly_choice(history: History, store: Store, db: Any) -> None:
    """What the nightly run reads to choose its days: due nights, days with open drifts, late entries."""
    now, day = night_of(store.newest), synthetic.day_of(store.newest)
    due_dates(db, now, 1)
    since = (day - timedelta(days=RECHECK_DAYS)).isoformat()
    drifts.open_days(db, since=since, before=day.isoformat())
    matching.days_with_late_entries(db, day.isoformat(), day.isoformat(), since=since)
    reports.report_dates(db, after=day.isoformat(), through=day.isoformat())


def _sync_recent(history: History, store: Store, db: Any) -> Generated:
    """The 15-minute sync in the morning after the newest night; the provider's generation is not counted."""
    provider = history.provider(store.newest)
    sync_recent(history.config(store.path), db, provider, now=night_of(store.newest) + timedelta(hours=9))
    return Generated(provider.gen_s, provider.gen_cpu_s)


def _poller_pick(history: History, store: Store, db: Any) -> None:
    """The poller's pass up to its first call (reconcile.poller.poll_once): the PROCESSING rows, the days'
    counts, the plan."""
    now = night_of(store.newest) - timedelta(hours=2)  # the day's stuck recharges are still PROCESSING
    items = poll_items(recharges.poll_candidates(db))
    counts = recharges.day_counts(db, min(i.since for i in items).date(), now.date())
    poll_plan(now, items, 100, day_counts=counts)


def _status(history: History, store: Store, db: Any) -> None:
    collect(history.config(store.path), db, now=night_of(store.newest) + timedelta(hours=9))


def _metrics(history: History, store: Store, db: Any) -> None:
    """One scrape of the receiver's /metrics: its database collector."""
    config, now = history.config(store.path), night_of(store.newest) + timedelta(hours=9)
    list(DatabaseCollector(lambda: db, lambda _: None, lambda d: gauges(config, d, now=now)).collect())


def _prune(history: History, store: Store, db: Any) -> None:
    prune_events(history.config(store.path), db, now=night_of(store.newest) + timedelta(hours=9))


READS: tuple[tuple[str, Callable[[History, Store, Any], Any]], ...] = (
    ("nightly: choose the nights and re-match days", _nightly_choice),
    ("nightly: match and report a day again (each re-match)", _rematch),
    ("sync-recent (every 15 minutes)", _sync_recent),
    ("poller: pick the PROCESSING recharges", _poller_pick),
    ("status", _status),
    ("/metrics scrape (database part)", _metrics),
    ("prune-events (every 6 hours)", _prune),
    ("drifts list --resolution pending", lambda h, s, db: _cli(h, s, "drifts", "list", "--resolution", "pending",
                                                                 "--format", "json")),
    ("drifts list --date D", lambda h, s, db: _cli(h, s, "drifts", "list", "--date", _day(s), "--format", "json")),
    ("drifts list --kind K --resolution pending", lambda h, s, db: _cli(
        h, s, "drifts", "list", "--kind", "missing_refund", "--resolution", "pending", "--format", "json")),
    ("transactions list --date D", lambda h, s, db: _cli(h, s, "transactions", "list", "--date", _day(s),
                                                         "--format", "json")),
    ("transactions list --reference R", lambda h, s, db: _cli(
        h, s, "transactions", "list", "--reference", f"RCH{s.newest * h.n + 5:09d}", "--format", "json")),
    ("report --date D --format json", lambda h, s, db: _cli(h, s, "report", "--date", _day(s), "--format", "json")),
    ("recharges list", lambda h, s, db: _cli(h, s, "recharges", "list", "--format", "json")),
    ("events list", lambda h, s, db: _cli(h, s, "events", "list", "--format", "json")),
    ("orders list", lambda h, s, db: _cli(h, s, "orders", "list", "--format", "json")),
)


def _timed(work: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of `work`, less the stand-in provider's generation when it returns one (Generated)."""
    wall, cpu = time.perf_counter(), time.process_time()
    generated = work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if isinstance(generated, Generated):
        wall, cpu = wall - generated.wall, cpu - generated.cpu
    return wall, cpu


def measure(history: History, repeat: int, log: Callable[[str], None]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Every phase on every store, alternated (the order reversed every other round), `repeat` times."""
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for round_ in range(-1, repeat):  # round -1 warms up (imports, caches) and is not kept
        if round_ < 0:
            _once(history, history.stores[0])
            continue
        order = history.stores if round_ % 2 == 0 else history.stores[::-1]
        for store in order:
            for write in WRITES:
                for name, took in write(history, store, _copy(store.before, history.workdir / "work.db")).items():
                    results.setdefault(name, {}).setdefault(store.label, []).append(took)
            db = open_db(store.path)
            for name, phase in READS:
                with redirect_stderr(StringIO()):
                    took = _timed(lambda: phase(history, store, db))
                results.setdefault(name, {}).setdefault(store.label, []).append(took)
            db.conn.close()
        log(f"round {round_ + 1}/{repeat} measured")
    return results


def _once(history: History, store: Store) -> None:
    """Every phase once on `store`, untimed."""
    for write in WRITES:
        write(history, store, _copy(store.before, history.workdir / "work.db"))
    db = open_db(store.path)
    for _, phase in READS:
        with redirect_stderr(StringIO()):
            phase(history, store, db)
    db.conn.close()


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def table(results: dict[str, dict[str, list[tuple[float, float]]]], labels: list[str]) -> str:
    """Per phase: CPU s and wall s on each store, median (min-max), and the ratio of the medians."""
    first, last = labels[0], labels[-1]
    width = max(map(len, results)) + 1
    head = (f"{'phase':<{width}} {'CPU s, ' + first:>24} {'CPU s, ' + last:>24} {'CPU x':>6}"
            f" {'wall s, ' + first:>24} {'wall s, ' + last:>24} {'wall x':>6}")
    lines = [head]
    for name, by_store in results.items():
        one, many = by_store[first], by_store[last]
        cpu = [statistics.median(c for _, c in v) for v in (one, many)]
        wall = [statistics.median(w for w, _ in v) for v in (one, many)]
        lines.append(f"{name:<{width}} {_spread([c for _, c in one]):>24} {_spread([c for _, c in many]):>24} "
                     f"{cpu[1] / max(cpu[0], 1e-6):>6.2f} {_spread([w for w, _ in one]):>24} "
                     f"{_spread([w for w, _ in many]):>24} {wall[1] / max(wall[0], 1e-6):>6.2f}")
    return "\n".join(lines)


# ---- --plans: the statements whose plan scans a growing table, or whose work grows ------------------------

def _recorded(history: History, store: Store, phase: Any) -> plan_store.Recorded:
    with plan_store.recording() as recorded, redirect_stderr(StringIO()):
        if phase in WRITES:
            phase(history, store, _copy(store.before, history.workdir / "work.db"))
        else:
            db = open_db(store.path)
            phase(history, store, db)
            db.conn.close()
    return recorded


def plans(history: History, log: Callable[[str], None]) -> str:
    """Run every phase once on each store, recording plans and work (partnerkit.store.plans): the statements
    that scan a growing table, and those whose work on the N-day store is more than twice the 1-day store's."""
    one, many = history.stores[0], history.stores[-1]
    step = plan_store.STEP
    report = []
    for name, phase in [(w.__name__.strip("_").replace("_", " "), w) for w in WRITES] + list(READS):
        small = _recorded(history, one, phase).steps
        recorded = _recorded(history, many, phase)
        found = 0
        for sql, plan in recorded.plans.items():
            scanned = plan_store.scans(plan, sql)
            grown, before = recorded.steps.get(sql, 0) * step, small.get(sql, 0) * step
            # The whole nightly run re-matches the days before the newest (up to 7): no growth is judged there.
            grows = phase is not _nightly_whole and grown >= 2 * before + 1000
            if scanned or grows:
                found += 1
                report.append(f"[{name}] {sql[:400]}\n    work {before:,} -> {grown:,} VM steps ({one.label} -> "
                              f"{many.label})\n    " + "\n    ".join(plan))
        log(f"{name}: {len(recorded.plans)} statements, {found} scanning a growing table or growing")
    return "\n".join(report) or "no statement scans a growing table, nor grows"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reconcile.history",
        description="Build a store of N consecutive synthetic days (bench.reconcile.day, S recharges a day) as "
                    "partnerkit lives them (webhooks, the nightly run, the poller, finance resolving drifts), then "
                    "time the nightly job and its re-matches, the 15-minute sync, the poller's pick, status, a "
                    "/metrics scrape, the prune job and the list commands on it against the same on the store of "
                    "its first day: CPU and wall seconds, median (min-max) of R runs each, and the ratio. The "
                    "stores live in a temp directory (about 13 MB a day of 20000), removed at the end.",
        epilog="docs/reconcile.md, \"Benchmark\", says what a run shows.")
    parser.add_argument("--days", type=int, default=30, help="days of history (default 30; at least 2)")
    parser.add_argument("--size", type=int, default=20000, help="recharges a day (default 20000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each phase on each store (default 5)")
    parser.add_argument("--plans", action="store_true",
                        help="list the statements whose query plan scans a growing table, instead of timing")
    parser.add_argument("--keep", metavar="DIR", help="build the stores in DIR and leave them there")
    args = parser.parse_args(argv)
    if args.days < 2 or args.size < 100 or args.repeat < 1:
        parser.error("--days must be at least 2, --size at least 100, --repeat at least 1")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        history = build(args.size, args.days, workdir, log)
        first = open_db(history.stores[0].path)
        digest = single.drift_digest(first, synthetic.DAY)
        first.conn.close()
        log(f"built in {time.perf_counter() - started:.0f} s; {args.days} days of {args.size} recharges, "
            f"{(history.stores[-1].path.stat().st_size) / 2**20:.0f} MB; first day's drift ids {digest}")
        if args.plans:
            print(plans(history, log))
            return 0
        results = measure(history, args.repeat, log)
        print(f"{args.days} days of {args.size} recharges, {args.repeat} runs per phase and store: CPU and wall "
              "seconds, median (min-max)")
        print(table(results, [s.label for s in history.stores]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
