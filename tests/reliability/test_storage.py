"""Storage faults on the real stack: the database locked beyond the busy timeout, the disk full, the
report directory unwritable. The receiver answers 503 (with Retry-After) and never 200 for what it
did not store; the worker's jobs fail with one log line each, the process stays up, and the next
run after the fault is gone does the work, once.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from partnerkit.client import PartnerClient
from partnerkit.config import load_config
from partnerkit.store import open_db
from partnerkit.store import vouchers as voucher_store
from reconcile.sync import RECHARGE_PAGE
from tests.reliability.crash_stack import CrashStack, Gate, wait_until
from tests.reliability.storage_faults import (fill, held_write_lock, remount, signed_webhook, tiny_filesystem,
                                              truncate_wal)

pytest.importorskip("sandbox.testing")
from sandbox.settings import SandboxSettings  # noqa: E402


def _settings(**overrides) -> SandboxSettings:
    # 30x: webhook retries 2, 4, 8 and 16 real seconds apart (30 s before a delivery fails for good);
    # an order's fulfilment (D = 30 sandbox seconds) takes one real second.
    values = dict(speed=30.0, allow_http_webhooks=True, order_fulfilment_delay_s=30, hourly_limit=100_000)
    values.update(overrides)
    return SandboxSettings(**values)


def _creator(stack: CrashStack, tmp_path: Path) -> PartnerClient:
    """A client for the partner's own order creation, on its own scratch database (ours is the broken one)."""
    config = load_config(environ={**stack.env, "PARTNERKIT_DB": str(tmp_path / "creator.db")})
    return PartnerClient(config, open_db(config.db_path), purpose="test")


def _attempts(stack: CrashStack, order_id: int) -> list[tuple[str, int | None]]:
    return [(d["event_id"], a["response_status"]) for d in stack.deliveries() if d["order_id"] == order_id
            for a in d["attempts"]]


def _acknowledged(stack: CrashStack) -> Counter:
    return Counter(d["event_id"] for d in stack.deliveries() for a in d["attempts"]
                   if a["response_status"] is not None and 200 <= a["response_status"] < 300)


def _inbox(stack: CrashStack) -> dict[str, int]:
    return dict(stack.db.execute("SELECT dedup_key, duplicate_count FROM inbox").fetchall())


def _assert_acknowledged_means_stored_once(stack: CrashStack) -> None:
    """Each acknowledged event is one inbox row; its later deliveries are counted as duplicates."""
    acked, inbox = _acknowledged(stack), _inbox(stack)
    attempts = Counter(d["event_id"] for d in stack.deliveries() for _ in d["attempts"])
    assert set(acked) <= set(inbox), "an event was acknowledged but not stored"
    for event_id, times in acked.items():
        assert times - 1 <= inbox[event_id] <= attempts[event_id] - 1, f"{event_id}: {times} acks, one row"


def test_a_database_locked_past_the_busy_timeout_gets_503_then_the_retry_is_stored_once(tmp_path):
    # 60x: retries 1, 2, 4, 8 s apart. D = one sandbox hour: the order stays PENDING, two events to deliver.
    with CrashStack(tmp_path, _settings(speed=60.0, order_fulfilment_delay_s=3600)) as stack:
        stack.register_webhook()
        stack.start_receiver(workers=2)
        creator = _creator(stack, tmp_path)
        webhook_url = stack.receiver_url + "/webhooks/partner"
        with held_write_lock(stack.config.db_path):
            order = creator.create_order(product_id=6, denomination=250, quantity=1, ref="locked-1").id
            refused = signed_webhook(webhook_url, stack.alpha.signing_secret, event_id="evt_locked_direct")
            ready = stack.get("/readyz")
            # Both events tried (each waits out the receiver's 2 s busy timeout) while the lock is held.
            wait_until(lambda: len({e for e, _ in _attempts(stack, order)}) == 2,
                       timeout=30, step=0.1, what="the provider's attempts against the locked database")
            while_locked = _attempts(stack, order)
        wait_until(lambda: all(d["status"] == "delivered" for d in stack.deliveries()), timeout=30, step=0.2,
                   what="the provider's retries after the lock is released")
        resent = signed_webhook(webhook_url, stack.alpha.signing_secret, event_id="evt_locked_direct")
        after = _attempts(stack, order)
        _assert_acknowledged_means_stored_once(stack)
        inbox = _inbox(stack)
        receiver_log = stack.receiver.log()
        creator.close()

    assert refused.status_code == 503 and refused.headers["Retry-After"] == "60"
    assert refused.json() == {"status": "unavailable"}
    assert ready.status_code == 503
    assert {status for _, status in while_locked} == {503}, "never a 200 for what was not stored"
    assert resent.status_code == 200 and resent.json() == {"status": "accepted"}, "the 503'd event was not kept"
    events = {event_id for event_id, _ in after}
    assert events <= set(inbox) and all(inbox[e] == 0 for e in events), "each event stored exactly once"
    assert [s for _, s in after].count(200) == len(events)
    assert "Traceback" not in receiver_log


