"""The merge's access paths (partnerkit.store.drifts.merge_found): a day matched again looks each drift up by its id
in the merge's tables, the snapshot the match read and the drifts it resolves, reopens or restores, never the whole
of one of them for each drift; and the day's drifts are written in the order of their ids, the order of the indexes
keyed by them."""

from __future__ import annotations

from datetime import timedelta

from partnerkit.store import open_db, plans
from partnerkit.store.drifts import audit_trail, drift_id, get_drift, list_drifts, set_resolution
from reconcile.matcher import match_day
from tests.reconcile.reconcile_helpers import DAY, at

RUN = at(2, day=DAY + timedelta(days=1))


def _plan(recorded: plans.Recorded, start: str) -> list[str]:
    [plan] = [plan for sql, plan in recorded.plans.items() if sql.startswith(start)]
    return plan


def test_a_day_matched_again_looks_each_drift_up_in_the_snapshot_by_its_id(db, db_path, ledger):
    for _ in range(3):
        ledger.recharge("SUCCESS")  # no debit: a missing_debit each
    match_day(db, DAY, now=RUN)
    before = [(d.id, d.resolution, d.last_detected_at) for d in list_drifts(db)]
    with plans.recording() as recorded:
        again = open_db(db_path)  # a connection opened inside the block, which it sees
        match_day(again, DAY, now=RUN)
        again.conn.close()
    plan = _plan(recorded, "INSERT INTO m_moved")
    assert any(line.startswith("SEARCH s USING PRIMARY KEY (id=?)") for line in plan), plan  # m_seen's key
    assert not any(line.startswith("SCAN s") for line in plan), plan
    assert [(d.id, d.resolution, d.last_detected_at) for d in list_drifts(db)] == before and len(before) == 3


def test_the_drifts_a_match_resolves_reopens_or_restores_are_each_read_by_their_id(db, db_path, ledger):
    twice, paid_late = ledger.recharge("SUCCESS"), ledger.recharge("SUCCESS")
    ledger.debit_recharge(twice)
    ledger.debit_recharge(twice, minute=2)  # a duplicate_debit
    match_day(db, DAY, now=RUN)  # and a missing_debit for paid_late
    duplicate = drift_id("duplicate_debit", "recharge", twice["reference_number"])
    missing = drift_id("missing_debit", "recharge", paid_late["reference_number"])
    set_resolution(db, duplicate, "resolved", note="provider refunds it", by="finance", at=RUN)
    ledger.debit_recharge(twice, minute=3)  # a third debit: other figures, pending again
    ledger.debit_recharge(paid_late)  # its debit at last: no longer detected
    with plans.recording() as recorded:
        again = open_db(db_path)
        result = match_day(again, DAY, now=RUN + timedelta(hours=1))
        again.conn.close()
    assert (result.changes["changed"], result.changes["auto_resolved"]) == (1, 1)
    assert (get_drift(db, duplicate).resolution, get_drift(db, missing).resolution) == ("pending", "resolved")
    # Each UPDATE reads the drift's row of m_state, m_gone or m_restore in a subquery per drift it changes: by key.
    for table, alias in (("m_state", "s"), ("m_gone", "g"), ("m_restore", "r")):
        [plan] = [plan for sql, plan in recorded.plans.items()
                  if sql.startswith("UPDATE drifts") and f"FROM {table} {alias} WHERE {alias}.id = drifts.id" in sql]
        lookup = plan[plan.index("CORRELATED SCALAR SUBQUERY 1") + 1]
        assert lookup == f"SEARCH {alias} USING PRIMARY KEY (id=?)", plan


def test_the_new_drifts_and_their_audit_rows_are_written_in_the_order_of_their_ids(db, ledger):
    for status in ("SUCCESS", "FAILED", "SUCCESS", "PROCESSING", "SUCCESS", "REVERSED"):
        ledger.recharge(status)  # no debit: each a missing_debit (the PROCESSING one stuck too), in the day's order
    ledger.tx("-5.00", type="RECHARGE", reference_number="GHOST")  # an orphan, found on the wallet's side
    match_day(db, DAY, now=RUN)
    written = [d.id for d in sorted(list_drifts(db), key=lambda d: audit_trail(db, d.id)[0]["seq"])]
    assert written == sorted(written) and len(written) == 8
