"""`partnerkit status` names the real cause of an alert: a worker that runs but cannot write the database
(a full disk), the provider failing every call, a first night whose report failed."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from freezegun import freeze_time

from partnerkit import disk
from partnerkit.client import PartnerClient, RetryPolicy
from partnerkit.errors import ApiError, ServerError
from partnerkit.status import collect, gauges
from partnerkit.store import open_db, provider_failures, recharges
from partnerkit.timeutil import utcnow
from reconcile.recharges import submit
from reconcile.scheduler import WorkerLease, new_holder
from tests.conftest import account_of
from tests.reliability.storage_faults import fill, tiny_filesystem, truncate_wal

MB = 1024 * 1024
FAILING_AFTER = timedelta(minutes=5)  # README: every call failed, three or more, over five minutes


def _holder_of(pid: int) -> str:
    parts = new_holder().split(":")
    parts[1] = str(pid)
    return ":".join(parts)


@pytest.fixture
def running_child():
    """A process of this host that keeps running: a worker holding the lease, as far as `status` can see."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def test_a_worker_that_runs_but_cannot_renew_its_lease_is_not_called_crashed(sandbox_config, db, running_child):
    """The on-call review's disk-full page said "it crashed or was killed; start `partnerkit worker`" of a live worker."""
    holder = _holder_of(running_child.pid)
    WorkerLease(db, holder=holder, ttl_s=30).acquire(wait=False)
    with freeze_time(utcnow() + timedelta(seconds=31)):  # it stopped renewing, and its process still runs
        status = collect(sandbox_config, db)
    assert status["worker_running"] is False and status["worker_lease_holder_alive"] is True
    [line] = [line for line in status["attention"] if holder in line]
    assert line.startswith(f"the worker {holder} still runs on this host but has not renewed its lease (expired ")
    assert "it cannot write the database: its log's `worker lease renewal failed` lines say why" in line
    assert "crashed" not in line and "start `partnerkit worker`" not in line

    running_child.kill()
    running_child.wait()
    with freeze_time(utcnow() + timedelta(seconds=31)):
        gone = collect(sandbox_config, db)
    assert gone["worker_lease_holder_alive"] is False
    [line] = [line for line in gone["attention"] if f"{holder} stopped without releasing its lease" in line]
    # A long-running worker's deployment and a cron line's alike (the kill -9 review's nit): which one held the
    # lease, the lease does not say.
    assert line.endswith("it crashed or was killed; start it again (`systemctl start partnerkit-worker`, or "
                         "`partnerkit worker`), or, where cron runs `partnerkit worker --once`, its next run takes "
                         "over (or run one now)")


def test_a_pid_reused_after_the_lease_was_taken_is_not_the_holder(sandbox_config, db, running_child):
    from partnerkit.store import locks

    holder = _holder_of(running_child.pid)
    WorkerLease(db, holder=holder, ttl_s=30).acquire(wait=False)
    with db.conn:  # the lease taken an hour before this process started: its pid now belongs to another one
        db.conn.execute("UPDATE locks SET acquired_at = ? WHERE name = 'worker'",
                        ((utcnow() - timedelta(hours=1)).isoformat(),))
    assert locks.current(db, "worker").holder == holder
    assert collect(sandbox_config, db)["worker_lease_holder_alive"] is False


def test_status_gives_the_databases_free_space(sandbox_config, db):
    status = collect(sandbox_config, db)
    free = shutil.disk_usage(sandbox_config.db_path.parent).free
    assert abs(status["db_free_bytes"] - free) < 64 * MB  # other tests write meanwhile
    assert status["db_wal_bytes"] >= 0 and status["db_read_only"] is False
    assert status["db_free_bytes"] >= disk.FREE_FLOOR_BYTES, "this machine's disk is nearly full: the tests need room"
    assert not any("PARTNERKIT_DB's filesystem" in line for line in status["attention"])


@pytest.mark.parametrize("room, low", [
    (disk.Room(100 * MB, 0, False), False),
    (disk.Room(100 * MB - 1, 0, False), True),
    (disk.Room(150 * MB, 200 * MB, False), True),  # a WAL larger than the floor: its size is the floor
    (disk.Room(20_000 * MB, 0, True), True),       # read-only: nothing can be written, whatever is free
    (disk.Room(None, 0, False), False),            # unknown: no line
])
def test_the_free_space_floor(room, low):
    assert room.low is low


@pytest.mark.parametrize("size, text", [(0, "0 MB"), (4096, "under 0.1 MB"), (400 * 1024, "0.4 MB"),
                                        (37 * MB + 1, "37 MB")])
def test_sizes_in_the_attention_line(size, text):
    assert disk.megabytes(size) == text