def _yesterday() -> datetime:
    return datetime.now(timezone.utc).replace(hour=10, minute=0, second=0, microsecond=0) - timedelta(days=1)


def _plant_yesterday(stack: CrashStack) -> None:
    """A legacy recharge and its debit on the day the nightly report covers."""
    stack.sandbox_control("POST", "recharges/legacy", {
        "status": "DELIVERED", "amount": 300, "mobile_number": "9811100001", "operator_id": 1,
        "created_at": _yesterday().isoformat(), "with_transaction": True})


def _job_lines(log: str) -> list[dict]:
    """The worker's one-line-per-run records."""
    lines = []
    for line in log.splitlines():
        if line.startswith("{") and '"job": ' in line:
            record = json.loads(line)
            if "outcome" in record:
                lines.append(record)
    return lines


FULL = "database or disk is full"


@pytest.mark.slow  # about 25 s: a voucher fetch's back-off after a provider error is 10 s
def test_a_full_disk_gets_503_and_failed_jobs_then_everything_is_done_once_space_is_back(tmp_path):
    from reconcile.recharges import submit

    today, day = datetime.now(timezone.utc).date().isoformat(), _yesterday().date().isoformat()
    # The worker's first sync reads and its order catch-up read are held until the disk is full, so
    # each job meets the full disk when it writes what it read. The two syncs take turns
    # (reconcile.jobs._SYNCING): whichever starts first is held at its gate while the other waits for
    # it (the nightly run) or skips its turn (sync-recent, whose next turn is 15 minutes away).
    gates = (Gate("GET", r"^/api/v1/recharges$",
                  query=lambda a: a.get("limit") == str(RECHARGE_PAGE) and a.get("to_date") == today),
             Gate("GET", r"^/api/v1/recharges$",
                  query=lambda a: a.get("limit") == str(RECHARGE_PAGE) and a.get("to_date") == day),
             Gate("GET", r"^/api/v1/orders$"))
    disk = tmp_path / "disk"
    # The sandbox clock stays at real time here (the poller ages recharges by the provider's created_at),
    # so the retry schedule is shortened instead: attempts 0, 1, 3, 7 and 15 seconds after the first.
    settings = _settings(speed=1.0, order_fulfilment_delay_s=1, webhook_retry_delays_s=(1, 2, 4, 8))
    with tiny_filesystem(disk, "16m"), CrashStack(
            tmp_path, settings, gates=gates, db_path=disk / "partnerkit.db", report_dir=disk / "reports",
            extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        stack.register_webhook()
        stack.start_receiver(workers=2)
        creator = _creator(stack, tmp_path)
        _plant_yesterday(stack)
        # Order A's first voucher fetch meets a provider error: the job is released, due again in 10 s.
        stack.sandbox_control("PATCH", "settings", {"faults": ["order_detail"]})
        stack.start_worker()
        order_a = creator.create_order(product_id=6, denomination=250, quantity=2, ref="full-a").id
        recent_gate, nightly_gate, orders_gate = gates
        orders_gate.wait_held(timeout=20)
        wait_until(lambda: recent_gate.held.is_set() or nightly_gate.held.is_set(), timeout=20, step=0.05,
                   what="the first sync held at its gate")
        wait_until(lambda: stack.db.execute("SELECT attempts, lease_owner FROM jobs WHERE order_id = ?",
                                            (order_a,)).fetchone() in [(1, None)],
                   timeout=20, step=0.1, what="order A's failed first fetch")
        stack.sandbox_control("PATCH", "settings", {"faults": []})
        # A recharge that never settles (last digit 8): due for a read 5 s after its submit, and each
        # read first takes budget, a write.
        submit(stack.config, stack.db, stack.client, mobile_number="9876500018", operator_id=1, amount=120)

        truncate_wal(stack.config.db_path)
        filler = fill(disk)
        for gate in gates:
            gate.open()
        refused = signed_webhook(stack.receiver_url + "/webhooks/partner", stack.alpha.signing_secret)

        def failed_jobs() -> set:
            return {r["job"] for r in _job_lines(stack.worker.log()) if r["outcome"] == "error" and FULL in str(r["result"])}

        every_job = {"poll-recharges", "fetch-vouchers", "catch-up-orders", "sync-recent", "nightly-report"}
        # sync-recent meets the disk when it went first; else it skipped its turn beside the nightly sync. Its job
        # line says which: the gate held first does not, since the nightly sync reads through today too, and its
        # request then matches the recent gate (a sync-recent that started late on a loaded machine).
        recent_first = wait_until(lambda: _sync_recent_went_first(stack), timeout=30, step=0.2,
                                  what="sync-recent's first run")[0]
        meeting = every_job if recent_first else every_job - {"sync-recent"}
        wait_until(lambda: failed_jobs() == meeting, timeout=30, step=0.2, what="every job meeting the full disk")
        order_b = creator.create_order(product_id=6, denomination=250, quantity=2, ref="full-b").id
        wait_until(lambda: _attempts(stack, order_b), timeout=20, step=0.1, what="order B's first delivery attempt")
        worker_alive = stack.worker.alive()
        while_full = _attempts(stack, order_b)
        full_log = stack.worker.log()

        filler.unlink()  # space is back
        orders = (order_a, order_b)

        def recovered() -> bool:
            provider = stack.sandbox_orders()
            return (all(d["status"] == "delivered" for d in stack.deliveries())
                    and all(voucher_store.count(stack.db, o) == len(provider[o]["codes"]) == 2 for o in orders)
                    and not stack.db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()[0])

        wait_until(recovered, timeout=40, step=0.2, what="deliveries stored and vouchers fetched once space is back")
        back_log = stack.worker.log()
        assert stack.worker.stop() == 0  # SIGTERM: a clean exit, lease released
        # Every job's next run succeeds: one pass of each (cron's `worker --once`); in the long-running
        # worker the syncs come back within 15 minutes and the report check within the hour.
        once = stack.run_partnerkit("worker", "--once", "--format", "json")
        _assert_acknowledged_means_stored_once(stack)
        reports = sorted(p.name for p in (disk / "reports").iterdir())
        creator.close()

    assert refused.status_code == 503 and refused.headers["Retry-After"] == "60"
    assert while_full and {status for _, status in while_full} == {503}, "never a 200 for what was not stored"
    assert worker_alive and "Traceback" not in full_log
    errors = [r for r in _job_lines(full_log) if r["outcome"] == "error"]
    assert errors and all(FULL in r["result"] for r in errors), "each failure is one line naming the cause"
    # One ERROR per job for the whole episode (reconcile.worker_jobs: the 3- and 5-second jobs logged one a run),
    # and the job that stored the vouchers once space was back says the episode is over.
    assert set(Counter(r["job"] for r in errors).values()) == {1}, Counter(r["job"] for r in errors)
    assert "job fetch-vouchers: the database can be written again; its full or read-only filesystem cleared after " \
        in back_log
    if not recent_first:
        assert any(r["job"] == "sync-recent" and "skipped" in str(r["result"]) for r in _job_lines(full_log))
    assert once.returncode == 0, once.stderr[-2000:]
    # prune-events ran once at the worker's start, before the disk filled (every 6 h after that).
    assert {r["job"]: r["outcome"] for r in json.loads(once.stdout)} == dict.fromkeys(every_job | {"prune-events"}, "ok")
    assert reports == [f"partnerkit-report-{day}.{ext}" for ext in ("csv", "html", "json")]


def _sync_recent_went_first(stack: CrashStack) -> tuple[bool] | None:
    """(True,) once sync-recent's first run failed on the full disk, (False,) once it skipped its turn beside the
    nightly sync; None before its first run ended."""
    for record in _job_lines(stack.worker.log()):
        if record["job"] == "sync-recent":
            return (record["outcome"] == "error",)
    return None


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_an_unwritable_report_directory_fails_the_nightly_cleanly(tmp_path, fault):
    reports = tmp_path / "reports"
    with tiny_filesystem(reports, "1m"), CrashStack(tmp_path, _settings(speed=1.0), report_dir=reports,
                                                     extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        _plant_yesterday(stack)
        if fault == "read-only":
            remount(reports, read_only=True)
        else:
            fill(reports)
        failed = stack.run_partnerkit("worker", "--once", "--format", "json")
        left_behind = sorted(p.name for p in reports.iterdir() if p.name != "filler.bin")

    outcomes = {r["job"]: r for r in json.loads(failed.stdout)}
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    cause = "Read-only file system" if fault == "read-only" else "No space left on device"
    assert outcomes["nightly-report"]["outcome"] == "error" and cause in outcomes["nightly-report"]["result"]
    assert f"PARTNERKIT_REPORT_DIR {reports}" in outcomes["nightly-report"]["result"]  # which disk, by its setting
    assert {job for job, r in outcomes.items() if r["outcome"] != "ok"} == {"nightly-report"}, "the rest ran"
    assert left_behind == [], "no half-written report or temporary file"


def test_the_next_run_writes_the_report_an_unwritable_directory_refused(tmp_path):
    """reconcile/jobs.py report_day: the report row is saved before the files, so the day is never due again."""
    reports = tmp_path / "reports"
    day = _yesterday().date().isoformat()
    with tiny_filesystem(reports, "1m"), CrashStack(tmp_path, _settings(speed=1.0), report_dir=reports,
                                                     extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        _plant_yesterday(stack)
        remount(reports, read_only=True)
        failed = stack.run_partnerkit("worker", "--once", "--format", "json")
        remount(reports, read_only=False)
        retried = stack.run_partnerkit("worker", "--once", "--format", "json")
        written = sorted(p.name for p in reports.iterdir())
    assert failed.returncode == 1 and retried.returncode == 0
    assert written == [f"partnerkit-report-{day}.{ext}" for ext in ("csv", "html", "json")]


def test_a_fetch_that_could_not_store_its_vouchers_is_retried_as_soon_as_space_is_back(tmp_path):
    """partnerkit/vouchers/_fetches.py: a StorageError after the read leaves the job leased for FetchPolicy.lease_s (120 s)."""
    fetch = Gate("GET", r"^/api/v1/orders/\d+$")
    disk = tmp_path / "disk"
    settings = _settings(speed=1.0, order_fulfilment_delay_s=0.2, webhook_retry_delays_s=(1, 2, 4, 8))
    with tiny_filesystem(disk, "16m"), CrashStack(tmp_path, settings, gates=(fetch,),
                                                  db_path=disk / "partnerkit.db") as stack:
        stack.register_webhook()
        stack.start_receiver(workers=2)
        creator = _creator(stack, tmp_path)
        order = creator.create_order(product_id=6, denomination=250, quantity=2, ref="claimed-then-full").id
        # The worker starts once the delivery's webhook has made the fetch job: its first fetch run claims it.
        wait_until(lambda: stack.db.execute("SELECT COUNT(*) FROM jobs WHERE order_id = ?", (order,)).fetchone()[0],
                   timeout=20, step=0.05, what="the fetch job of the order's delivery")
        stack.start_worker()
        fetch.wait_held(timeout=20)  # the job is claimed, the detail is on its way
        truncate_wal(stack.config.db_path)
        filler = fill(disk)
        fetch.open()
        wait_until(lambda: '"job fetch-vouchers error: the database cannot be written' in stack.worker.log(),
                   timeout=10, what="the failed store")
        filler.unlink()
        wait_until(lambda: voucher_store.count(stack.db, order) == 2, timeout=15, step=0.2,
                   what="the vouchers stored by the next runs")
        creator.close()


def test_readyz_is_503_while_the_disk_is_full(tmp_path):
    """partnerkit/store/inbox.py probe_write rolls back, so it never writes a WAL frame and a full disk passes."""
    disk = tmp_path / "disk"
    with tiny_filesystem(disk, "16m"), CrashStack(tmp_path, _settings(), db_path=disk / "partnerkit.db") as stack:
        stack.start_receiver(workers=1)
        truncate_wal(stack.config.db_path)
        filler = fill(disk)
        refused = signed_webhook(stack.receiver_url + "/webhooks/partner", stack.alpha.signing_secret)
        ready = stack.get("/readyz")
        filler.unlink()
        ready_again = stack.get("/readyz")
    assert refused.status_code == 503
    assert ready.status_code == 503, "/readyz said ready while no event could be stored"
    assert ready_again.status_code == 200


def test_a_killed_gunicorn_master_takes_its_web_workers_along(tmp_path):
    """receiver/gunicorn_app.py: orphaned sync workers serve on (holding the port) until their timeout/2 check."""
    from tests.reliability.crash_stack import alive

    with CrashStack(tmp_path, _settings()) as stack:
        stack.start_receiver(workers=2)
        workers = stack.gunicorn_workers()
        stack.receiver.kill()  # SIGKILL the master only
        # Gone at once, by the parent-death signal: an orphan would find out itself, within 15 s, and say so.
        # That line, not a clock, tells the two apart; the bound is for a busy machine (or a broken run).
        wait_until(lambda: not any(alive(pid) for pid in workers), timeout=60, step=0.1,
                   what="the dead master's web workers gone")
        assert "Parent changed, shutting down" not in stack.receiver.log()
        stack.start_receiver(workers=2)  # the port is free for the restarted receiver
