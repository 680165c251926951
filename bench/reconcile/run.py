"""Run one size in this process: set up the day, sync it into the store, match it, write its report.

What is timed:
- load: what `reconcile.sync` does with the provider's lists of the day: every recharge page through
  `store_recharge_page` + `mark_recharges_seen`, every transaction page through
  `store_transaction_page` (the one alias mapping + upsert), `record_sync` for both. The provider's
  pages are generated before each call and that generation is NOT timed (reported as gen_s).
- match: `reconcile.matcher.match_day`. report: `reconcile.jobs.report_day` (DB + JSON/CSV/HTML files).
Not timed (setup_s): the store's schema, the rows the worker's submits left during the day and the
receiver's voucher orders (both written by other owners' code, one at a time through the day).
Peak RSS is the whole process (setup and generation included).
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.reconcile import day as synthetic
from partnerkit.config import load_config
from partnerkit.store import ledger as ledger_store
from partnerkit.store import matching, open_db, transaction
from reconcile import sync
from reconcile.jobs import report_day
from reconcile.matcher import match_day

NOW = datetime(2025, 1, 16, 1, 0, tzinfo=timezone.utc)


def setup(db, n: int) -> None:
    """The worker's rows of the day and the receiver's orders (untimed: not what a sync does)."""
    orders, vouchers = synthetic.orders(n)
    with transaction(db) as conn:
        matching.bulk_load_recharges(conn, synthetic.worker_rows(n))
        matching.bulk_load_orders(conn, orders, vouchers)
    db.execute("ANALYZE")


def load(db, n: int) -> tuple[float, float]:
    """Sync the day's provider lists through reconcile.sync's page functions; return (timed s, generation s)."""
    now = NOW
    stamp = synthetic.SYNCED_AT
    day = synthetic.DAY.isoformat()
    timed = gen = 0.0
    seen = 0
    mark = time.perf_counter()
    for batch in synthetic.provider_recharges(n, sync.BATCH):
        started = time.perf_counter()
        gen += started - mark
        ids, _ = sync.store_recharge_page(db, batch, now)
        ledger_store.mark_recharges_seen(db, sorted(ids), stamp)
        seen += len(batch)
        mark = time.perf_counter()
        timed += mark - started
    started = time.perf_counter()
    ledger_store.record_sync(db, "recharges", from_day=day, to_day=day, started_at=stamp, count=seen, days=[day],
                             advance_to=day)
    mark = time.perf_counter()
    timed += mark - started
    stored = 0
    for batch in synthetic.provider_transactions(n, sync.BATCH):
        started = time.perf_counter()
        gen += started - mark
        stored += sync.store_transaction_page(db, batch, stamp)[0]
        mark = time.perf_counter()
        timed += mark - started
    started = time.perf_counter()
    ledger_store.record_sync(db, "transactions", from_day=day, to_day=day, started_at=stamp, count=stored,
                             days=[day], advance_to=day)
    timed += time.perf_counter() - started
    return timed, gen


def run(n: int, workdir: Path) -> dict:
    """Time load, match and report for n recharges; return the measurements."""
    config = load_config(environ={"PARTNERKIT_DB": str(workdir / "bench.db"),
                                  "PARTNERKIT_REPORT_DIR": str(workdir / "reports")})
    started = time.perf_counter()
    db = open_db(config.db_path)
    setup(db, n)
    setup_s = time.perf_counter() - started
    load_s, gen_s = load(db, n)
    loaded = time.perf_counter()
    result = match_day(db, synthetic.DAY, now=NOW)
    matched = time.perf_counter()
    report = report_day(config, db, synthetic.DAY, now=NOW, result=result)
    reported = time.perf_counter()
    transactions = db.execute("SELECT COUNT(*) FROM transactions").fetchone()[0]
    kinds = report["summary"]["drifts_by_kind"]
    ids = "\n".join(sorted(d["id"] for d in report["drifts"]))
    return {"size": n, "transactions": transactions, "setup_s": setup_s, "gen_s": gen_s, "load_s": load_s,
            "match_s": matched - loaded, "report_s": reported - matched,
            "total_s": load_s + (reported - loaded),
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
