"""Refused deliveries reach `partnerkit status`: counted per minute and reason in each worker, saved by
its housekeeping thread every few seconds and at exit, never once per request (receiver.refusals)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.errors import StorageError
from partnerkit.retention import prune_events
from partnerkit.status import collect
from partnerkit.store import open_db
from partnerkit.store.db import connect
from receiver.refusals import RefusalCounts
from receiver.signature import sign
from receiver.state import Housekeeper
from tests.receiver.conftest import TOKEN, VOUCHER_KEY, envelope, post
from tests.receiver.servers import ServedReceiver
from tests.reliability.storage_faults import held_write_lock, remount, tiny_filesystem

T = datetime(2026, 11, 22, 10, 0, 5, tzinfo=timezone.utc)
PATH = "/webhooks/partner"


def _forged(client, *, timestamp: int | None = None):
    """A delivery signed with a token the receiver does not accept (a rotation done wrong)."""
    body = envelope("evt_forged")
    ts = int(time.time()) if timestamp is None else timestamp
    return client.post(PATH, data=body, headers={"X-Timestamp": str(ts), "X-Signature": sign("whsec_not_ours_at_all",
                                                                                               ts, body)})


def _unsigned(client):
    return client.post(PATH, data=b"{}", headers={"X-Timestamp": str(int(time.time()))})


def _rows(db) -> list[tuple]:
    return db.execute("SELECT minute, reason, refused, first_at, last_at FROM webhook_refusals "
                      "ORDER BY minute, reason").fetchall()


def _processing(event_id: str) -> bytes:
    """A signed event that queues no voucher fetch (so no other attention line appears)."""
    return envelope(event_id, event_type="order.processing", status="PROCESSING")


@pytest.fixture
def clock():
    """The clock of the tests with an app, frozen at T before the app's housekeeping thread can start and let go
    only after it stopped; the tests move it (`clock.move_to`), never enter another freeze_time. freezegun's stop
    is not atomic: the thread, reading time.monotonic while a freeze_time ended, got an IndexError from inside
    freezegun, and the refusal counts it was to save never reached the database (the test saw none)."""
    with freeze_time(T) as frozen:
        yield frozen


@pytest.fixture
def app(clock, app):
    """conftest's app, made on the frozen clock (and so closed before the clock is let go)."""
    return app


def test_a_burst_of_refusals_is_one_write_and_status_names_it_until_a_delivery_is_accepted(clock, app, client, db,
                                                                                         config):
    rx = app.extensions["partnerkit_receiver"]
    rx.refusals_save_s = 3600.0  # only the exit saves: the count of writes cannot depend on this machine's speed
    for _ in range(300):
        assert _forged(client).status_code == 401
    for _ in range(200):
        assert _unsigned(client).status_code == 401
    assert rx.refusals.pending() == 500
    assert _rows(db) == [], "a refused request writes nothing"
    rx.close()  # what a worker's exit does
    assert (rx.refusals.pending(), rx.refusals.saves) == (0, 1), "500 refusals, one transaction"
    assert _rows(db) == [("2026-11-22T10:00Z", "missing_signature", 200, "2026-11-22T10:00:05.000000Z",
                          "2026-11-22T10:00:05.000000Z"),
                         ("2026-11-22T10:00Z", "signature_mismatch", 300, "2026-11-22T10:00:05.000000Z",
                          "2026-11-22T10:00:05.000000Z")]

    clock.move_to(T + timedelta(minutes=20))
    status = collect(config, db)
    checked = CliRunner().invoke(cli, ["status", "--check", "--format", "json"], env=config_as_env(config))
    assert status["webhooks_refused_last_hour"] == {"signature_mismatch": 300, "missing_signature": 200}
    assert status["webhooks_refused_first_at"] == status["webhooks_refused_last_at"] == T
    [line] = status["attention"]
    assert line.startswith("500 webhook deliveries refused in the last hour (signature_mismatch 300, "
                           "missing_signature 200) and none accepted since the first of them at "
                           "2026-11-22T10:00:05Z (none was ever accepted): ")
    assert "`partnerkit webhooks list`" in line and "`partnerkit webhooks token set ID`" in line
    assert checked.exit_code == 1, "--check fails on it as on any attention line"
    assert json.loads(checked.stdout)["webhooks_refused_last_hour"] == {"signature_mismatch": 300,
                                                                        "missing_signature": 200}

    clock.move_to(T + timedelta(minutes=21))
    assert post(client, _processing("evt_after_the_fix")).get_json() == {"status": "accepted"}
    cleared = collect(config, db)
    checked = CliRunner().invoke(cli, ["status", "--check"], env=config_as_env(config))
    assert cleared["attention"] == [], "an accepted delivery after the refusals clears the line"
    assert cleared["webhooks_refused_last_hour"] == status["webhooks_refused_last_hour"], "the counts stay"
    assert checked.exit_code == 0, checked.output


