"""WAL checkpoints run off the request path (the housekeeping thread); the acknowledgements are constant bodies."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from freezegun import freeze_time

from partnerkit.store import open_db
from receiver.refusals import RefusalCounts
from receiver.state import WAL_BACKSTOP_PAGES, FailureLog, Housekeeper
from tests.receiver.conftest import envelope, post


def test_request_connection_checkpoints_only_as_a_backstop(app, client):
    assert post(client, envelope("evt_ck_1")).status_code == 200
    rx = app.extensions["partnerkit_receiver"]
    assert rx.db().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_BACKSTOP_PAGES
    assert rx.writer().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_BACKSTOP_PAGES
    assert rx.db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # Set once when a connection opens (store.db.connect), never per request: the next delivery runs no PRAGMA.
    ran: list[str] = []
    for db in (rx.db(), rx.writer()):
        db.conn.set_trace_callback(ran.append)
    assert post(client, envelope("evt_ck_2", order_id=2)).status_code == 200
    for db in (rx.db(), rx.writer()):
        db.conn.set_trace_callback(None)
    assert any(s.startswith("INSERT") for s in ran) and not [s for s in ran if "PRAGMA" in s.upper()], ran
    housekeeper = rx.housekeeper
    assert housekeeper is not None and housekeeper.alive()
    rx.close()
    assert not housekeeper.alive()


def test_background_thread_backfills_the_wal(app, client, config):
    rx = app.extensions["partnerkit_receiver"]
    rx.db()
    rx.close()  # replace the default thread with a fast one, to observe it
    housekeeper = Housekeeper(config.db_path, interval_s=0.01).start()
    try:
        for i in range(50):
            assert post(client, envelope(f"evt_wal_{i}", order_id=1000 + i)).status_code == 200
        deadline = time.monotonic() + 30  # a thread of a busy machine; the bound only ends a broken run
        while time.monotonic() < deadline:
            last = housekeeper.last
            if last is not None and last[1] > 0 and last[0] == 0 and last[1] == last[2]:
                break
            time.sleep(0.01)
        busy, frames, checkpointed = housekeeper.last
        assert busy == 0 and frames > 0 and checkpointed == frames  # every committed frame is in the db file
    finally:
        housekeeper.stop()
    assert not housekeeper.alive()


def test_checkpoint_thread_survives_an_error(tmp_path):
    housekeeper = Housekeeper(tmp_path / "missing" / "dir" / "x.db", interval_s=0.01)
    housekeeper.db_path = tmp_path  # a directory: every checkpoint attempt fails
    housekeeper.start()
    try:
        _wait_for(lambda: housekeeper.checkpoints.passes >= 5)  # five failed passes, not a guess at their time
        assert housekeeper.alive()
    finally:
        housekeeper.stop()


def test_acknowledgements_are_constant_json(client, db):
    body = envelope("evt_const")
    first, second = post(client, body), post(client, body)
    assert first.data == b'{"status":"accepted"}\n' and first.mimetype == "application/json"
    assert second.data == b'{"status":"duplicate"}\n' and second.get_json() == {"status": "duplicate"}
    garbage = post(client, b"not json")
    assert garbage.get_json() == {"status": "ignored"}


def test_metrics_count_through_cached_children(app, client):
    post(client, envelope("evt_m1"))
    post(client, envelope("evt_m1"))
    client.post("/webhooks/partner", data=b"{}", headers={"X-Timestamp": "1"})
    text = client.get("/metrics").get_data(as_text=True)
    assert 'partnerkit_webhook_events_total{outcome="accepted"} 1.0' in text
    assert 'partnerkit_webhook_events_total{outcome="duplicate"} 1.0' in text
    assert 'partnerkit_webhook_rejected_total{reason="missing_signature"} 1.0' in text
    assert "partnerkit_webhook_ack_seconds_count 2.0" in text


def _wait_for(predicate, timeout: float = 30.0) -> None:  # threads of a busy machine: only a broken run takes it
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _checkpoint_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "receiver.state"]


def test_a_failing_checkpoint_is_logged_once_then_when_it_changes_or_clears(tmp_path, caplog):
    # A read-only database failed every 0.2 s pass, and each one was a WARNING: 860,000 lines a day.
    caplog.set_level("DEBUG", logger="receiver.state")
    (tmp_path / "a-directory").mkdir()
    housekeeper = Housekeeper(tmp_path / "a-directory", interval_s=0.005)  # cannot be opened as a database
    housekeeper.start()
    try:
        _wait_for(lambda: housekeeper.checkpoints.passes >= 20)
        assert _checkpoint_lines(caplog) == [("WARNING", "WAL checkpoint failed")]
        first = next(r for r in caplog.records if r.name == "receiver.state")
        assert "it is a directory" in first.error and first.failed_passes == 1

        (tmp_path / "a-file").write_text("x")
        housekeeper.db_path = tmp_path / "a-file" / "x.db"  # another error: said once more
        _wait_for(lambda: len(_checkpoint_lines(caplog)) == 2)
        passes = housekeeper.checkpoints.passes
        _wait_for(lambda: housekeeper.checkpoints.passes >= passes + 20)
        assert _checkpoint_lines(caplog) == [("WARNING", "WAL checkpoint failed")] * 2

        housekeeper.db_path = tmp_path / "x.db"  # a database it can open: works again, said once
        _wait_for(lambda: housekeeper.checkpoints.error is None)
        _wait_for(lambda: housekeeper.last is not None)
        time.sleep(0.1)  # more good passes: nothing more is logged
    finally:
        housekeeper.stop()
    assert _checkpoint_lines(caplog) == [("WARNING", "WAL checkpoint failed")] * 2 + [("INFO", "WAL checkpoint works again")]
    assert caplog.records[-1].failed_passes >= 40


def test_a_checkpoint_failing_for_long_is_logged_again_after_the_back_off(tmp_path, caplog):
    caplog.set_level("DEBUG", logger="receiver.state")
    housekeeper = Housekeeper(tmp_path, interval_s=0.005, failure_repeat_s=0.2).start()
    try:
        _wait_for(lambda: len(_checkpoint_lines(caplog)) >= 3)
    finally:
        housekeeper.stop()
    lines = _checkpoint_lines(caplog)
    assert lines[:3] == [("WARNING", "WAL checkpoint failed"), ("WARNING", "WAL checkpoint still failing"),
                         ("WARNING", "WAL checkpoint still failing")]
    # How many passes fail between two lines depends on how often a busy machine runs the thread: counted with
    # a frozen clock below.


def test_a_failure_of_every_pass_is_logged_once_per_repeat_interval(caplog):
    caplog.set_level("DEBUG", logger="receiver.state")
    with freeze_time("2026-11-22 10:00:00") as clock:
        checkpoints = FailureLog("WAL checkpoint", repeat_s=0.2)
        for _ in range(100):  # a pass every 6 ms, failing the same way: 0.6 s
            checkpoints.failed("disk I/O error")
            clock.tick(0.006)
    assert _checkpoint_lines(caplog) == [("WARNING", "WAL checkpoint failed")] + [
        ("WARNING", "WAL checkpoint still failing")] * 2
    assert [r.failed_passes for r in caplog.records] == [1, 35, 69]  # far fewer lines than failed passes
    assert checkpoints.passes == 100


class _FailingFilter(logging.Filter):
    """A logging filter with a bug: it raises on the checkpoint's failure lines (logging lets that through)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("WAL checkpoint"):
            raise RuntimeError("a logging filter's bug")
        return True


