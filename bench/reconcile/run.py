"""Run one size in this process: set up the day, sync it into the store, match it, write its report.

What is timed:
- load: `reconcile.sync.sync_recharges` and `sync_transactions` over the provider's lists of the day
  (every page: the worker's upsert where needed, seen marks, the one alias mapping, transaction
  writes, `record_sync`), through a stand-in client.
  - Recharge pages are generated as they are read (`Recharge` records, built by the client's own
    parser); that generation is measured and subtracted (gen_s). Nothing else runs meanwhile: the
    recharge sync has no background work.
  - Transaction pages are read from a file of the JSON the provider sends, written before the clock
    starts, and parsed with the client's parser (`money.loads`) as they are read: that parse is
    part of the load (parse_s reports it), never subtracted, because the sync's writer thread works
    while the next page is read, and subtracting that time would hide its work.
- match: `reconcile.matcher.match_day`. report: `reconcile.jobs.report_day` (DB + JSON/CSV/HTML files).
Not timed (setup_s): the store's schema, the rows the worker's submits left during the day, the
receiver's voucher orders (both written by other owners' code, one at a time through the day) and
the transaction pages' file.
Peak RSS is the whole process, every thread (setup and generation included)."""

from __future__ import annotations

import hashlib
import json
import resource
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from bench.reconcile import day as synthetic
from partnerkit.config import load_config
from partnerkit.money import loads
from partnerkit.store import bulk, open_db, transaction
from reconcile import sync
from reconcile.jobs import report_day
from reconcile.matcher import match_day

NOW = datetime(2025, 1, 16, 1, 0, tzinfo=timezone.utc)


def setup(db, n: int, pages_file: Path, *, index: int = 0, analyze: bool = True) -> None:
    """The worker's rows of the day, the receiver's orders, the provider's transaction pages (untimed).

    `index`: the day of a history (bench.reconcile.day); `analyze`: refresh the planner's statistics."""
    orders, vouchers = synthetic.orders(n, index=index)
    with transaction(db) as conn:
        bulk.bulk_load_recharges(conn, synthetic.worker_rows(n, index=index))
        bulk.bulk_load_orders(conn, orders, vouchers)
    if analyze:
        db.execute("ANALYZE")
    write_pages(pages_file, n, index)


def write_pages(pages_file: Path, n: int, index: int = 0) -> None:
    """The provider's transaction list of the day as it sends it, one page a line."""
    with open(pages_file, "wb") as out:
        for page in synthetic.provider_transaction_pages(n, sync.TRANSACTION_PAGE, index=index):
            out.write(page + b"\n")


class StandIn:
    """What the jobs ask of a client beside the endpoints (`partnerkit.client.PartnerApi`), as a stand-in has it:
    no provider account to check, and its views (`with_budget`, `leaving`, `once`) are itself: it spends no budget."""

    def check_account(self) -> None:
        """Nothing to check: a stand-in serves no provider account."""

    def with_budget(self, purpose: str, *, wait: bool, keep_free: int = 0, own_cap: int | None = None,
                    max_wait: float | None = None) -> "StandIn":
        return self

    def leaving(self, keep_free: int) -> "StandIn":
        return self

    def once(self) -> "StandIn":
        return self


class Provider(StandIn):
    """The provider's lists of the day as the client yields them (see the module docstring for what is timed)."""

    def __init__(self, n: int, pages_file: Path, *, index: int = 0) -> None:
        self.n, self.pages_file, self.gen_s, self.gen_cpu_s, self.parse_s = n, pages_file, 0.0, 0.0, 0.0
        self.index = index

    def iter_recharges(self, *, from_date, to_date, limit, on_malformed=None) -> Iterator:
        pages = synthetic.provider_recharges(self.n, limit, index=self.index)
        while True:
            started, cpu = time.perf_counter(), time.process_time()
            page = next(pages, None)
            self.gen_s += time.perf_counter() - started
            self.gen_cpu_s += time.process_time() - cpu
            if page is None:
                return
            yield from page

    def iter_transactions(self, *, from_date, to_date, limit) -> Iterator:
        assert limit == sync.TRANSACTION_PAGE, "the pages file was written for sync.TRANSACTION_PAGE"
        with open(self.pages_file, "rb") as pages:
            for line in pages:
                started = time.perf_counter()
                page = loads(line)
                self.parse_s += time.perf_counter() - started
                yield from page


def load(db, n: int, pages_file: Path) -> dict:
    """Sync the day's provider lists with reconcile.sync; return the seconds: load_s (less recharge generation),
    gen_s, parse_s (part of load_s), and each sync's share of load_s with its CPU seconds (every thread)."""
    provider = Provider(n, pages_file)
    started, cpu = time.perf_counter(), time.process_time()
    sync.sync_recharges(db, provider, synthetic.DAY, synthetic.DAY, now=NOW)
    half, half_cpu = time.perf_counter(), time.process_time()
    sync.sync_transactions(db, provider, synthetic.DAY, synthetic.DAY, now=NOW)
    done, done_cpu = time.perf_counter(), time.process_time()
    return {"load_s": done - started - provider.gen_s, "gen_s": provider.gen_s, "parse_s": provider.parse_s,
            "recharges_s": half - started - provider.gen_s, "recharges_cpu_s": half_cpu - cpu - provider.gen_cpu_s,
            "transactions_s": done - half, "transactions_cpu_s": done_cpu - half_cpu}


def drift_digest(db, day) -> str:
    """The first 16 hex digits of sha256 over the day's drift ids, sorted, one a line (what must not change)."""
    from partnerkit.store.drifts import iter_drifts

    ids = "\n".join(sorted(d.id for d in iter_drifts(db, report_date=day.isoformat())))
    return hashlib.sha256(ids.encode()).hexdigest()[:16]


def run(n: int, workdir: Path) -> dict:
    """Time load, match and report for n recharges; return the measurements."""
    config = load_config(environ={"PARTNERKIT_DB": str(workdir / "bench.db"),
                                  "PARTNERKIT_REPORT_DIR": str(workdir / "reports")})
    started = time.perf_counter()
    db = open_db(config.db_path)
    pages_file = workdir / "transaction-pages.jsonl"
    setup(db, n, pages_file)
    setup_s = time.perf_counter() - started
    loading = load(db, n, pages_file)
    loaded, loaded_cpu = time.perf_counter(), time.process_time()
    result = match_day(db, synthetic.DAY, now=NOW)
    matched, matched_cpu = time.perf_counter(), time.process_time()
    report = report_day(config, db, synthetic.DAY, now=NOW, result=result)
    reported, reported_cpu = time.perf_counter(), time.process_time()
    transactions = db.execute("SELECT COUNT(*) FROM transactions").fetchone()[0]
    kinds = report["summary"]["drifts_by_kind"]
    ids = "\n".join(sorted(d["id"] for d in report["drifts"]))
    return {"size": n, "transactions": transactions, "setup_s": setup_s, **loading,
            "match_s": matched - loaded, "match_cpu_s": matched_cpu - loaded_cpu, "report_s": reported - matched,
            "report_cpu_s": reported_cpu - matched_cpu, "total_s": loading["load_s"] + (reported - loaded),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "drifts": len(report["drifts"]), "kinds": kinds,
            "drift_digest": hashlib.sha256(ids.encode()).hexdigest()[:16], "matched": result.matched}


def main(argv: list[str]) -> int:
    n = int(argv[0])
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        print(json.dumps(run(n, Path(tmp))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
