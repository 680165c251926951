"""`python -m bench.reconcile.floor N [--no-indexes]`: the floor, the least a load and match of the day must do.

The least any Python-over-SQLite implementation with our schema must do to load and match bench.reconcile's
day, timed on the same day in the same way: the same-run baseline for issue 5's 10 s (bench.reconcile shows it).

The day is bench.reconcile.run's, byte for byte: its `setup` (the store's schema by `open_db`, the rows the
worker's submits left, the receiver's orders, ANALYZE, the transaction pages' file, all untimed) and its
`Provider` (the recharge pages generated as they are read, that generation measured and subtracted as gen_s;
the transaction pages read from the file and parsed with `partnerkit.money.loads`, part of the load as
parse_s). What is timed is only what no implementation with our schema can skip:

- load: every provider record read once, and every transaction and every new or changed recharge written
  once into the store's own tables, with their schema, indexes and unique constraints: one `executemany` per
  FLOOR_ROWS rows, each in one transaction, the fields taken straight from the record (no alias mapping, no
  validation, no quarantine, no seen marks, no sync bookkeeping, `raw` and `shape` left NULL).
  - Recharges: each page's stored states read with one range of the provider id's unique index, each record
    compared with its row (status and updated_at as the provider wrote them), and only the records that
    differ written, with one upsert each by that index: a settled one (slot 3) updated once (status and
    updated_at only), one partnerkit never submitted (slot 8) inserted (origin 'provider'); 2% of the day.
    The 98% setup stored unchanged are not written: rewriting them would rewrite their status index entries
    too, and even an upsert per record that finds its row and writes nothing (`DO UPDATE ... WHERE` they
    differ) cost 3.5 times the CPU of the read and compare at 100k (1.2-1.5 against 0.35-0.39 s).
  - Transactions: one INSERT per record (`ON CONFLICT(id) DO NOTHING`, free when nothing conflicts; the
    dedup a restartable load needs), money to integer paise, times as the provider wrote them.
- match: ONE read. The day's recharges (the range of `recharges_provider_created`, in index order so
  GROUP BY needs no sort) joined to their transactions by `recharge_id` (`transactions_recharge`), each
  judged by the money rules' common case: a spend recharge (SUCCESS) has one debit of payable and no credit,
  a credited-back one (FAILED, REVERSED) debits and credits the same non-zero amount, one still PROCESSING
  30 minutes on or one the provider listed and partnerkit never submitted is unmatched. Nothing is written:
  no drifts, no report, and nothing of what needs more than that join (orders, orphans, the balance chain,
  `unknown_to_provider`, which needs the seen marks the load does not write). So `unmatched` is the day's
  recharge drifts less its `unknown_to_provider` ones (tests/reconcile/test_bench_floor.py holds that).

`--no-indexes`: the same, with the secondary indexes of `recharges` and `transactions` (not the unique
constraints: the upsert and the dedup stand on them) dropped after setup and built again after the load
(index_s, part of total_s: the match needs them): load_s against the indexed run's is what maintaining them
costs the load.

Prints one JSON line, as bench.reconcile.run does: load_s (less gen_s), parse_s (part of it), each table's
share, index_s, match_s, total_s and the CPU seconds of each (one thread: CPU seconds are this process's),
peak_mb (the whole process, setup and generation included, as run.py's), and the counts.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from itertools import chain, islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from bench.reconcile import day as synthetic
from bench.reconcile.run import NOW, Provider, setup
from partnerkit.store import open_db, transaction
from partnerkit.timeutil import iso
from reconcile import sync
from reconcile.matcher import STUCK_AFTER, day_bounds

FLOOR_ROWS = 100_000  # records per executemany and per transaction
SYNCED_AT = iso(NOW)

_RECHARGE = ("INSERT INTO recharges (origin, provider_id, reference_number, status, mobile_number, face_cents,"
             " discount_cents, payable_cents, currency, provider_created_at, updated_at)"
             " VALUES ('provider', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
             " ON CONFLICT(provider_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at"
             " WHERE status IS NOT excluded.status OR updated_at IS NOT excluded.updated_at")
_TRANSACTION = ("INSERT INTO transactions (id, type, amount_cents, order_id, reference_number, recharge_id, currency,"
                f" created_at, balance_after_cents, synced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '{SYNCED_AT}')"
                " ON CONFLICT(id) DO NOTHING")
# One pass over the day's recharges in index order, each with its transactions' debits and credits.
_MATCH = """
SELECT count(*), ifnull(sum(CASE
        WHEN origin = 'provider' THEN 0
        WHEN status = 'PROCESSING' THEN since >= :stuck_before AND debit_n = 1 AND debit = payable AND credit = 0
        WHEN status = 'SUCCESS' THEN debit_n = 1 AND debit = payable AND credit = 0
        WHEN status IN ('FAILED', 'REVERSED') THEN debit_n > 0 AND credit = debit
        ELSE 0 END), 0)
FROM (SELECT r.origin, r.status, r.payable_cents AS payable, COALESCE(r.submitted_at, r.provider_created_at) AS since,
             count(t.amount_cents < 0 OR NULL) AS debit_n, -total(min(t.amount_cents, 0)) AS debit,
             total(max(t.amount_cents, 0)) AS credit
      FROM recharges r LEFT JOIN transactions t ON t.recharge_id = r.provider_id
      WHERE r.provider_created_at >= :start AND r.provider_created_at < :end
      GROUP BY r.provider_created_at, r.local_id)
