"""Inbox retention: rows last seen more than PARTNERKIT_INBOX_RETENTION_DAYS ago are pruned, in batches,
by the worker's `prune-events` job and by `partnerkit events prune`; what the events did is kept."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import ConfigError, load_config
from partnerkit.retention import prune_events
from partnerkit.store import inbox
from reconcile.worker_jobs import JOBS
from tests.receiver.conftest import envelope, post

NOW = datetime(2025, 6, 30, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def clock():
    """The clock of the tests with an app: frozen before the app's housekeeping thread can start and let go after
    it stopped, moved in between. Entering and leaving freeze_time while the thread runs races it: freezegun's stop
    is not atomic (tests/receiver/test_refusals.py)."""
    with freeze_time(NOW) as frozen:
        yield frozen


@pytest.fixture
def app(clock, app):
    """conftest's app, made on the frozen clock (and so closed before the clock is let go)."""
    return app


def _deliver(clock, client, when: datetime, event_id: str, order_id: int = 101) -> str:
    clock.move_to(when)
    return post(client, envelope(event_id=event_id, order_id=order_id)).get_json()["status"]


def _kept(db) -> list[str]:
    return [row[0] for row in db.execute("SELECT dedup_key FROM inbox ORDER BY id")]


def test_the_job_prunes_what_was_last_seen_before_the_retention_and_keeps_what_the_events_did(clock, client, db,
                                                                                               config):
    _deliver(clock, client, NOW - timedelta(days=120), "evt_old", order_id=101)
    _deliver(clock, client, NOW - timedelta(days=100), "evt_redelivered", order_id=102)
    assert _deliver(clock, client, NOW - timedelta(days=20), "evt_redelivered", order_id=102) == "duplicate"
    _deliver(clock, client, NOW - timedelta(days=89, hours=23), "evt_inside", order_id=103)
    _deliver(clock, client, NOW - timedelta(days=1), "evt_new", order_id=104)

    assert prune_events(config, db, now=NOW) == {"events_deleted": 1, "refusal_counts_deleted": 0}  # 90 days by default
    # A provider's manual retry 20 days ago renewed the dedup key: it is kept as long again.
    assert _kept(db) == ["evt_redelivered", "evt_inside", "evt_new"]
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 4, "orders are never pruned"
    assert db.execute("SELECT COUNT(*) FROM jobs WHERE order_id = 101").fetchone()[0] == 1, "nor their jobs"
    assert prune_events(config, db, now=NOW) == {"events_deleted": 0, "refusal_counts_deleted": 0}, "a second run has nothing left to do"


def test_the_retention_setting_decides_and_a_redelivery_inside_it_stays_a_duplicate(clock, client, db, config):
    for days, event_id in ((45, "evt_45"), (35, "evt_35"), (25, "evt_25")):
        _deliver(clock, client, NOW - timedelta(days=days), event_id, order_id=100 + days)
    assert prune_events(replace(config, inbox_retention_days=40), db, now=NOW)["events_deleted"] == 1
    assert _kept(db) == ["evt_35", "evt_25"]
    assert _deliver(clock, client, NOW, "evt_35", order_id=135) == "duplicate"


def test_prune_never_goes_under_thirty_days_whatever_it_is_asked(clock, client, db):
    _deliver(clock, client, NOW - timedelta(days=29), "evt_29")
    assert inbox.prune(db, now=NOW, keep=timedelta(days=1)) == 0
    assert _kept(db) == ["evt_29"]


