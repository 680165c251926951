"""`partnerkit status` reads the operator's figures from the store, through the real write paths."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import drifts, inbox, meta, transaction
from partnerkit.timeutil import iso, utcnow
from receiver.envelope import normalise
from tests.receiver.conftest import CIPHER
from tests.conftest import account_of
from reconcile.recharges import submit

# The line of one pending drift: for finance, never attention.
PENDING = "1 open drift(s) pending a decision: `partnerkit drifts list --resolution pending`"


def test_empty_store_needs_no_attention(sandbox_config, db):
    status = collect(sandbox_config, db)
    assert status["last_webhook_at"] is None
    assert status["recharges_processing"] == 0
    assert status["attention"] == []


def test_status_reports_what_needs_a_person(sandbox_config, db):
    start = utcnow()
    body = b'{"event_id":"evt_s1","event_type":"order.delivered","created_at":"2026-11-21T10:00:00Z","data":{"id":77,"status":"DELIVERED","quantity":2}}'
    inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=start)
    with PartnerClient(sandbox_config, db) as client:
        outcome = submit(sandbox_config, db, client, mobile_number="9876543218", operator_id=1, amount="100")
    assert outcome.http_status == 202  # digit 8: PROCESSING that never settles (docs/sandbox.md)
    with transaction(db) as conn:
        job = conn.execute("SELECT id FROM jobs WHERE order_id = 77").fetchone()
        conn.execute("UPDATE jobs SET state = 'dead', last_error = 'HTTP 404' WHERE id = ?", job)
    drifts.open_drift(db, kind="missing_refund", subject="recharge", reference="RCH1", expected="10.00",
                      actual="0.00", currency="INR", detected_at=start)

    with freeze_time(start + timedelta(minutes=31)):
        status = collect(sandbox_config, db)
    assert status["last_webhook_age_s"] == 31 * 60
    assert status["events_stored"] == 1
    assert status["voucher_fetch_parked"] == 1
    assert status["recharges_processing"] == 1
    assert status["recharges_past_30_min"] == 1
    assert status["oldest_processing_age_s"] >= 31 * 60 - 5
    assert status["budget_used_this_hour"] >= 1  # the submit went through the shared budget
    assert sum(status["budget_used_by_purpose"].values()) == status["budget_used_this_hour"]
    assert status["open_drifts"] == 1
    assert status["for_finance"] == [PENDING]
    assert not any("drift" in line for line in status["attention"])  # finance's queue, not attention
    assert any("PROCESSING for over 30 minutes" in line for line in status["attention"])
    # The parked fetch's line names the command that re-arms it now (session 14, finding 6).
    assert any("parked" in line and "`partnerkit orders sync` re-arms now" in line for line in status["attention"])

    result = CliRunner().invoke(cli, ["status", "--format", "json"], env=config_as_env(sandbox_config))
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["open_drifts"] == 1
    assert printed["for_finance"] == status["for_finance"]
    assert printed["budget_used_by_purpose"] == status["budget_used_by_purpose"]
    assert printed["checked_at"].endswith("Z")


def test_status_names_a_worker_that_died_holding_its_lease(sandbox_config, db):
    from partnerkit.store import locks
    from reconcile.scheduler import LEASE_NAME, WorkerLease

    assert LEASE_NAME == locks.WORKER_LEASE == "worker"  # one name, and the one stored databases hold
    lease = WorkerLease(db, holder="box:4242:1:feedf00d", ttl_s=30)
    lease.acquire(wait=False)
    running = collect(sandbox_config, db)
    assert running["worker_running"] is True and running["worker_lease_holder"] == "box:4242:1:feedf00d"
    assert running["attention"] == []

    with freeze_time(utcnow() + timedelta(seconds=31)):  # it stopped renewing: killed
        dead = collect(sandbox_config, db)
    assert dead["worker_running"] is False
    assert any("box:4242:1:feedf00d stopped without releasing its lease" in line for line in dead["attention"])

    lease.release()  # a clean stop: nothing to say while nothing waits
    assert collect(sandbox_config, db)["attention"] == []
    assert locks.current(db, LEASE_NAME) is None


def test_status_says_when_work_waits_and_no_worker_runs(sandbox_config, db):
    body = b'{"event_id":"evt_s2","event_type":"order.delivered","created_at":"2026-11-21T10:00:00Z","data":{"id":78,"status":"DELIVERED","quantity":1}}'
    inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=utcnow())
    status = collect(sandbox_config, db)
    assert status["voucher_fetch_backlog"] == 1 and status["worker_running"] is False
    assert any("no worker has run on this database" in line for line in status["attention"])


def test_work_waiting_between_two_cron_runs_of_the_worker_needs_no_attention(sandbox_config, db):
    """`worker --once` from cron: no worker runs between two runs, and a fetch queued meanwhile waits for the
    next one; only a worker silent past PARTNERKIT_WORKER_STALE_S is worth a line (and `status --check`)."""
    from partnerkit.status._worker import note_worker_ran

    note_worker_ran(db, utcnow())  # the last cron run, a moment ago
    body = b'{"event_id":"evt_s3","event_type":"order.delivered","created_at":"2026-11-21T10:00:00Z","data":{"id":79,"status":"DELIVERED","quantity":1}}'
    inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=utcnow())
    status = collect(sandbox_config, db)
    assert status["voucher_fetch_backlog"] == 1 and status["worker_running"] is False
    assert status["attention"] == []
    with freeze_time(utcnow() + timedelta(seconds=sandbox_config.worker_stale_s + 60)):  # the cron line stopped
        stale = collect(sandbox_config, db)
    assert any("no worker has run a job for" in line for line in stale["attention"])


def test_status_knows_at_once_when_the_worker_of_this_host_was_killed(sandbox_config, db):
    """kill -9: the lease stays until it expires (30 s), but its process of this host is gone now."""
    import subprocess
    import sys

    from reconcile.scheduler import WorkerLease, new_holder

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = new_holder().split(":")
        holder[1] = str(child.pid)
        WorkerLease(db, holder=":".join(holder), ttl_s=30).acquire(wait=False)
        assert collect(sandbox_config, db)["worker_running"] is True
        child.kill()
        child.wait()
        status = collect(sandbox_config, db)
    finally:
        child.kill()
        child.wait()
    assert status["worker_running"] is False
    assert any(f"{':'.join(holder)} stopped without releasing its lease (expires " in line
               for line in status["attention"])


def test_last_report_date_is_the_last_complete_one(sandbox_config, db):
    """A report of a day still running (`reconcile --date TODAY`) is partial: not the last report."""
    from partnerkit.store import reports

    reports.save_report(db, {"date": "2026-11-20", "generated_at": "2026-11-21T01:00:00Z", "summary": {}, "drifts": []})
    reports.save_report(db, {"date": "2026-11-21", "generated_at": "2026-11-21T09:00:00Z", "summary": {}, "drifts": []})
    assert collect(sandbox_config, db)["last_report_date"] == "2026-11-20"


def test_status_names_a_wallet_difference_of_the_last_complete_report_until_its_drift_is_resolved(sandbox_config, db):
    """h02 finding 1: a wallet short by money no listed entry explains sat in the report's table, and status said
    nothing. The last complete report's unexplained and unconfirmed differences are named; timing is not; an
    unexplained one whose drift finance resolved is not."""
    from partnerkit.store import reports

    ident = drifts.open_drift(db, kind="balance_discontinuity", subject="wallet", reference="wallet INR after 700005",
                              expected="1101.50", actual="1051.50", currency="INR", detected_at=utcnow())
    wallets = {"INR": {"provider_difference": "-50.00", "provider_balance_at": "2026-11-21T00:05:00Z",
                       "provider_difference_status": "unexplained", "provider_difference_drift": ident},
               "USD": {"provider_difference": "25.00", "provider_balance_at": "2026-11-21T00:05:00Z",
                       "provider_difference_status": "unconfirmed"},
               "EUR": {"provider_difference": "-1.00", "provider_balance_at": "2026-11-21T00:05:00Z",
                       "provider_difference_status": "timing"}}
    reports.save_report(db, {"date": "2026-11-20", "generated_at": "2026-11-21T01:00:00Z", "summary": {}, "drifts": [],
                             "wallets": wallets})
    status = collect(sandbox_config, db)
    assert status["wallet_differences"] == [f"INR 50.00 below the ledger's at 2026-11-21T00:05:00Z (unexplained, drift "
                                            f"{ident})",
                                            "USD 25.00 above the ledger's at 2026-11-21T00:05:00Z (unconfirmed)"]
    [line] = [line for line in status["attention"] if "wallet balance" in line]
    assert "the report of 2026-11-20" in line and "`partnerkit drifts show ID`" in line
    # Its drift is in finance's queue as any other; the difference itself keeps its attention line, and `--check`.
    assert status["for_finance"] == [PENDING]
    assert CliRunner().invoke(cli, ["status", "--check"], env=config_as_env(sandbox_config)).exit_code == 1
    drifts.set_resolution(db, ident, "resolved", note="provider refunded", by="finance", at=utcnow())
    assert collect(sandbox_config, db)["wallet_differences"] == [
        "USD 25.00 above the ledger's at 2026-11-21T00:05:00Z (unconfirmed)"]
    reports.save_report(db, {"date": "2026-11-21", "generated_at": "2026-11-22T01:00:00Z", "summary": {}, "drifts": []})
    status = collect(sandbox_config, db)
    assert status["wallet_differences"] == [] and not any("wallet balance" in line for line in status["attention"])


def test_status_says_when_the_nightly_report_is_overdue(sandbox_config, db):
    from partnerkit.store import reports

    assert sandbox_config.due_hour_utc == 1
    reports.save_report(db, {"date": "2026-11-19", "generated_at": "2026-11-20T01:00:00Z", "summary": {}, "drifts": []})
    with freeze_time("2026-11-21T02:59:00Z"):  # the 20th's report is due from 01:00, late from 03:00
        assert collect(sandbox_config, db)["report_overdue_date"] is None
    with freeze_time("2026-11-21T03:00:00Z"):
        status = collect(sandbox_config, db)
    assert status["report_overdue_date"] == "2026-11-20"
    assert any("nightly report for 2026-11-20 is overdue" in line for line in status["attention"])
    reports.save_report(db, {"date": "2026-11-20", "generated_at": "2026-11-21T03:05:00Z", "summary": {}, "drifts": []})
    with freeze_time("2026-11-21T03:10:00Z"):
        assert collect(sandbox_config, db)["report_overdue_date"] is None


def test_status_names_nights_older_than_the_catch_up_that_were_never_reported(sandbox_config, db):
    """The nightly run catches up 31 nights; older ones without a report are left to `reconcile --date`."""
    from partnerkit.store import reports

    busy = {"recharges_total": 2, "orders_total": 0, "transactions_total": 2, "drifted": 0}  # the account's days
    reports.save_report(db, {"date": "2026-09-30", "generated_at": "2026-10-01T01:00:00Z", "summary": busy, "drifts": []})
    reports.save_report(db, {"date": "2026-10-10", "generated_at": "2026-10-11T01:00:00Z", "summary": busy, "drifts": []})
    with freeze_time("2026-11-22T00:30:00Z"):  # before the due hour: the catch-up reaches 2026-10-21..2026-11-20
        status = collect(sandbox_config, db)
    assert status["nights_never_reported"] == ["2026-10-01..2026-10-09", "2026-10-11..2026-10-20"]
    assert any("older than the 31 the nightly run catches up were never reported: 2026-10-01..2026-10-09, "
               "2026-10-11..2026-10-20; `partnerkit reconcile --date D`" in line for line in status["attention"])
    with freeze_time("2026-11-22T01:00:00Z"):  # a night later, 2026-10-21 falls out of reach too
        assert collect(sandbox_config, db)["nights_never_reported"][-1] == "2026-10-11..2026-10-21"
    for night in range(1, 22):
        if night != 10:
            reports.save_report(db, {"date": f"2026-10-{night:02d}", "generated_at": "2026-11-22T02:00:00Z",
                                     "summary": {}, "drifts": []})
    with freeze_time("2026-11-22T02:30:00Z"):
        status = collect(sandbox_config, db)
    assert status["nights_never_reported"] == [] and not any("never reported" in line for line in status["attention"])


def test_status_lists_a_sync_reading_on_from_where_it_stopped(sandbox_config, db):
    from partnerkit.store import ledger

    assert collect(sandbox_config, db)["syncs_reading_on"] == []
    ledger.keep_walk_position(db, "transactions", "2026-11-20", "2026-11-20", next_page=41, reason="no room",
                              started_at="2026-11-21T01:00:00Z", stopped_at="2026-11-21T01:20:00Z")
    assert collect(sandbox_config, db)["syncs_reading_on"] == [
        "transactions 2026-11-20..2026-11-20 from page 41 (begun 2026-11-21T01:00:00Z)"]


def test_status_says_when_the_pollers_share_leaves_it_nothing(sandbox_config, db):
    status = collect(sandbox_config, db)
    assert status["poller_requests_per_hour"] == 500  # the default share of the default budget
    assert not any("POLLER_BUDGET_SHARE" in line for line in status["attention"])
    starved = replace(sandbox_config, hourly_budget=10, poller_budget_share=Decimal("0.05"))
    status = collect(starved, db)
    assert status["poller_requests_per_hour"] == 0
    assert any("leaves the recharge poller no request" in line for line in status["attention"])


def test_every_status_field_is_explained_in_the_readme(sandbox_config, db):
    """`status` printed 26 fields that no page explained (docs/receiver.md even named one wrongly)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("### Read `partnerkit status`"):]
    table = table[:table.index("\n### ", 1)]
    missing = [field for field in collect(sandbox_config, db) if f"`{field}`" not in table]
    assert missing == []


