"""Run one size in this process: load the day, match it, write its report; print one JSON line."""

from __future__ import annotations

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
from reconcile.jobs import report_day
from reconcile.matcher import match_day

NOW = datetime(2025, 1, 16, 1, 0, tzinfo=timezone.utc)


def load(db, n: int) -> None:
    """Bulk-load one synthetic day: PRAGMAs for the load only, secondary indexes built once at the end."""
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -65536")  # 64 MiB page cache while loading
    ledger_store.drop_bulk_indexes(db)
    orders: list = []
    vouchers: list = []
    with transaction(db) as conn:
        deferred = matching.drop_secondary_indexes(conn, "recharges")
        matching.bulk_load_recharges(conn, synthetic.recharges(n))
        matching.bulk_load_transactions(conn, synthetic.transactions(n, orders, vouchers))
        matching.bulk_load_orders(conn, orders, vouchers)
    ledger_store.mark_recharges_seen(db, (pid for pid, _ in synthetic.seen(n)), synthetic.SYNCED_AT)
    ledger_store.record_sync(db, "recharges", from_day=synthetic.DAY.isoformat(), to_day=synthetic.DAY.isoformat(),
                             started_at=synthetic.SYNCED_AT, count=n, days=[synthetic.DAY.isoformat()],
                             advance_to=synthetic.DAY.isoformat())
    ledger_store.create_bulk_indexes(db)
    with transaction(db) as conn:
        matching.rebuild_indexes(conn, deferred)
    db.execute("ANALYZE")
    db.execute("PRAGMA synchronous = NORMAL")


def run(n: int, workdir: Path) -> dict:
    """Time load, match and report for n recharges; return the measurements."""
    config = load_config(environ={"PARTNERKIT_DB": str(workdir / "bench.db"),
                                  "PARTNERKIT_REPORT_DIR": str(workdir / "reports")})
    started = time.perf_counter()
    db = open_db(config.db_path)
    load(db, n)
    loaded = time.perf_counter()
    result = match_day(db, synthetic.DAY, now=NOW)
    matched = time.perf_counter()
    report = report_day(config, db, synthetic.DAY, now=NOW, result=result)
    reported = time.perf_counter()
    transactions = db.execute("SELECT COUNT(*) FROM transactions").fetchone()[0]
    kinds = report["summary"]["drifts_by_kind"]
    return {"size": n, "transactions": transactions, "load_s": loaded - started, "match_s": matched - loaded,
            "report_s": reported - matched, "total_s": reported - started,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "drifts": len(report["drifts"]), "kinds": kinds, "matched": result.matched}


def main(argv: list[str]) -> int:
    n = int(argv[0])
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        print(json.dumps(run(n, Path(tmp))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