"""


def changed_recharges(db: Any, records: Iterable[Any]) -> list[tuple]:
    """_RECHARGE's values of the records that differ from their stored row or have none, a page's stored
    states read at once (the ids of a page of the provider's list are consecutive: one index range)."""
    records, rows = iter(records), []
    while page := list(islice(records, sync.RECHARGE_PAGE)):
        ids = [r.id for r in page]
        known = {pid: (status, updated) for pid, status, updated in db.execute(
            "SELECT provider_id, status, updated_at FROM recharges WHERE provider_id BETWEEN ? AND ?",
            (min(ids), max(ids)))}
        rows += recharge_rows(r for r in page if known.get(r.id) != (r.status, r.raw.get("updated_at")))
    return rows


def recharge_rows(records: Iterable[Any]) -> Iterator[tuple]:
    """The client's `Recharge` records as _RECHARGE's values: its fields, the times as the provider sent them."""
    for r in records:
        raw = r.raw
        yield (r.id, r.reference_number, r.status, r.mobile_number, int(r.face.scaleb(2)),
               int(r.discount.scaleb(2)), int(r.payable.scaleb(2)), r.currency, raw["created_at"],
               raw.get("updated_at"))


def transaction_rows(records: Iterable[dict]) -> Iterator[tuple]:
    """The provider's transaction records (as `money.loads` gives them) as _TRANSACTION's values."""
    for t in records:
        get = t.get
        balance = get("balance_after")
        yield (t["id"], t["type"], int(t["amount"].scaleb(2)), get("order_id"), get("reference_number"),
               get("recharge_id"), t["currency"], t["created_at"], None if balance is None else int(balance.scaleb(2)))


def write(db: Any, sql: str, rows: Iterable[tuple]) -> None:
    """`executemany` of FLOOR_ROWS rows at a time, each in one transaction, streamed (never a list)."""
    rows = iter(rows)
    while (first := next(rows, None)) is not None:
        with transaction(db) as conn:
            conn.executemany(sql, chain((first,), islice(rows, FLOOR_ROWS - 1)))


def secondary_indexes(db: Any) -> list[tuple[str, str]]:
    """(name, CREATE INDEX statement) of the indexes of `recharges` and `transactions` that are no constraint."""
    return db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                      " AND tbl_name IN ('recharges', 'transactions') ORDER BY name").fetchall()


def match(db: Any) -> tuple[int, int]:
    """(the day's recharges, of them matched), in one read."""
    start, end = day_bounds(synthetic.DAY)
    total, matched = db.execute(_MATCH, {"start": start, "end": end,
                                         "stuck_before": iso(NOW - STUCK_AFTER)}).fetchone()
    return total, int(matched)


def run(n: int, workdir: Path, *, indexes: bool = True) -> dict:
    """Time the floor's load and match of n recharges; return the measurements."""
    started = time.perf_counter()
    db = open_db(workdir / "floor.db")
    pages_file = workdir / "transaction-pages.jsonl"
    setup(db, n, pages_file)
    dropped = [] if indexes else secondary_indexes(db)
    for name, _ in dropped:
        db.execute(f"DROP INDEX {name}")
    setup_s = time.perf_counter() - started

    provider = Provider(n, pages_file)
    started, cpu = time.perf_counter(), time.process_time()
    write(db, _RECHARGE, changed_recharges(db, provider.iter_recharges(from_date=synthetic.DAY, to_date=synthetic.DAY,
                                                                       limit=sync.RECHARGE_PAGE)))
    half, half_cpu = time.perf_counter(), time.process_time()
    write(db, _TRANSACTION, transaction_rows(provider.iter_transactions(from_date=synthetic.DAY,
                                                                        to_date=synthetic.DAY,
                                                                        limit=sync.TRANSACTION_PAGE)))
    loaded, loaded_cpu = time.perf_counter(), time.process_time()
    for _, create in dropped:
        db.execute(create)
    indexed, indexed_cpu = time.perf_counter(), time.process_time()
    recharges, matched = match(db)
    matched_at, matched_cpu = time.perf_counter(), time.process_time()

    load_s = loaded - started - provider.gen_s
    load_cpu_s = loaded_cpu - cpu - provider.gen_cpu_s
    transactions = db.execute("SELECT COUNT(*) FROM transactions").fetchone()[0]
    return {"size": n, "indexes": indexes, "transactions": transactions, "recharges": recharges, "setup_s": setup_s,
            "load_s": load_s, "load_cpu_s": load_cpu_s, "gen_s": provider.gen_s, "parse_s": provider.parse_s,
            "recharges_s": half - started - provider.gen_s, "recharges_cpu_s": half_cpu - cpu - provider.gen_cpu_s,
            "transactions_s": loaded - half, "transactions_cpu_s": loaded_cpu - half_cpu,
            "index_s": indexed - loaded, "index_cpu_s": indexed_cpu - loaded_cpu,
            "match_s": matched_at - indexed, "match_cpu_s": matched_cpu - indexed_cpu,
            "total_s": load_s + (matched_at - loaded), "total_cpu_s": load_cpu_s + (matched_cpu - loaded_cpu),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "matched": matched, "unmatched": recharges - matched}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile.floor", description=__doc__.splitlines()[0])
    parser.add_argument("size", type=int, help="recharges of the day (as bench.reconcile.run N)")
    parser.add_argument("--no-indexes", action="store_true",
                        help="drop the secondary indexes for the load, build them again before the match")
    args = parser.parse_args(argv)
    if args.size < 1:
        parser.error("size must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-floor-") as tmp:
        print(json.dumps(run(args.size, Path(tmp), indexes=not args.no_indexes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
