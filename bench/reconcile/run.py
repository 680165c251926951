"""Run one size in this process: set up the day, sync it into the store, match it, write its report.

What is timed:
- load: `reconcile.sync.sync_recharges` and `sync_transactions` over the provider's lists of the day
  (every page: the worker's upsert where needed, seen marks, the one alias mapping, transaction
  upserts, `record_sync`), through a stand-in client whose pages are generated as they are read;
  that generation is measured and subtracted (reported as gen_s).
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
from typing import Iterator

from bench.reconcile import day as synthetic
from partnerkit.config import load_config
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


class Provider:
    """The provider's lists of the day as the client yields them, timing their generation (not part of the load)."""

    def __init__(self, n: int) -> None:
        self.n, self.gen_s = n, 0.0

    def _timed(self, pages) -> Iterator:
        while True:
            started = time.perf_counter()
            page = next(pages, None)
            self.gen_s += time.perf_counter() - started
            if page is None:
                return
            yield from page

    def iter_recharges(self, *, from_date, to_date, limit) -> Iterator:
        return self._timed(synthetic.provider_recharges(self.n, limit))

    def iter_transactions(self, *, from_date, to_date, limit) -> Iterator:
        return self._timed(synthetic.provider_transactions(self.n, limit))


def load(db, n: int) -> tuple[float, float]:
    """Sync the day's provider lists with reconcile.sync; return (timed s less generation, generation s)."""
    provider = Provider(n)
    started = time.perf_counter()
    sync.sync_recharges(db, provider, synthetic.DAY, synthetic.DAY, now=NOW)
    sync.sync_transactions(db, provider, synthetic.DAY, synthetic.DAY, now=NOW)
    return time.perf_counter() - started - provider.gen_s, provider.gen_s


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