def test_status_check_exits_1_only_while_something_needs_attention(sandbox_config, db):
    env = config_as_env(sandbox_config)
    calm = CliRunner().invoke(cli, ["status", "--check", "--format", "json"], env=env)
    assert calm.exit_code == 0, calm.output
    assert json.loads(calm.output)["attention"] == []

    # Open drifts are finance's queue, read in the night's report (many resolve themselves): a line of their own,
    # never attention, so the status timer's unit does not fail every night one is pending.
    start = utcnow()
    drifts.open_drift(db, kind="missing_refund", subject="recharge", reference="RCH9", expected="10.00",
                      actual="0.00", currency="INR", detected_at=start)
    escalated = drifts.open_drift(db, kind="duplicate_debit", subject="recharge", reference="RCH8", expected="10.00",
                                  actual="20.00", currency="INR", detected_at=start)
    drifts.set_resolution(db, escalated, "escalated", note="asked for the credit", by="finance", at=start)
    queued = CliRunner().invoke(cli, ["status", "--check", "--format", "json"], env=env)
    assert queued.exit_code == 0, queued.output
    shown = json.loads(queued.output)
    assert shown["attention"] == [] and shown["for_finance"] == [
        PENDING,
        "1 drift(s) escalated to the provider, awaiting its answer: `partnerkit drifts list --resolution escalated`"]
    table = CliRunner().invoke(cli, ["status", "--check"], env=env)
    assert table.exit_code == 0, table.output
    rows = [line.split(None, 1) for line in table.output.splitlines()]
    assert [row[1] for row in rows if row[0] == "for_finance"] == shown["for_finance"]
    assert [row[1] for row in rows if row[0] == "attention"] == ["nothing needs attention"]

    body = b'{"event_id":"evt_c1","event_type":"order.delivered","created_at":"2026-11-21T10:00:00Z","data":{"id":5,"status":"DELIVERED","quantity":1}}'
    inbox.record(db, normalise(body, {}), body, cipher=CIPHER, now=start)
    with transaction(db) as conn:  # its voucher fetch parked after its retries: a person must look
        conn.execute("UPDATE jobs SET state = 'dead', last_error = 'HTTP 404' WHERE order_id = 5")
    alarmed = CliRunner().invoke(cli, ["status", "--check"], env=env)
    assert alarmed.exit_code == 1
    assert "parked" in alarmed.output  # the figures are still printed
    plain = CliRunner().invoke(cli, ["status"], env=env)
    assert plain.exit_code == 0  # without --check a monitor reads `attention` itself


