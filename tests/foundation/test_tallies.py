"""The inbox's and the jobs' counts by state (migration 13's `tallies`): kept by triggers in the transaction of
the row that changes them, equal at every step to counting the rows, and seeded from the rows of a database
upgraded to version 13. `partnerkit status` and /metrics read them instead of counting every row."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from partnerkit.crypto import Cipher
from partnerkit.store import inbox, jobs, transaction
from partnerkit.store.db import connect
from partnerkit.store.migrations import discover, migrate
from receiver.envelope import normalise

CIPHER = Cipher(b"tallies-test-voucher-key-0123456")
START = datetime(2025, 3, 14, 9, tzinfo=timezone.utc)


def _counted(db) -> tuple[dict, dict]:
    """What the tallies stand for, counted from the rows."""
    by_state = dict(db.execute("SELECT state, COUNT(*) FROM inbox GROUP BY state").fetchall())
    by_state["duplicates"] = db.execute("SELECT COALESCE(SUM(duplicate_count), 0) FROM inbox").fetchone()[0]
    job_states = dict(db.execute("SELECT state, COUNT(*) FROM jobs WHERE kind = ? GROUP BY state",
                                 (jobs.VOUCHER_FETCH,)).fetchall())
    return by_state, job_states


def _deliver(db, event_id: str, order_id: int | None, when: datetime, event_type: str = "order.delivered") -> str:
    payload = {"event_id": event_id, "event_type": event_type, "created_at": when.isoformat()}
    if order_id is not None:
        payload["data"] = {"id": order_id, "status": "DELIVERED", "quantity": 1, "amount": "5.00"}
    body = json.dumps(payload).encode()
    return inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=when).outcome


def _live(db) -> None:
    """Deliveries (new, duplicate, unknown type, test), fetch jobs done, parked and revived."""
    for n in range(6):
        assert _deliver(db, f"e{n}", 100 + n, START + timedelta(minutes=n)) == "accepted"
    assert _deliver(db, "e1", 101, START + timedelta(hours=1)) == "duplicate"
    assert _deliver(db, "e1", 101, START + timedelta(hours=2)) == "duplicate"
    assert _deliver(db, "odd", 200, START, event_type="order.teleported") == "ignored"
    assert _deliver(db, "ping", None, START, event_type="webhook.test") == "accepted"
    claimed = jobs.claim(db, owner="t", now=START + timedelta(hours=3), lease_until=START + timedelta(hours=4), limit=4)
    with transaction(db) as conn:
        for job, state in zip(claimed, ("done", "done", "dead", "dead")):
            jobs.finish(conn, job, now=START + timedelta(hours=3), state=state)
    jobs.revive_parked(db, now=START + timedelta(days=1), parked_before=START + timedelta(hours=4), limit=1)


def test_the_tallies_follow_every_write_of_the_inbox_and_the_jobs(db):
    _live(db)
    states, job_states = _counted(db)
    assert states == {"processed": 6, "quarantined": 1, "test": 1, "duplicates": 2}
    assert job_states == {"pending": 3, "done": 2, "dead": 1}
    assert inbox.counts(db) == states
    assert jobs.counts_by_state(db) == job_states
    # The prune deletes rows (their duplicates leave the sum with them), and the counts follow.
    deleted = inbox.prune(db, now=START + timedelta(days=30, hours=1, minutes=30), keep=timedelta(days=30))
    assert deleted == 7  # all but e1, seen again at START + 2 h
    assert inbox.counts(db) == _counted(db)[0] == {"processed": 1, "duplicates": 2}


def test_a_rolled_back_write_leaves_the_tallies_as_they_were(db):
    _live(db)
    before = (inbox.counts(db), jobs.counts_by_state(db))
    with pytest.raises(RuntimeError), transaction(db) as conn:
        jobs.queue(conn, 999, now=START, expected_status="DELIVERED", expected_count=1)
        conn.execute("UPDATE inbox SET duplicate_count = duplicate_count + 5")
        raise RuntimeError("the receiver failed before its commit")
    assert (inbox.counts(db), jobs.counts_by_state(db)) == before == _counted(db)


def test_an_upgraded_database_starts_from_its_rows(tmp_path):
    db = connect(tmp_path / "old.db")
    migrate(db, [m for m in discover() if m.version < 13])
    _live(db)
    expected = _counted(db)
    assert "tallies" not in db.table_names()
    migrate(db)
    assert (inbox.counts(db), jobs.counts_by_state(db)) == expected
    _deliver(db, "after-upgrade", 300, START + timedelta(days=2))
    assert inbox.counts(db)["processed"] == expected[0]["processed"] + 1
    db.conn.close()