@pytest.mark.parametrize("accepted_before_s, refused_again_s, attention", [
    (None, None, True),  # never one accepted: every delivery refused
    (-600, None, True),  # accepted before the refusals began
    (+60, None, False),  # accepted after the first refusal: not every delivery is refused
    (+60, +120, False),  # ... even if later ones are refused again: the first refusal of the hour decides
])
def test_the_line_stands_only_while_none_was_accepted_since_the_first_refusal(clock, app, client, db, config,
                                                                             accepted_before_s, refused_again_s,
                                                                             attention):
    rx = app.extensions["partnerkit_receiver"]
    if accepted_before_s is not None and accepted_before_s < 0:
        clock.move_to(T + timedelta(seconds=accepted_before_s))
        assert post(client, _processing("evt_before")).status_code == 200
    clock.move_to(T)
    assert _forged(client).status_code == 401
    if accepted_before_s is not None and accepted_before_s > 0:
        clock.move_to(T + timedelta(seconds=accepted_before_s))
        assert post(client, _processing("evt_between")).status_code == 200
    if refused_again_s is not None:
        clock.move_to(T + timedelta(seconds=refused_again_s))
        assert _unsigned(client).status_code == 401
    rx.close()
    clock.move_to(T + timedelta(minutes=10))
    status = collect(config, db)
    assert bool(status["attention"]) is attention, status["attention"]


def test_a_duplicate_answered_after_the_refusals_clears_the_line_too(clock, app, client, db, config):
    """An event stored before the refusals, delivered again once the token is fixed (the provider's retry
    of an event it never got a 2xx for, or a manual retry): the provider got through, so the line clears,
    though no new inbox row was written."""
    rx = app.extensions["partnerkit_receiver"]
    clock.move_to(T - timedelta(minutes=5))
    assert post(client, _processing("evt_first")).get_json() == {"status": "accepted"}
    clock.move_to(T)
    assert _forged(client).status_code == 401
    rx.close()
    clock.move_to(T + timedelta(minutes=1))
    assert collect(config, db)["attention"], "refused since the last delivery stored"
    assert post(client, _processing("evt_first")).get_json() == {"status": "duplicate"}
    status = collect(config, db)
    assert status["attention"] == [], status["attention"]
    assert status["last_duplicate_at"] == "2026-11-22T10:01:05.000000Z"
    assert status["last_webhook_at"] == "2026-11-22T09:55:05.000000Z", "the newest stored delivery stays the first"


@pytest.mark.parametrize("unsigned, forged, attention", [
    (4, 0, False),  # a scanner's few requests without signature headers: not the provider
    (5, 0, True),  # as many as the provider's attempts at one delivery: a proxy dropping its headers
    (0, 1, True),  # one well-formed signed request refused counts at once
])
def test_requests_without_signature_headers_need_a_delivery_s_attempts_before_the_line(clock, app, client, db,
                                                                                      config, unsigned, forged,
                                                                                      attention):
    rx = app.extensions["partnerkit_receiver"]
    for _ in range(unsigned):
        assert _unsigned(client).status_code == 401
    for _ in range(forged):
        assert _forged(client).status_code == 401
    rx.close()
    clock.move_to(T + timedelta(minutes=10))
    status = collect(config, db)
    assert sum(status["webhooks_refused_last_hour"].values()) == unsigned + forged, "every refusal is counted"
    assert bool(status["attention"]) is attention, status["attention"]