def _health(text: str) -> dict[str, float]:
    """The worker-health gauges of a /metrics scrape."""
    from receiver.metrics import HEALTH_GAUGES

    names = {name for name, _ in HEALTH_GAUGES.values()}
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            values[name] = float(value)
    assert set(values) == names, "every health gauge is in every scrape"
    return values


def test_the_receivers_metrics_carry_what_status_warns_of(sandbox_config, db):
    """An alert on a dead worker, a stuck recharge or a late report needs only a Prometheus scrape."""
    from partnerkit.store import reports
    from receiver.app import create_app
    from reconcile.scheduler import WorkerLease

    # The clock is faked (ticking) from before the app exists until its housekeeping thread stopped, and moved in
    # between: a freeze_time entered and left while that thread runs races it (tests/receiver/test_refusals.py).
    with freeze_time(utcnow(), tick=True) as clock:
        app = create_app(sandbox_config)
        try:
            scrape = app.test_client().get
            calm = _health(scrape("/metrics").get_data(as_text=True))
            assert calm == {"partnerkit_worker_up": 0, "partnerkit_recharges_processing": 0,
                            "partnerkit_recharges_processing_over_30m": 0, "partnerkit_recharges_unknown": 0,
                            "partnerkit_report_overdue": 0, "partnerkit_provider_refusing": 0,
                            "partnerkit_provider_failing": 0, "partnerkit_db_disk_low": 0,
                            "partnerkit_nightly_failed": 0, "partnerkit_report_dir_unwritable": 0, "partnerkit_clock_off": 0}

            start = utcnow()
            with PartnerClient(sandbox_config, db) as client:
                assert submit(sandbox_config, db, client, mobile_number="9876543218", operator_id=1,
                              amount="100").http_status == 202  # digit 8: PROCESSING that never settles
            yesterday_but_one = (start - timedelta(days=3)).date().isoformat()
            reports.save_report(db, {"date": yesterday_but_one, "generated_at": start.isoformat(), "summary": {},
                                     "drifts": []})
            lease = WorkerLease(db, ttl_s=3600)
            lease.acquire(wait=False)  # this process: alive
            clock.move_to(start + timedelta(minutes=31))
            alarmed = _health(scrape("/metrics").get_data(as_text=True))
            status = collect(sandbox_config, db)
            lease.release()
            stopped = _health(scrape("/metrics").get_data(as_text=True))
        finally:
            app.extensions["partnerkit_receiver"].close()
    assert alarmed == {"partnerkit_worker_up": 1, "partnerkit_recharges_processing": 1,
                       "partnerkit_recharges_processing_over_30m": 1, "partnerkit_recharges_unknown": 0,
                       "partnerkit_report_overdue": 1, "partnerkit_provider_refusing": 0,
                       "partnerkit_provider_failing": 0, "partnerkit_db_disk_low": 0,
                            "partnerkit_nightly_failed": 0, "partnerkit_report_dir_unwritable": 0, "partnerkit_clock_off": 0}
    assert (status["worker_running"], status["recharges_past_30_min"]) == (True, 1)
    assert status["report_overdue_date"] is not None, "the scrape and `status` judge alike"
    assert stopped["partnerkit_worker_up"] == 0