def test_a_full_database_disk_is_named_and_the_worker_on_it_is_not_called_dead(tmp_path, sandbox_config,
                                                                               running_child, caplog):
    """Finding 4 on a real full filesystem: the page names the disk, not a crash; the worker logs its lapse once."""
    with tiny_filesystem(tmp_path / "data", "16m") as data:
        config = replace(sandbox_config, db_path=data / "partnerkit.db")
        db = open_db(config.db_path)
        try:
            holder = _holder_of(running_child.pid)
            WorkerLease(db, holder=holder, ttl_s=30).acquire(wait=False)
            mine = WorkerLease(db, name="renewal-under-test", ttl_s=0.2)  # renewed by hand, as the worker does
            mine.acquire(wait=False)
            truncate_wal(config.db_path)
            filler = fill(data)
            with caplog.at_level(logging.INFO, logger="reconcile.worker"):
                for _ in range(3):  # 10 s apart in the worker; here past the 0.2 s lease each
                    assert mine.renew() is True  # not lost: it carries on
                    time.sleep(0.25)
            lapsed = [r.getMessage() for r in caplog.records if "the worker lease has lapsed" in r.getMessage()]
            assert len(lapsed) == 1 and "database or disk is full" in lapsed[0]

            with freeze_time(utcnow() + timedelta(seconds=31)):
                full = collect(config, db)
                scrape = gauges(config, db)
            assert full["db_free_bytes"] < MB
            [disk_line] = [line for line in full["attention"] if line.startswith("PARTNERKIT_DB's filesystem has ")]
            assert "free, under the 100 MB partnerkit asks for" in disk_line
            assert "never by deleting the database's `-wal`" in disk_line and "the receiver answers 503" in disk_line
            [worker_line] = [line for line in full["attention"] if holder in line]
            assert "still runs on this host" in worker_line
            assert "PARTNERKIT_DB's filesystem is full or read-only (its own line says what to do)" in worker_line
            assert scrape["db_disk_low"] == 1 and scrape["worker_up"] == 0

            filler.unlink()
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="reconcile.worker"):
                assert mine.renew() is True
            assert any("renewed again after 3 failed renewal(s)" in r.getMessage() for r in caplog.records)
        finally:
            db.conn.close()


def _failing_client(config, db, **kwargs):
    return PartnerClient(config, db, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None, **kwargs)


def test_status_says_when_the_provider_fails_every_call_and_not_for_one_failure(sandbox_server, sandbox_config, db):
    account_of(db, sandbox_config.api_key)
    sandbox_server.sandbox.settings.faults = {"http_500": {"scope": "all"}}
    start = utcnow()
    with _failing_client(sandbox_config, db, purpose="poller") as client:
        with pytest.raises(ServerError):
            client.list_wallets()
        with freeze_time(start + timedelta(minutes=10)):  # one failure, long ago: nobody is paged
            assert collect(sandbox_config, db)["provider_failing_since"] is None
        for _ in range(2):
            with pytest.raises(ServerError):
                client.list_wallets()
    with freeze_time(start + FAILING_AFTER - timedelta(seconds=5)):  # three, but under five minutes
        assert collect(sandbox_config, db)["attention"] == []

    with freeze_time(start + timedelta(minutes=12)):
        status = collect(sandbox_config, db)
        scrape = gauges(sandbox_config, db)
    assert start <= status["provider_failing_since"] <= utcnow()
    assert status["provider_failing"].startswith("3 calls (HTTP 500 x3), the last GET /api/v1/wallets (poller) at ")
    [line] = [line for line in status["attention"] if "provider" in line]
    assert line.startswith("the provider has failed every call for 12 minutes since ")
    assert "it answers with server errors: nothing to fix here; partnerkit retries by itself" in line
    assert scrape["provider_failing"] == 1

    sandbox_server.sandbox.settings.faults = {}
    with _failing_client(sandbox_config, db) as client:
        client.list_wallets()  # the provider answers: the failures before it no longer stand
    with freeze_time(start + timedelta(minutes=12)):
        calm = collect(sandbox_config, db)
        assert gauges(sandbox_config, db)["provider_failing"] == 0
    assert calm["provider_failing_since"] is None and calm["attention"] == []


def test_an_answer_that_is_an_error_of_ours_is_still_an_answer(sandbox_server, sandbox_config, db):
    """A 4xx says the provider is up: only 5xx, timeouts, no connection and unreadable answers count."""
    account_of(db, sandbox_config.api_key)
    sandbox_server.sandbox.settings.faults = {"http_500": {"scope": "all"}}
    with _failing_client(sandbox_config, db) as client:
        for _ in range(3):
            with pytest.raises(ServerError):
                client.list_wallets()
        assert provider_failures.standing(db).calls == 3
        sandbox_server.sandbox.settings.faults = {}
        with pytest.raises(ApiError):
            client.get_recharge(999_999_999)  # 404: answered
    assert provider_failures.standing(db) is None


