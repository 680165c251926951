"""The day's match holds the write lock only for its merge into `drifts`.

It reads the day on one snapshot in a deferred transaction (its temp tables are not the main database), ends
that read, then merges in one short BEGIN IMMEDIATE. These tests act from another connection at chosen points
of a real run: SQLite's statement trace (`set_trace_callback`) on the matcher's connection calls them as a
statement starts, so nothing of partnerkit is replaced. The other connection waits at most 200 ms for a lock.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from itertools import count

import pytest

from partnerkit.errors import StorageError
from partnerkit.store import open_db
from partnerkit.store.drifts import audit_trail, drift_id, get_drift, open_drift, set_resolution
from reconcile import matcher
from reconcile.matcher import match_day
from tests.reconcile.reconcile_helpers import DAY, Ledger, at

SHORT_WAIT_MS = 200


@pytest.fixture(autouse=True, params=["one connection", "ledger side in a thread"])
def ledger_side(request, monkeypatch):
    """Both ways of reading the wallet's side (reconcile.matcher._LedgerSide) keep the lock as short."""
    monkeypatch.setattr(matcher, "PARALLEL_FROM", 50_000 if request.param == "one connection" else 0)


@pytest.fixture
def other(db_path):
    """Another process's handle on the same file, waiting at most SHORT_WAIT_MS for the write lock."""
    handle = open_db(db_path, busy_timeout_ms=SHORT_WAIT_MS)
    yield handle
    handle.conn.close()


def when_statement(db, starts_with: str, action):
    """Call `action()` once, as the matcher's connection starts the first statement beginning `starts_with`;
    returns the list that gets its outcome (its value, or the exception it raised)."""
    outcome: list = []

    def trace(statement: str) -> None:
        if not outcome and statement.lstrip().startswith(starts_with):
            try:
                outcome.append(action())
            except Exception as exc:  # recorded for the test to assert: a trace callback's exception is swallowed
                outcome.append(exc)

    db.conn.set_trace_callback(trace)
    return outcome


def test_another_connection_commits_while_the_day_is_read(db, ledger, other):
    """Before, the whole match ran in BEGIN IMMEDIATE: this write waited its busy timeout and failed."""
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    late = Ledger(other, ids=count(5000))
    outcome = when_statement(db, "INSERT INTO m_candidate SELECT 'missing_debit'", lambda: late.recharge())
    result = match_day(db, DAY, now=at(23))
    db.conn.set_trace_callback(None)
    assert len(outcome) == 1 and isinstance(outcome[0], dict), outcome  # committed, not "database is locked"
    # The run judged its snapshot: the recharge committed meanwhile is the next run's (no debit: missing_debit).
    assert result.recharges_total == 1 and result.detected_ids == []
    again = match_day(db, DAY, now=at(23, 30))
    assert again.recharges_total == 2
    assert again.detected_ids == [drift_id("missing_debit", "recharge", outcome[0]["reference_number"])]


def test_no_commit_lands_between_the_snapshots_of_the_two_connections(db, ledger, other):
    """The wallet's side may read on a second connection: both start their read while the write lock is held,
    so they read the same data (a commit in between would split the day across two states)."""
    rc = ledger.recharge()
    ledger.debit_recharge(rc)
    late = Ledger(other, ids=count(5000))
    outcome = when_statement(db, "SELECT COUNT(*) FROM main.sqlite_master", lambda: late.debit_recharge(rc, minute=5))
    result = match_day(db, DAY, now=at(23))
    db.conn.set_trace_callback(None)
    if matcher.PARALLEL_FROM == 0:  # two connections: the snapshots start under the write lock
        assert len(outcome) == 1 and isinstance(outcome[0], StorageError), outcome
        assert "database is locked" in str(outcome[0])
        assert result.detected_ids == [] and result.transactions_total == 1
    else:  # one connection: nothing to line up, nothing held; its snapshot begins with that statement, after the write
        assert len(outcome) == 1 and isinstance(outcome[0], str), outcome
        assert result.transactions_total == 2
        assert result.detected_ids == [drift_id("duplicate_debit", "recharge", rc["reference_number"])]