def test_status_names_the_providers_refusal_of_the_credentials_until_a_call_passes(sandbox_config, db):
    """A rotated or revoked secret stops every job; each job only logged its 401."""
    from partnerkit import errors
    from partnerkit.status import gauges

    account_of(db, sandbox_config.api_key, ("1", "2"))  # a database in use: the key's account is known
    wrong = replace(sandbox_config, api_secret="not-the-secret-the-sandbox-issued")
    with PartnerClient(wrong, db) as client:
        try:
            client.list_wallets()
        except errors.Unauthorized:
            pass
        else:
            raise AssertionError("the sandbox took a wrong secret")
    refused = collect(sandbox_config, db)
    assert refused["provider_refused"].startswith("HTTP 401 to GET /api/v1/wallets (default) at ")
    assert "not-the-secret" not in refused["provider_refused"]
    assert any("the provider refused partnerkit's credentials" in line for line in refused["attention"])
    assert gauges(sandbox_config, db)["provider_refusing"] == 1

    with PartnerClient(sandbox_config, db, purpose="poller") as client:  # fixed: the next call passes
        client.list_wallets()
    calm = collect(sandbox_config, db)
    assert calm["provider_refused"] is None and calm["attention"] == []
    assert gauges(sandbox_config, db)["provider_refusing"] == 0