def test_the_thread_outlives_an_exception_no_chore_expected_and_still_saves_the_tally_at_exit(tmp_path, caplog):
    # An exception out of a pass ended the thread: the worker then checkpointed and saved no refusal count again,
    # not even at its exit. The tests met it as freezegun's IndexError, raised in the thread by a freeze_time stop.
    caplog.set_level("DEBUG", logger="receiver.state")
    good = tmp_path / "pk.db"
    open_db(good).conn.close()
    counts = RefusalCounts()
    for second in range(3):
        counts.note("signature_mismatch", datetime(2026, 11, 22, 10, 0, second, tzinfo=timezone.utc))
    housekeeper = Housekeeper(tmp_path, refusals=counts, interval_s=0.005, save_every_s=3600.0)  # a directory
    state_log = logging.getLogger("receiver.state")
    broken = _FailingFilter()
    state_log.addFilter(broken)
    housekeeper.start()
    try:
        _wait_for(lambda: housekeeper.checkpoints.passes >= 5)  # five passes, each ended by the filter's bug
        assert housekeeper.alive()
        state_log.removeFilter(broken)
        housekeeper.db_path = good  # the next passes work again
        _wait_for(lambda: housekeeper.last is not None)
    finally:
        state_log.removeFilter(broken)
        housekeeper.stop()
    assert not housekeeper.alive()
    assert (counts.pending(), counts.saves) == (0, 1), "saved as the thread ended"
    unexpected = [r for r in caplog.records if r.getMessage().startswith("housekeeping pass")]
    assert [(r.levelname, r.getMessage()) for r in unexpected] == [("WARNING", "housekeeping pass failed"),
                                                                  ("INFO", "housekeeping pass works again")]
    assert unexpected[0].error == "RuntimeError: a logging filter's bug" and unexpected[0].exc_info is not None