def test_prune_walks_in_batches_and_stops_at_the_first_batch_received_after_the_cutoff(clock, client, db):
    for n in range(7):
        _deliver(clock, client, NOW - timedelta(days=60, hours=n), f"evt_old_{n}", order_id=200 + n)
    for n in range(5):
        _deliver(clock, client, NOW - timedelta(days=5, hours=n), f"evt_new_{n}", order_id=300 + n)
    statements = []
    db.conn.set_trace_callback(statements.append)
    try:
        deleted = inbox.prune(db, now=NOW, batch=3)
    finally:
        db.conn.set_trace_callback(None)
    assert deleted == 7
    assert _kept(db) == [f"evt_new_{n}" for n in range(5)]
    # Batches of 3: rows 1-3, 4-6, 7-9 (the 7th old one beside two new), then 10-12, all new: the end.
    # (Each DELETE is traced once more for every trigger run it causes, under its own text with its bounds:
    # migration 13's tallies. Distinct texts are the batches.)
    assert len({s for s in statements if s.startswith("DELETE FROM inbox")}) == 4
    assert sum(s == "COMMIT" for s in statements) == 4, "each batch commits on its own"


def test_the_worker_runs_it_every_six_hours_without_the_api():
    spec = next(s for s in JOBS if s.id == "prune-events")
    assert spec.target == "partnerkit.retention:prune_events" and spec.every_s == 6 * 3600
    assert spec.is_idle({"events_deleted": 0}) and not spec.is_idle({"events_deleted": 3})


def test_events_prune_uses_the_setting_unless_told(clock, client, db, config, monkeypatch):
    for days in (70, 50, 31):
        _deliver(clock, client, NOW - timedelta(days=days), f"evt_{days}", order_id=400 + days)
    monkeypatch.setenv("PARTNERKIT_DB", str(config.db_path))
    monkeypatch.setenv("PARTNERKIT_INBOX_RETENTION_DAYS", "60")
    runner = CliRunner()
    clock.move_to(NOW)
    by_setting = runner.invoke(cli, ["events", "prune"])
    told = runner.invoke(cli, ["events", "prune", "--older-than-days", "40"])
    refused = runner.invoke(cli, ["events", "prune", "--older-than-days", "29"])
    assert by_setting.exit_code == 0 and "deleted 1 inbox rows last seen more than 60 days ago" in by_setting.stderr
    assert told.exit_code == 0 and "deleted 1 inbox rows last seen more than 40 days ago" in told.stderr
    assert refused.exit_code == 2 and "29 is not in the range 30<=x<=3650" in refused.output
    assert _kept(db) == ["evt_31"]


def test_a_long_prune_says_how_far_it_walked(clock, client, db, config, monkeypatch):
    """A first prune of a million rows ran 89 s without a line of output (session 15's concurrency review)."""
    from partnerkit.cli import output

    for days in (70, 50, 31):
        _deliver(clock, client, NOW - timedelta(days=days), f"evt_{days}", order_id=400 + days)
    walked = []
    clock.move_to(NOW)
    assert inbox.prune(db, now=NOW, keep=timedelta(days=40), batch=1,
                       progress=lambda entity, n: walked.append((entity, n))) == 2
    assert walked == [("inbox rows (1 deleted)", 1), ("inbox rows (2 deleted)", 2)], walked
    monkeypatch.setattr(output, "PROGRESS_EVERY_S", 0.0)
    pruned = CliRunner().invoke(cli, ["events", "prune", "--older-than-days", "30"],
                                env={"PARTNERKIT_DB": str(config.db_path)})
    assert pruned.exit_code == 0, pruned.output
    assert pruned.stderr.splitlines() == ["events prune: inbox rows (1 deleted), 1 read so far",
                                          "deleted 1 inbox rows last seen more than 30 days ago"]


@pytest.mark.parametrize("raw, message", [
    ("29", "PARTNERKIT_INBOX_RETENTION_DAYS must be between 30 and 3650, got 29"),
    ("ninety", "PARTNERKIT_INBOX_RETENTION_DAYS must be a whole number, got 'ninety'"),
])
def test_a_retention_under_thirty_days_or_not_a_number_is_refused(raw, message):
    with pytest.raises(ConfigError, match=message):
        load_config({"PARTNERKIT_INBOX_RETENTION_DAYS": raw})
    assert load_config({"PARTNERKIT_INBOX_RETENTION_DAYS": "30"}).inbox_retention_days == 30
    assert load_config({}).inbox_retention_days == 90