def test_a_refusal_of_another_api_key_is_not_this_ones(sandbox_config, db):
    """Keyed by the key's hash: a shell with a mistyped key does not alarm the configured one."""
    from partnerkit import errors

    typo = replace(sandbox_config, api_key=sandbox_config.api_key + "x")
    with PartnerClient(typo, db) as client:
        try:
            client.list_wallets()
        except errors.Unauthorized:
            pass
    assert db.execute("SELECT COUNT(*) FROM provider_refusals").fetchone()[0] == 1
    assert collect(sandbox_config, db)["provider_refused"] is None


def test_a_refused_key_is_named_by_the_cli_and_fails_worker_once(sandbox_config, db):
    env = {**config_as_env(sandbox_config), "PARTNERKIT_API_SECRET": "a-secret-the-provider-revoked"}
    refused = CliRunner().invoke(cli, ["orders", "sync"], env=env)
    assert refused.exit_code == 1 and "HTTP 401" in refused.output
    assert "the provider refused PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET: check both" in refused.output
    assert "a-secret-the-provider-revoked" not in refused.output

    once = CliRunner().invoke(cli, ["worker", "--once", "--format", "json"], env=env)
    outcomes = {r["job"]: r["outcome"] for r in json.loads(once.stdout)}
    assert outcomes["catch-up-orders"] == "paused" and outcomes["prune-events"] == "ok"
    assert once.exit_code == 1, "a pass that did nothing for a refused key is not a success for cron"


