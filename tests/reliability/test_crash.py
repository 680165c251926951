"""Crash faults on the real stack: SIGKILL a gunicorn worker and the partnerkit worker while webhooks,
voucher fetches, recharge polls and the nightly reconcile are under way; nothing acknowledged is lost,
nothing is done twice, and the next run finishes what the killed one started.

The sandbox runs at 120x (docs/sandbox.md): its 0/1/2/4/8-minute webhook retries come 0.5, 1, 2 and
4 real seconds apart, and an order's fulfilment (D = 60 sandbox seconds) takes half a real second.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from partnerkit.client import PartnerClient
from partnerkit.config import load_config
from partnerkit.crypto import load_cipher
from partnerkit.store import open_db
from partnerkit.store import reports as report_store
from partnerkit.store import vouchers as voucher_store
from partnerkit.vouchers import unseal
from reconcile.sync import RECHARGE_PAGE
from tests.reliability.crash_stack import CrashStack, Gate, wait_until

pytest.importorskip("sandbox.testing")
from sandbox.settings import SandboxSettings  # noqa: E402

SPEED = 120.0


def _settings(**overrides) -> SandboxSettings:
    values = dict(speed=SPEED, allow_http_webhooks=True, order_fulfilment_delay_s=60, processing_delay_s=30,
                  hourly_limit=100_000)
    values.update(overrides)
    return SandboxSettings(**values)


def _local_codes(stack: CrashStack, order_id: int) -> list[str]:
    cipher = load_cipher(stack.config)
    return sorted(unseal(cipher, row)["card_number"] for row in voucher_store.for_order(stack.db, order_id))


def _create_orders(stack: CrashStack, count: int, start: int) -> list[int]:
    """Asynchronous orders: half `partial-` (vouchers in two deliveries), half plain (one delivery)."""
    ids = []
    for n in range(start, start + count):
        if n % 2:
            created = stack.client.create_order(product_id=2, denomination=500, quantity=4, ref=f"partial-crash-{n}")
        else:
            created = stack.client.create_order(product_id=6, denomination=250, quantity=3, ref=f"crash-{n}")
        ids.append(created.id)
    return ids


def _acknowledged(deliveries: list[dict]) -> Counter:
    """event_id -> how many attempts the receiver answered with a 2xx."""
    return Counter(d["event_id"] for d in deliveries for a in d["attempts"]
                   if a["response_status"] is not None and 200 <= a["response_status"] < 300)


def _stream_with_kills(tmp_path, *, rounds: int, per_batch: int, chaos: bool) -> None:
    """Orders stream in while a web worker and the worker are SIGKILLed `rounds` times; then check everything."""
    # In each round, the worker's third order-detail read (a voucher fetch) after the gate is armed is
    # held until the worker is dead.
    fetch = Gate("GET", r"^/api/v1/orders/\d+$", armed=False)
    with CrashStack(tmp_path, _settings(), gates=(fetch,)) as stack:
        stack.register_webhook(chaos=chaos)  # chaos: deliveries reordered, half of them sent twice
        stack.start_receiver(workers=2)
        stack.start_worker()
        from reconcile.recharges import submit

        submitted = [submit(stack.config, stack.db, stack.client, mobile_number=f"98765432{n}5", operator_id=1,
                            amount=100 + n) for n in range(3)]
        order_ids: list[int] = []
        kills = []
        for _ in range(rounds):
            order_ids += _create_orders(stack, per_batch, len(order_ids))
            web_victim, in_flight = stack.kill_gunicorn_worker_in_flight()
            order_ids += _create_orders(stack, per_batch, len(order_ids))
            fetch.arm(skip=2)
            fetch.wait_held(timeout=20)
            dead = stack.worker
            dead.kill()  # SIGKILL while its voucher fetch is in flight: its claimed jobs stay leased
            fetch.open()
            orphaned = stack.db.execute("SELECT COUNT(*) FROM jobs WHERE lease_owner LIKE ?",
                                        (f"%:{dead.pid}:%",)).fetchone()[0]
            kills.append((web_victim, in_flight, orphaned))
            order_ids += _create_orders(stack, per_batch, len(order_ids))  # the stream goes on while no worker runs
            wait_until(lambda: len(stack.gunicorn_workers()) == 2, timeout=60, what="gunicorn's replacement worker")
            stack.start_worker()

        def settled() -> bool:
            provider = stack.sandbox_orders()
            if any(provider[o]["status"] != "DELIVERED" for o in order_ids):
                return False
            if any(d["status"] != "delivered" or d["in_flight"] for d in stack.deliveries()):
                return False
            if stack.db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()[0]:
                return False
            if any(voucher_store.count(stack.db, o) != len(provider[o]["codes"]) for o in order_ids):
                return False
            rows = stack.db.execute("SELECT status FROM recharges").fetchall()
            return all(r[0] == "SUCCESS" for r in rows)

        wait_until(settled, timeout=60, step=0.25, what="every order delivered, fetched and every recharge settled")
        deliveries = stack.deliveries()
        acked = _acknowledged(deliveries)
        inbox = dict(stack.db.execute("SELECT dedup_key, duplicate_count FROM inbox").fetchall())
        provider = stack.sandbox_orders()
        local = {o: _local_codes(stack, o) for o in order_ids}
        jobs = stack.db.execute("SELECT state, lease_owner, COUNT(*) FROM jobs GROUP BY state, lease_owner").fetchall()
        calls = stack.sandbox_calls()
        provider_recharges = list(stack.sandbox.sandbox.recharges.values())
        respawned = stack.gunicorn_workers()
        restarted_logs = [w.log() for w in stack.workers[1:]]

    # The kills happened where they were meant to.
    assert not {victim for victim, _, _ in kills} & set(respawned) and len(respawned) == 2, "killed web workers replaced"
    assert all(orphaned > 0 for _, _, orphaned in kills), f"each killed worker held voucher fetch jobs: {kills}"
    for log in restarted_logs:
        assert "no longer running on this host; taking over" in log
        assert "claimed by the previous worker" in log
    # Every event the receiver acknowledged is stored, once (one row; every later delivery counted as a
    # duplicate, including one whose answer was lost with a killed web worker); nothing else is stored.
    assert set(acked) == set(inbox)
    sends = Counter(d["event_id"] for d in deliveries for _ in d["attempts"])  # chaos sends an attempt twice
    for event_id, times in acked.items():
        assert times - 1 <= inbox[event_id] <= sends[event_id] * (2 if chaos else 1) - 1, f"{event_id}: {times} acks"
    # Every order ends with exactly the provider's vouchers: none missing, none stored twice.
    for order_id in order_ids:
        assert local[order_id] == provider[order_id]["codes"], f"order {order_id}"
    # No job is left leased or pending, none parked; no recharge was submitted twice.
    assert {(state, owner) for state, owner, _ in jobs} == {("done", None)}
    assert calls.get("POST /api/v1/recharges") == len(submitted) == len(provider_recharges)
    assert sorted(r.status for r in provider_recharges) == ["SUCCESS"] * 3


def test_sigkill_of_a_web_worker_and_of_the_worker_mid_stream_loses_nothing_and_repeats_nothing(tmp_path):
    _stream_with_kills(tmp_path, rounds=1, per_batch=8, chaos=False)


@pytest.mark.slow
def test_repeated_sigkills_under_chaotic_duplicated_deliveries_lose_nothing_and_repeat_nothing(tmp_path):
    # 90 orders: inside the document's 100 order creations per minute.
    _stream_with_kills(tmp_path, rounds=3, per_batch=10, chaos=True)


def test_sigkill_during_a_recharge_poll_the_next_run_settles_every_recharge(tmp_path):
    # The poller's read (a list walk or a read by id; never the sync's RECHARGE_PAGE-row pages) is held until the worker is dead.
    poll = Gate("GET", r"^/api/v1/recharges(/\d+)?$", query=lambda args: args.get("limit") != str(RECHARGE_PAGE))
    # The provider settles nothing on its own: the outcomes are set after the kill, so only a read can learn them.
    with CrashStack(tmp_path, _settings(speed=1.0, processing_delay_s=3600), gates=(poll,)) as stack:
        from reconcile.recharges import submit

        outcomes = {"9876500015": "SUCCESS", "9876500026": "FAILED", "9876500037": "REVERSED", "9876500045": "SUCCESS"}
        for n, number in enumerate(outcomes):
            submit(stack.config, stack.db, stack.client, mobile_number=number, operator_id=1, amount=150 + n)
        submits = stack.sandbox_calls().get("POST /api/v1/recharges")
        stack.start_worker()
        poll.wait_held(timeout=20)  # the first poll after the 5-second mark
        stack.worker.kill()
        poll.open()
        before = dict(stack.db.execute("SELECT mobile_number, status FROM recharges").fetchall())
        for recharge in list(stack.sandbox.sandbox.recharges.values()):
            stack.sandbox_control("POST", f"recharges/{recharge.id}/settle", {"status": outcomes[recharge.mobile_number]})
        # The next run: one pass of every job, the poller first (`partnerkit worker --once`, as cron runs it).
        once = stack.run_partnerkit("worker", "--once", "--format", "json")
        after = dict(stack.db.execute("SELECT mobile_number, status FROM recharges").fetchall())
        provider = {r.mobile_number: r.status for r in stack.sandbox.sandbox.recharges.values()}
        calls = stack.sandbox_calls()

    assert set(before.values()) == {"PROCESSING"}, "the first worker died before it learned any outcome"
    assert once.returncode == 0, once.stderr[-2000:]
    assert "no longer running on this host; taking over" in once.stderr, "the dead worker's lease did not delay the run"
    poll_result = next(r for r in json.loads(once.stdout) if r["job"] == "poll-recharges")
    assert poll_result["outcome"] == "ok" and poll_result["result"]["settled"] == len(outcomes)
    assert after == provider == outcomes
    assert submits == calls.get("POST /api/v1/recharges") == len(outcomes), "resolved by reading, never by resubmitting"


def _yesterday() -> datetime:
    return datetime.now(timezone.utc).replace(hour=10, minute=0, second=0, microsecond=0) - timedelta(days=1)


def _plant_yesterday(stack: CrashStack) -> None:
    """Two legacy recharges with their debits, and a debit nobody can explain (an orphan)."""
    at = _yesterday()
    for n, status in enumerate(("DELIVERED", "RECHARGED")):
        stack.sandbox_control("POST", "recharges/legacy", {
            "status": status, "amount": 200 + n, "mobile_number": f"98111000{n}1", "operator_id": 1,
            "created_at": (at + timedelta(minutes=n)).isoformat(), "with_transaction": True})
    stack.sandbox_control("POST", "transactions", {
        "type": "ADJUSTMENT", "direction": "DEBIT", "amount": "75.00", "currency": "INR",
        "created_at": (at + timedelta(hours=1)).isoformat()})


def _report_view(report: dict) -> tuple:
    """What a report says, without when it was generated."""
    summary = {k: v for k, v in report["summary"].items() if k != "generated_at"}
    return summary, sorted((d["kind"], str(d["reference"])) for d in report["drifts"])


def test_sigkill_during_the_nightly_reconcile_the_next_run_writes_the_same_report(tmp_path):
    day = _yesterday().date().isoformat()
    # The nightly's transaction read from that day (through today; sync-recent's first run reads today alone) is held
    # until the worker is dead.
    nightly = Gate("GET", r"^/api/v1/transactions$", query=lambda args: args.get("from_date") == day)
    reports = tmp_path / "reports"
    with CrashStack(tmp_path, _settings(speed=1.0), gates=(nightly,),
                    extra_env={"PARTNERKIT_DUE_HOUR_UTC": "0"}) as stack:
        _plant_yesterday(stack)
        stack.start_worker()
        nightly.wait_held(timeout=20)
        stack.worker.kill()  # recharges and orders of the day are synced, transactions not yet, no report
        nightly.open()
        synced_before = stack.db.execute("SELECT COUNT(*) FROM recharges").fetchone()[0]
        reported_before = report_store.get_report(stack.db, day)
        stack.start_worker()
        wait_until(lambda: report_store.get_report(stack.db, day), timeout=30, step=0.2, what="the nightly report")
        from reconcile.jobs import current_report, reconcile_day

        report = current_report(stack.db, _yesterday().date())
        drift_rows = stack.db.execute("SELECT kind, reference FROM drifts").fetchall()
        # The same day reconciled once, cleanly, into a fresh database: what the crash must not change.
        clean_env = {**stack.env, "PARTNERKIT_DB": str(tmp_path / "clean.db"),
                     "PARTNERKIT_REPORT_DIR": str(tmp_path / "clean-reports")}
        clean_config = load_config(environ=clean_env)
        clean_db = open_db(clean_config.db_path)
        with PartnerClient(clean_config, clean_db) as clean_client:
            clean = reconcile_day(clean_config, clean_db, clean_client, _yesterday().date())
        clean_db.conn.close()

    assert synced_before == 2 and reported_before is None
    assert _report_view(report) == _report_view(clean)
    assert report["summary"]["recharges_total"] == 2
    # Partnerkit never submitted the planted recharges; nobody explains the adjustment.
    assert sorted(d["kind"] for d in report["drifts"]) == ["orphan_transaction", "unknown_to_partner",
                                                          "unknown_to_partner"]
    assert len(drift_rows) == len(set(drift_rows)) == 3, "no drift recorded twice across the two runs"
    written = sorted(p.name for p in reports.iterdir())
    assert written == [f"partnerkit-report-{day}.{ext}" for ext in ("csv", "html", "json")], written