def test_no_connection_at_all_points_at_this_hosts_network_too(sandbox_config, db):
    import socket

    with socket.socket() as closed:  # a port nobody listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unreachable = replace(sandbox_config, api_base_url=f"http://127.0.0.1:{port}")
    account_of(db, unreachable.api_key)
    start = utcnow()
    with _failing_client(unreachable, db, purpose="sync") as client:
        for _ in range(3):
            with pytest.raises(ApiError):
                client.list_wallets()
    with freeze_time(start + timedelta(minutes=6)):
        status = collect(unreachable, db)
    assert "(no connection x3)" in status["provider_failing"]
    [line] = [line for line in status["attention"] if line.startswith("the provider has failed every call")]
    assert "no answer at all: check this host's network, DNS and proxy towards PARTNERKIT_API_BASE_URL" in line


def test_recharges_unread_during_the_outage_are_not_sent_to_escalation(sandbox_server, sandbox_config, db):
    """At 30 minutes `status` said "escalate to support" of recharges it could not read (one SUCCESS for long)."""
    with PartnerClient(sandbox_config, db) as client:
        unread = submit(sandbox_config, db, client, mobile_number="9876543218", operator_id=1, amount="100")
        read = submit(sandbox_config, db, client, mobile_number="9876543228", operator_id=1, amount="100")
    assert (unread.http_status, read.http_status) == (202, 202)  # digit 8: PROCESSING that never settles
    start = utcnow()
    sandbox_server.sandbox.settings.faults = {"http_500": {"scope": "all"}}
    with _failing_client(sandbox_config, db, purpose="poller") as client:
        for _ in range(3):
            with pytest.raises(ServerError):
                client.list_recharges()
    since = provider_failures.standing(db).since
    recharges.mark_polled(db, [(read.local_id, start + timedelta(hours=1))], since + timedelta(seconds=1))

    with freeze_time(start + timedelta(minutes=31)):
        status = collect(sandbox_config, db)
        scrape = gauges(sandbox_config, db)
    assert (status["recharges_past_30_min"], status["recharges_past_30_min_unread"]) == (2, 1)
    assert "1 recharge(s) PROCESSING for over 30 minutes: escalate to support with their reference_number " \
           "(`partnerkit recharges list --status PROCESSING`)" in status["attention"]
    assert any(line.startswith("1 recharge(s) PROCESSING for over 30 minutes were not read since the provider began "
                               "failing at ") and "do not escalate them yet" in line for line in status["attention"])
    assert scrape["recharges_processing_over_30m"] == 1  # the one to escalate

    sandbox_server.sandbox.settings.faults = {}
    with PartnerClient(sandbox_config, db) as client:
        client.list_wallets()
    with freeze_time(start + timedelta(minutes=31)):
        answered = collect(sandbox_config, db)
    assert answered["recharges_past_30_min_unread"] == 0  # the provider answers: the document's rule again
    assert "2 recharge(s) PROCESSING for over 30 minutes: escalate to support with their reference_number " \
           "(`partnerkit recharges list --status PROCESSING`)" in answered["attention"]


def test_a_first_night_that_failed_is_overdue_before_any_report(sandbox_config, db):
    """A new install whose first nightly report failed: `overdue_report` said nothing "before the first report"."""
    from partnerkit.store import ledger

    with freeze_time("2026-11-21T10:00:00Z"):  # installed: the first sync covers the day
        assert collect(sandbox_config, db)["report_overdue_date"] is None
        ledger.record_sync(db, "recharges", from_day="2026-11-21", to_day="2026-11-21",
                           started_at="2026-11-21T10:00:00Z", count=0, days=["2026-11-21"], advance_to="2026-11-21")
    with freeze_time("2026-11-22T02:59:00Z"):  # due at 01:00, late from 03:00
        assert collect(sandbox_config, db)["report_overdue_date"] is None
    with freeze_time("2026-11-22T03:00:00Z"):
        status = collect(sandbox_config, db)
        assert gauges(sandbox_config, db)["report_overdue"] == 1
    assert status["last_report_date"] is None and status["report_overdue_date"] == "2026-11-21"
    assert any(line.startswith("the nightly report for 2026-11-21 is overdue (no complete report yet): ")
               for line in status["attention"])


def test_every_refusal_reason_of_the_verifier_has_its_own_hint():
    """`status` names what to check for the reason refused most; a reason without a hint said only "see the
    receiver log" (signature_timestamp_mismatch, added with the t=,v1= signature shape, had none)."""
    import re
    from pathlib import Path

    import receiver.signature
    from partnerkit.status._attention import REFUSAL_HINTS

    reasons = set(re.findall(r'VerificationError\("([a-z_]+)"', Path(receiver.signature.__file__).read_text()))
    assert "signature_timestamp_mismatch" in reasons and len(reasons) >= 8
    assert sorted(reasons - set(REFUSAL_HINTS)) == []