def test_status_names_a_worker_that_has_run_no_job_for_a_while(sandbox_config, db):
    """A worker stopped cleanly leaves no lease behind: only the time of its last job run tells."""
    from reconcile.scheduler import run_once
    from reconcile.worker_jobs import JOBS

    assert collect(sandbox_config, db)["worker_last_job_at"] is None  # a fresh install is not an outage
    start = utcnow()
    with freeze_time(start):
        run_once(sandbox_config, jobs=[s for s in JOBS if s.id == "prune-events"])  # as `worker --once` from cron
    with freeze_time(start + timedelta(minutes=14)):
        quiet = collect(sandbox_config, db)
    assert quiet["worker_last_job_at"] == start and quiet["worker_running"] is False
    assert quiet["attention"] == []

    with freeze_time(start + timedelta(minutes=16)):
        silent = collect(sandbox_config, db)
        checked = CliRunner().invoke(cli, ["status", "--check"], env=config_as_env(sandbox_config))
    assert [line for line in silent["attention"] if "no worker has run a job for 16 minutes" in line] == [
        f"no worker has run a job for 16 minutes (last at {start.isoformat().replace('+00:00', 'Z')}; "
        "PARTNERKIT_WORKER_STALE_S allows 900 s): start `partnerkit worker` (or check the cron line that runs "
        "`partnerkit worker --once`)"]
    assert checked.exit_code == 1

    hourly = replace(sandbox_config, worker_stale_s=2 * 3600)  # cron every hour: set above its interval
    with freeze_time(start + timedelta(minutes=61)):
        assert collect(hourly, db)["attention"] == []


def test_a_job_run_is_noted_at_most_once_a_minute(db):
    from partnerkit.status import last_worker_run, note_worker_ran

    start = utcnow()
    note_worker_ran(db, start)
    note_worker_ran(db, start + timedelta(seconds=59))  # the 3 s jobs: no write each time
    assert last_worker_run(db) == start
    note_worker_ran(db, start + timedelta(seconds=61))
    assert last_worker_run(db) == start + timedelta(seconds=61)
    note_worker_ran(db, start)  # a clock set back is written too, not frozen out
    assert last_worker_run(db) == start
    with transaction(db) as conn:
        meta.put(conn, "worker.last_job_at", "garbage", now=start)
    assert last_worker_run(db) is None


