"""bench.reconcile.floor, the least a load and match of the bench's day must do, is measured on the day
bench.reconcile.run loads, and does that day's necessary work: it leaves the store with the recharges and
transactions the real sync leaves, and judges unmatched exactly the recharges the matcher finds a drift on,
but those only the seen marks it does not write can tell (`unknown_to_provider`). With its secondary
indexes dropped for the load, it builds them again and finds the same."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bench.reconcile import day as synthetic
from bench.reconcile import floor, run

SIZE = 1000  # ten of each of the day's 100 slots


def _read(path: Path, sql: str, *params) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(conn.execute(sql, params).fetchall())
    finally:
        conn.close()


RECHARGES = "SELECT origin, provider_id, reference_number, status, payable_cents, updated_at FROM recharges"
TRANSACTIONS = ("SELECT id, type, amount_cents, order_id, reference_number, recharge_id, currency, created_at,"
                " balance_after_cents FROM transactions")
INDEXES = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('recharges', 'transactions')"


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> tuple[dict, Path]:
    workdir = tmp_path_factory.mktemp("run")
    return run.run(SIZE, workdir), workdir / "bench.db"


@pytest.mark.parametrize("indexes", [True, False], ids=["indexes", "no-indexes"])
def test_the_floor_stores_what_the_sync_stores_and_counts_what_the_matcher_finds(real, tmp_path, indexes):
    measured, real_db = real
    found = floor.run(SIZE, tmp_path, indexes=indexes)
    floor_db = tmp_path / "floor.db"

    assert _read(floor_db, RECHARGES) == _read(real_db, RECHARGES)
    assert _read(floor_db, TRANSACTIONS) == _read(real_db, TRANSACTIONS)
    assert found["transactions"] == measured["transactions"] == 1040
    assert _read(floor_db, INDEXES) == _read(real_db, INDEXES)  # built again after a load without them

    drifted = _read(real_db, "SELECT DISTINCT reference FROM drifts WHERE subject = 'recharge'"
                             " AND kind != 'unknown_to_provider' AND report_date = ?", synthetic.DAY.isoformat())
    assert found["recharges"] == SIZE
    assert found["unmatched"] == len(drifted) == 70  # 7 kinds of recharge drift, 10 of each
    assert found["matched"] == SIZE - 70


def test_the_command_refuses_a_size_below_one(capsys):
    with pytest.raises(SystemExit) as exited:
        floor.main(["0"])
    assert exited.value.code == 2
    assert "size must be at least 1" in capsys.readouterr().err
