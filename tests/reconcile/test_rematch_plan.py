"""A day matched again compares its drifts with the snapshot the match read by id, never the whole snapshot
for each drift (partnerkit.store.drifts.merge_found, `seen`)."""

from __future__ import annotations

from datetime import timedelta

from partnerkit.store import open_db, plans
from partnerkit.store.drifts import list_drifts
from reconcile.matcher import match_day
from tests.reconcile.reconcile_helpers import DAY, at

RUN = at(2, day=DAY + timedelta(days=1))


def test_a_day_matched_again_looks_each_drift_up_in_the_snapshot_by_its_id(db, db_path, ledger):
    for _ in range(3):
        ledger.recharge("SUCCESS")  # no debit: a missing_debit each
    match_day(db, DAY, now=RUN)
    before = [(d.id, d.resolution, d.last_detected_at) for d in list_drifts(db)]
    with plans.recording() as recorded:
        again = open_db(db_path)  # a connection opened inside the block, which it sees
        match_day(again, DAY, now=RUN)
        again.conn.close()
    [plan] = [plan for sql, plan in recorded.plans.items() if sql.startswith("INSERT INTO m_moved")]
    assert any(line.startswith("SEARCH s USING PRIMARY KEY (id=?)") for line in plan), plan  # m_seen's key
    assert not any(line.startswith("SCAN s") for line in plan), plan
    assert [(d.id, d.resolution, d.last_detected_at) for d in list_drifts(db)] == before and len(before) == 3