def test_a_submit_killed_mid_send_counts_as_an_answer_lost(sandbox_config, db):
    """Killed after recording its intent, a submit leaves INTENT, not UNKNOWN: the provider may well
    have charged it, so `status` sends the operator to `recharges locate`, as for UNKNOWN."""
    from partnerkit.store import recharges

    start = utcnow()
    intent = dict(mobile_number="9876522225", operator_id=1, amount=Decimal("111"), client_reference="ref-killed")
    killed = recharges.record_intent(db, idempotency_key="idem-killed-0001", submitted_at=start, **intent)
    fresh = recharges.record_intent(db, idempotency_key="idem-fresh-00001", submitted_at=start + timedelta(seconds=150),
                                    **{**intent, "client_reference": "ref-in-flight"})
    unknown = recharges.record_intent(db, idempotency_key="idem-lost-000001", submitted_at=start, **{
        **intent, "client_reference": "ref-lost"})
    recharges.mark_unknown(db, unknown, "read timed out", start)
    with freeze_time(start + timedelta(seconds=100)):  # under two minutes: a submit may still be waiting
        assert collect(sandbox_config, db)["recharges_unknown_local_ids"] == [unknown]
    with freeze_time(start + timedelta(minutes=3)):
        status = collect(sandbox_config, db)
    assert status["recharges_unknown"] == 2 and status["recharges_unknown_local_ids"] == [killed, unknown]
    assert fresh not in status["recharges_unknown_local_ids"]  # 30 s old: its submit may still be running
    # Within 5 minutes of their submit `recharges locate` sends both again by itself if the provider shows none:
    # the line says so, never "read only" (the kill -9 review's finding 2).
    until = iso(start + timedelta(minutes=5))
    assert status["recharges_unknown_locate_replays"] == [f"#{killed} until {until}", f"#{unknown} until {until}"]
    assert (f"2 recharge(s) with an unknown outcome (local id {killed}, {unknown}): `partnerkit recharges locate "
            "--local-id N` searches the provider for each and links what it finds; if the provider shows none, it "
            "sends one submitted under 5 minutes ago again under its own Idempotency-Key by itself "
            f"(#{killed} until {until}, #{unknown} until {until}): if its first send never arrived, that performs "
            "the recharge then (once: the same key never makes a second), for a customer who may still be waiting; "
            "for an older one sending it again is a decision (`--replay` performs it now); never a new key: a new "
            "`recharges submit` of the same number "
            "and amount is refused while one is open, unless `--force`; once the provider (or its support) confirms "
            "one was never made, `partnerkit recharges close N --note TEXT` searches once more and closes it: kept, "
            "no longer named here, holding no new submit back") in status["attention"]
    assert not any("read only" in line for line in status["attention"])
    with freeze_time(start + timedelta(minutes=5)):  # the one submitted 150 s after them is 150 s old
        assert collect(sandbox_config, db)["recharges_unknown_locate_replays"] == [
            f"#{fresh} until {iso(start + timedelta(seconds=150, minutes=5))}"]
    with freeze_time(start + timedelta(minutes=8)):
        later = collect(sandbox_config, db)
    assert later["recharges_unknown_locate_replays"] == []
    assert (f"3 recharge(s) with an unknown outcome (local id {killed}, {fresh}, {unknown}): `partnerkit recharges "
            "locate --local-id N` searches the provider for each and links what it finds; if the provider shows none, "
            "sending it again under its own Idempotency-Key is a decision (`--replay` performs it now if its first "
            "send never arrived); never a new key") in " ".join(later["attention"])

    listed = CliRunner().invoke(cli, ["recharges", "list", "--format", "json"], env=config_as_env(sandbox_config))
    assert [r["local_id"] for r in json.loads(listed.output)] == [fresh, unknown, killed]  # newest first


def test_recharges_are_listed_newest_first_by_our_clock_when_the_providers_runs_ahead(sandbox_config, db,
                                                                                       sandbox_server):
    from partnerkit.store import recharges

    with PartnerClient(sandbox_config, db) as client:
        sent = submit(sandbox_config, db, client, mobile_number="9876543211", operator_id=1, amount="100")
    sandbox_server.advance(6 * 3600)  # the provider's clock (a sped-up sandbox) hours ahead of ours
    with PartnerClient(sandbox_config, db) as client:
        later = submit(sandbox_config, db, client, mobile_number="9876543212", operator_id=1, amount="100")
    assert recharges.get(db, later.local_id)["provider_created_at"] > recharges.get(db, sent.local_id)["provider_created_at"]
    killed = recharges.record_intent(db, idempotency_key="idem-newest-0001", mobile_number="9876543213", operator_id=1,
                                     amount=Decimal("100"), client_reference="ref-newest", submitted_at=utcnow())
    assert [r["local_id"] for r in recharges.list_rows(db)] == [killed, later.local_id, sent.local_id]


def test_status_names_the_recharges_locate_sends_again_by_locates_own_window():
    """partnerkit does not import reconcile: `status` keeps locate's REPLAY_WINDOW as its own constant."""
    from partnerkit.status._facts import LOCATE_REPLAY_WINDOW
    from reconcile.locate import REPLAY_WINDOW

    assert LOCATE_REPLAY_WINDOW == REPLAY_WINDOW