def test_refusals_older_than_the_hour_leave_status_and_a_week_on_the_database(clock, app, client, db, config):
    rx = app.extensions["partnerkit_receiver"]
    assert _forged(client, timestamp=int(T.timestamp()) - 301).get_json()["reason"] == "timestamp_out_of_tolerance"
    rx.close()
    clock.move_to(T + timedelta(minutes=50))
    line = collect(config, db)["attention"][0]
    assert "(timestamp_out_of_tolerance 1)" in line and "check the clock" in line
    clock.move_to(T + timedelta(minutes=62))
    later = collect(config, db)
    assert (later["webhooks_refused_last_hour"], later["webhooks_refused_first_at"], later["attention"]) == ({}, None, [])

    assert prune_events(config, db, now=T + timedelta(days=6))["refusal_counts_deleted"] == 0
    assert _rows(db) != []
    clock.move_to(T + timedelta(days=7, minutes=1))  # `events prune`, for cron users without a worker, too
    pruned = CliRunner().invoke(cli, ["events", "prune"], env=config_as_env(config))
    assert pruned.exit_code == 0
    assert "deleted 1 per-minute counts of refused deliveries older than 7 days" in pruned.stderr
    assert _rows(db) == []
    assert prune_events(config, db, now=T + timedelta(days=8))["refusal_counts_deleted"] == 0


def test_a_save_that_meets_a_locked_database_keeps_every_count_for_the_next(tmp_path):
    path = tmp_path / "pk.db"
    open_db(path).conn.close()
    counts = RefusalCounts()
    for second in range(3):
        counts.note("signature_mismatch", T + timedelta(seconds=second))
    store = connect(path, busy_timeout_ms=50)
    try:
        with held_write_lock(path):
            with pytest.raises(StorageError, match="locked"):
                counts.save(store)
            counts.note("signature_mismatch", T + timedelta(seconds=30))  # noted while the save failed
            counts.note("missing_signature", T + timedelta(seconds=61))
        assert (counts.pending(), counts.saves) == (5, 0)
        assert counts.save(store) == 5
    finally:
        store.conn.close()
    assert counts.pending() == 0 and counts.saves == 1
    db = open_db(path)
    try:
        assert _rows(db) == [("2026-11-22T10:00Z", "signature_mismatch", 4, "2026-11-22T10:00:05.000000Z",
                              "2026-11-22T10:00:35.000000Z"),
                             ("2026-11-22T10:01Z", "missing_signature", 1, "2026-11-22T10:01:06.000000Z",
                              "2026-11-22T10:01:06.000000Z")]
    finally:
        db.conn.close()


def _wait_for(predicate, timeout: float = 30.0) -> None:  # threads of a busy machine: only a broken run takes it
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_read_only_database_during_saves_loses_no_count_and_is_logged_once(tmp_path, caplog):
    caplog.set_level("DEBUG", logger="receiver.state")
    disk = tmp_path / "disk"
    with tiny_filesystem(disk, "8m"):
        path = disk / "pk.db"
        open_db(path).conn.close()
        remount(disk, read_only=True)  # before any connection: a file open for writing would keep it busy
        counts = RefusalCounts()
        for n in range(10):
            counts.note("signature_mismatch", T + timedelta(seconds=n))
        housekeeper = Housekeeper(path, refusals=counts, interval_s=0.005, save_every_s=0.02).start()
        try:
            saves = housekeeper.refusal_saves
            _wait_for(lambda: saves.passes >= 10)
            counts.note("signature_mismatch", T + timedelta(seconds=20))
            _wait_for(lambda: saves.passes >= 20)
            assert counts.pending() == 11, "every failed save gave its tally back"
            remount(disk, read_only=False)
            _wait_for(lambda: counts.pending() == 0)
        finally:
            housekeeper.stop()
        saved = _read(path)
    assert saved == [("2026-11-22T10:00Z", "signature_mismatch", 11)]
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "refused deliveries" in r.getMessage()]
    assert lines == [("WARNING", "saving the refused deliveries' counts failed"),
                     ("INFO", "saving the refused deliveries' counts works again")], "never once per save"
    failed = next(r for r in caplog.records if r.getMessage().endswith("counts failed"))
    assert failed.refusals_kept == 10 and "cannot be written" in failed.error