def test_a_drift_recorded_or_decided_between_the_read_and_the_merge_is_left_as_it_is(db, ledger, other):
    """The merge's candidates are older than what the poller and finance write meanwhile: a stuck_processing the
    poller records is not auto-resolved as "no longer detected", nor finance's escalation of a drift the read no
    longer found; the next run judges both."""
    stuck = ledger.recharge("PROCESSING", hour=10)
    ledger.debit_recharge(stuck)
    failed = ledger.recharge("FAILED", hour=9)
    ledger.debit_recharge(failed, hour=9)
    match_day(db, DAY, now=at(10, 20))
    refund = get_drift(db, drift_id("missing_refund", "recharge", failed["reference_number"]))
    assert refund.resolution == "pending"
    ledger.credit_recharge(failed, hour=10, minute=22)  # the refund arrives: the next run no longer finds it

    def meanwhile() -> str:
        set_resolution(other, refund.id, "escalated", note="ticket 7, asked for the refund", by="asha", at=at(10, 40))
        return open_drift(other, kind="stuck_processing", subject="recharge", reference=stuck["reference_number"],
                          expected=Decimal("98.00"), actual=None, currency="INR", detected_at=at(10, 41))

    outcome = when_statement(db, "BEGIN IMMEDIATE", meanwhile)  # the merge's, its read already ended
    result = match_day(db, DAY, now=at(10, 25))  # its snapshot: the refund received, the recharge not stuck yet
    db.conn.set_trace_callback(None)
    assert len(outcome) == 1 and isinstance(outcome[0], str), outcome
    assert result.changes == {"new": 0, "reopened": 0, "changed": 0, "restated": 0, "auto_resolved": 0, "newer": 2}
    poller = get_drift(db, outcome[0])
    assert (poller.resolution, poller.last_detected_at) == ("pending", f"{DAY.isoformat()}T10:41:00Z")
    assert [a["action"] for a in audit_trail(db, poller.id)] == ["detected"]
    escalated = get_drift(db, refund.id)
    assert (escalated.resolution, escalated.resolution_note, escalated.resolution_by) == (
        "escalated", "ticket 7, asked for the refund", "asha")
    assert [a["action"] for a in audit_trail(db, refund.id)] == ["detected", "escalated"]
    # The next run reads them as they are now: the refund received resolves the escalated drift, saying so;
    # the recharge, stuck on its clock too, is found again and stays as the poller recorded it, its debit (which
    # the poller does not measure) now shown: a restatement, not a new fact.
    later = match_day(db, DAY, now=at(10, 45))
    assert later.changes == {"new": 0, "reopened": 0, "changed": 0, "restated": 1, "auto_resolved": 1, "newer": 0}
    assert get_drift(db, refund.id).resolution == "resolved"
    assert get_drift(db, refund.id).resolution_note.startswith(f"no longer detected on {DAY.isoformat()} run: credit ")
    assert (get_drift(db, poller.id).resolution, get_drift(db, poller.id).actual) == ("pending", Decimal("98.00"))
    assert [a["action"] for a in audit_trail(db, poller.id)] == ["detected", "restated"]


def test_a_decision_made_before_the_read_is_merged_as_before(db, ledger):
    """Only what changed after the snapshot is left alone: an escalation made before the run is auto-resolved
    when the run no longer finds the drift, as it always was."""
    failed = ledger.recharge("FAILED", hour=9)
    ledger.debit_recharge(failed, hour=9)
    match_day(db, DAY, now=at(10, 20))
    ident = drift_id("missing_refund", "recharge", failed["reference_number"])
    set_resolution(db, ident, "escalated", note="ticket 7", by="asha", at=at(10, 21))
    ledger.credit_recharge(failed, hour=10, minute=22)
    result = match_day(db, DAY, now=at(10, 25) + timedelta(minutes=1))
    assert result.changes["auto_resolved"] == 1 and result.changes["newer"] == 0
    assert get_drift(db, ident).resolution == "resolved"