def _read(path) -> list[tuple]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT minute, reason, refused FROM webhook_refusals").fetchall()
    finally:
        conn.close()


def test_gunicorn_workers_save_their_refusals_while_running_and_at_exit(tmp_path):
    env = {"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
           "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY}
    with ServedReceiver(env, tmp_path / "serve.log", workers=2) as served:
        url = served.base_url + "/webhooks/partner"
        session = requests.Session()
        stale = str(int(time.time()) - 3600)
        body = envelope("evt_refused")
        for n in range(120):
            headers = ({"X-Timestamp": stale, "X-Signature": sign(TOKEN, stale, body)} if n % 3 == 0
                       else {"X-Timestamp": str(int(time.time())), "X-Signature": sign("whsec_wrong_one", 1, body)})
            assert requests.post(url, data=body, headers=headers, timeout=5).status_code == 401
        db = open_db(tmp_path / "pk.db")
        # Saved by each worker's housekeeping thread every 5 s, while it runs (the receiver is stopped only below):
        # the bound is for a busy machine.
        _wait_for(lambda: db.execute("SELECT COALESCE(SUM(refused), 0) FROM webhook_refusals").fetchone()[0] == 120,
                  timeout=60)
        for _ in range(30):  # then more, and the receiver stopped at once: its workers save them as they exit
            session.post(url, data=b"{}", timeout=5)
    try:
        by_reason = dict(db.execute("SELECT reason, SUM(refused) FROM webhook_refusals GROUP BY reason").fetchall())
        rows = db.execute("SELECT COUNT(*) FROM webhook_refusals").fetchone()[0]
    finally:
        db.conn.close()
    assert by_reason == {"timestamp_out_of_tolerance": 40, "signature_mismatch": 80, "missing_timestamp": 30}
    assert rows <= 3 * 2, "a row per minute and reason, whatever the number of requests"
    assert "refused deliveries' counts" not in served.log()


def test_deliveries_of_a_webhook_whose_token_nobody_has_say_to_register_again(tmp_path):
    """After a restore, webhook 9 (registered after the backup) has no token here, and the provider showed it
    only once: `webhooks token set` cannot help, the hint names the way back."""
    from partnerkit.config import Config, WebhookToken
    from receiver.app import create_app
    from tests.receiver.conftest import signed_headers

    config = Config(db_path=tmp_path / "pk.db", webhook_tokens=(WebhookToken(TOKEN, "3"),), voucher_key=VOUCHER_KEY,
                    log_level="WARNING")
    app = create_app(config)
    try:
        body = _processing("evt_for_webhook_9")
        refused = app.test_client().post(PATH, data=body, headers=signed_headers(body, X_Webhook_ID="9"))
        assert refused.status_code == 401
    finally:
        app.extensions["partnerkit_receiver"].close()  # saves the refusal
    db = open_db(config.db_path)
    try:
        [line] = collect(config, db)["attention"]
    finally:
        db.conn.close()
    assert "(no_token 1)" in line
    assert ("a token nobody has (registered after the backup a restore put back: the provider shows it only once) "
            "means `partnerkit webhooks register` again, then `partnerkit webhooks delete` the old one") in line


def test_deliveries_of_a_webhook_without_a_saved_token_are_named_even_while_others_are_accepted(clock, app, client,
                                                                                            db, config):
    """A `webhooks register` killed after the provider created the webhook: its token is lost, registering again
    makes a second webhook whose deliveries are accepted, and every event of the first is refused (no_token)."""
    from partnerkit.store import webhook_refusals
    from partnerkit.store.webhook_refusals import Tally, minute_of

    assert post(client, _processing("evt_of_the_second_webhook")).status_code == 200
    first = T + timedelta(seconds=30)
    stamp = first.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    webhook_refusals.add(db, [Tally(minute_of(stamp), "no_token", 5, stamp, stamp)])
    clock.move_to(T + timedelta(minutes=2))
    assert post(client, _processing("evt_of_the_second_webhook_again")).status_code == 200
    status = collect(config, db)
    [line] = status["attention"]
    assert line.startswith("5 webhook deliveries refused in the last hour for an X-Webhook-ID with no accepted "
                           "token, while other deliveries are accepted")
    assert "`partnerkit webhooks delete ID`" in line
