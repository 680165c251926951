"""The soak run: the real stack on loopback, a fixed load, faults on a schedule, then the count.

The stack is the demo's (partnerkit.demo.stack): the sandbox in this process, `partnerkit serve
--workers 2` under gunicorn and `partnerkit worker` as child processes on one SQLite file. Two kinds
of traffic flow at once:

- the load process (bench.soak.load) sends unique signed events at a fixed rate and retries every
  delivery that is not acknowledged, as the provider would;
- real voucher orders created on the sandbox during the run, whose webhooks the sandbox delivers
  (with its own retries, shortened to seconds) and whose vouchers the worker fetches.

Faults fire at fixed fractions of the load's duration (FAULTS). Afterwards the ground truth is read
from the sandbox's own records (deliveries, orders) and the load's results, and compared with the
database: every acknowledged event stored once, every delivered order with all its vouchers.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from partnerkit.demo.processes import group_members
from partnerkit.demo.stack import Stack, prepare_workdir

LOAD_TOKEN = "soak-load-token-7c1e2b9d4a"
RECEIVER_BUSY_S = 2.0       # partnerkit/store/db.py RECEIVER_BUSY_TIMEOUT_MS: the lock must outlast it
DRAIN_TIMEOUT_S = 150.0
DELIVERED = ("DELIVERED", "PARTIALLY_DELIVERED")


@dataclass
class Plan:
    """What one soak run does; `quick()` is the variant the slow test runs."""

    events: int = 6000
    rate: float = 40.0            # events per second from the load process
    orders: int = 30              # real voucher orders created on the sandbox during the run
    provider_fault_s: float = 15.0
    lock_s: float = RECEIVER_BUSY_S + 4.0
    seed: int = 7

    @classmethod
    def quick(cls) -> "Plan":
        return cls(events=1200, rate=30.0, orders=12, provider_fault_s=5.0)

    @property
    def duration_s(self) -> float:
        return self.events / self.rate


@dataclass
class Fault:
    at: float                 # fraction of the load's duration
    name: str
    what: str                 # one line for the table


# Fractions of the load's duration; the provider faults last Plan.provider_fault_s each.
FAULTS = (
    Fault(0.10, "kill_receiver_worker", "SIGKILL one gunicorn worker (the master respawns it)"),
    Fault(0.20, "provider_500", "provider answers 500 to every API call"),
    Fault(0.30, "provider_garbled", "provider answers with cut JSON, records missing fields and money "
                                    "with 3 decimals (a third of answers/records each)"),
    Fault(0.40, "kill_worker", "SIGKILL `partnerkit worker`, restarted 3 s later"),
    Fault(0.52, "db_locked", "database write-locked by another process past the busy timeout"),
    Fault(0.64, "provider_429", "provider answers 429 with Retry-After to every API call"),
    Fault(0.76, "provider_slow", "provider answers after the client's timeout"),
    Fault(0.86, "kill_receiver_worker", "SIGKILL one gunicorn worker again"),
)


@dataclass
class Outcome:
    plan: Plan
    load: dict = field(default_factory=dict)
    faults: list[tuple[float, str, str]] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    drained_s: float = 0.0


class Soak:
    def __init__(self, plan: Plan, workdir: Path, echo: Callable[[str], None] = print) -> None:
        self.plan = plan
        self.echo = echo
        self.stack = Stack(prepare_workdir(workdir), speed=1.0)
        self.rng = random.Random(plan.seed)
        self.provider_faults_active = threading.Event()
        self.restarting = threading.Lock()  # held while a child is down on purpose
        self.outcome = Outcome(plan)
        self.created_orders: list[int] = []
        self.order_errors: list[str] = []
        self.started = 0.0

    # ---- set-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        stack = self.stack
        stack.start_sandbox()
        # The provider's retry schedule shortened from minutes to seconds (the document's shape, 1/2/4/8,
        # kept), more attempts so that a delivery outlives every fault window, orders fulfilled in 15 s.
        stack.control("PATCH", "settings", {"webhook_retry_delays_s": [1, 2, 4, 8], "webhook_max_attempts": 12,
                                            "webhook_timeout_s": 5, "order_fulfilment_delay_s": 15})
        stack.write_config({"PARTNERKIT_WEBHOOK_TOKENS": LOAD_TOKEN})
        stack.register_webhook()
        stack.start_receiver()
        stack.start_worker()
        self.echo(f"soak: sandbox {stack.sandbox_url}, receiver {stack.receiver_url} (2 workers), worker running; "
                  f"working directory {stack.paths.workdir}")

    # ---- faults ---------------------------------------------------------------------------------

    def _note(self, name: str, what: str) -> None:
        at = time.monotonic() - self.started
        self.outcome.faults.append((round(at, 1), name, what))
        self.echo(f"soak: t={at:5.1f} s fault {name}: {what}")

    def _receiver_workers(self) -> list[int]:
        master = self.stack.receiver.pid
        return [pid for pid in group_members(master) if pid != master]

    def kill_receiver_worker(self, fault: Fault) -> None:
        workers = self._receiver_workers()
        if not workers:
            self._note(fault.name, "no gunicorn worker found (skipped)")
            return
        victim = self.rng.choice(workers)
        os.kill(victim, signal.SIGKILL)
        self._note(fault.name, f"{fault.what}: pid {victim}")

    def kill_worker(self, fault: Fault) -> None:
        worker = self.stack.worker
        assert worker is not None and worker.process is not None
        pid = worker.process.pid
        with self.restarting:
            os.killpg(pid, signal.SIGKILL)
            worker.process.wait(timeout=10)
            self._note(fault.name, f"{fault.what}: pid {pid}")
            time.sleep(3)
            self.stack.start_worker()

    def db_locked(self, fault: Fault) -> None:
        conn = sqlite3.connect(self.stack.paths.db, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            self._note(fault.name, f"{fault.what}: {self.plan.lock_s:.0f} s")
            # One second in, both gunicorn workers are inside a request, waiting on the lock: kill one
            # there, so the connection drops with nothing committed and the sender must retry.
            time.sleep(1.0)
            self.kill_receiver_worker(Fault(0, "kill_receiver_worker_mid_request",
                                            "SIGKILL a gunicorn worker inside a request (waiting on the lock)"))
            time.sleep(max(0.0, self.plan.lock_s - 1.0))
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    def _provider_fault(self, fault: Fault, settings: dict) -> None:
        self.provider_faults_active.set()
        try:
            self.stack.control("PATCH", "settings", settings)
            self._note(fault.name, f"{fault.what}: {self.plan.provider_fault_s:.0f} s")
            time.sleep(self.plan.provider_fault_s)
        finally:
            self.stack.control("PATCH", "settings", {"faults": {}})
            self.provider_faults_active.clear()

    def provider_500(self, fault: Fault) -> None:
        self._provider_fault(fault, {"faults": {"http_500": {}}})

    def provider_garbled(self, fault: Fault) -> None:
        self._provider_fault(fault, {"faults": {"malformed_json": {"rate": 0.3}, "missing_fields": {"rate": 0.3},
                                                "money_precision": {"rate": 0.3}}})

    def provider_429(self, fault: Fault) -> None:
        self._provider_fault(fault, {"faults": {"rate_limit": {"seconds": 2}}})

    def provider_slow(self, fault: Fault) -> None:
        self._provider_fault(fault, {"faults": {"slow": {"seconds": 12}}})

    def _run_faults(self, stop: threading.Event) -> None:
        for fault in FAULTS:
            due = self.started + fault.at * self.plan.duration_s
            if stop.wait(max(0.0, due - time.monotonic())):
                return
            getattr(self, fault.name)(fault)

    # ---- real orders ----------------------------------------------------------------------------

    def _create_orders(self, client, stop: threading.Event) -> None:
        """Orders spread over the first 70% of the run; none while a provider fault is switched on."""
        from partnerkit.errors import PartnerKitError

        spacing = 0.7 * self.plan.duration_s / max(1, self.plan.orders)
        for index in range(self.plan.orders):
            if stop.wait(spacing):
                return
            while self.provider_faults_active.is_set() and not stop.is_set():
                time.sleep(0.2)
            ref = f"partial-soak-{index}" if index % 3 == 0 else f"soak-{index}"
            try:
                created = client.create_order(product_id=1, denomination=100, quantity=self.rng.randint(2, 6),
                                              ref=ref)
                self.created_orders.append(int(created.id))
            except PartnerKitError as exc:
                self.order_errors.append(f"{type(exc).__name__}: {exc}"[:200])

    # ---- the run --------------------------------------------------------------------------------

    def run(self) -> Outcome:
        from partnerkit.client import PartnerClient
        from partnerkit.store import open_db

        plan = self.plan
        load_out = self.stack.paths.workdir / "load.json"
        url = f"{self.stack.receiver_url}{self.stack.config.webhook_path}"
        load = subprocess.Popen(
            [sys.executable, "-m", "bench.soak.load", "--url", url, "--token", LOAD_TOKEN, "--events", str(plan.events),
             "--rate", str(plan.rate), "--out", str(load_out), "--progress"],
            cwd=Path(__file__).resolve().parents[2], env=self.stack.child_env())
        self.started = time.monotonic()
        self.echo(f"soak: load process sending {plan.events} events at {plan.rate:g}/s "
                  f"(~{plan.duration_s:.0f} s), {plan.orders} voucher orders, {len(FAULTS)} faults")
        db = open_db(self.stack.config.db_path)
        client = PartnerClient(self.stack.config, db, purpose="soak")
        stop = threading.Event()
        threads = [threading.Thread(target=self._run_faults, args=(stop,), name="faults", daemon=True),
                   threading.Thread(target=self._create_orders, args=(client, stop), name="orders", daemon=True)]
        for thread in threads:
            thread.start()
        try:
            while load.poll() is None:
                self._check_children()
                time.sleep(0.5)
            for thread in threads:
                thread.join(timeout=DRAIN_TIMEOUT_S)
        finally:
            stop.set()
            if load.poll() is None:
                load.kill()
            db.conn.close()
        if load.returncode != 0:
            raise SystemExit(f"soak: the load process failed (exit {load.returncode})")
        self.outcome.load = json.loads(load_out.read_text(encoding="utf-8"))
        self.echo("soak: load finished; waiting for the provider's retries and the worker to catch up")
        self.outcome.drained_s = self._drain()
        self.outcome.counts = self.count()
        return self.outcome

    def _drain(self) -> float:
        started = time.monotonic()
        deadline = started + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline:
            counts = self.count()
            if counts["deliveries_pending"] == 0 and counts["vouchers_stored"] == counts["vouchers_expected"] \
                    and counts["orders_in_flight"] == 0:
                break
            self._check_children()
            time.sleep(1)
        return time.monotonic() - started

    def _check_children(self) -> None:
        """The receiver and the worker must be alive, except while a fault has one down on purpose."""
        if self.restarting.acquire(blocking=False):
            try:
                self.stack.check_children()
            finally:
                self.restarting.release()

    # ---- ground truth against the database ----------------------------------------------------

    def count(self) -> dict:
        sb = self.stack.sandbox.sandbox
        with sb.lock:
            ours = [d for d in sb.deliveries.values() if d.webhook_id == self.stack.webhook_id]
            acked_events = {d.event_id for d in ours if any(
                a["response_status"] is not None and 200 <= a["response_status"] < 300 for a in d.attempts)}
            attempts = sum(d.attempt_count for d in ours)
            pending = sum(1 for d in ours if d.status == "pending")
            failed = sum(1 for d in ours if d.status == "failed")
            # Every order the sandbox holds, including one whose creation answer a fault swallowed.
            orders = {oid: (o.status, len(o.vouchers)) for oid, o in sb.orders.items()}
        expected = {oid: n for oid, (status, n) in orders.items() if status in DELIVERED}
        in_flight = sum(1 for status, _ in orders.values() if status not in DELIVERED + ("FAILED", "CANCELLED"))

        load = self.outcome.load or {"results": [], "redeliveries": []}
        load_results = [r for r in load["results"] if r is not None]
        load_acked = {f"{load.get('prefix', 'soak')}-{i}" for i, r in enumerate(load["results"]) if r and r["acked"]}

        conn = sqlite3.connect(f"file:{self.stack.paths.db}?mode=ro", uri=True, timeout=30)
        try:
            stored = {row[0] for row in conn.execute("SELECT dedup_key FROM inbox")}
            stored_vouchers = dict(conn.execute("SELECT order_id, count(*) FROM vouchers GROUP BY order_id"))
            duplicates = conn.execute("SELECT coalesce(sum(duplicate_count), 0) FROM inbox").fetchone()[0]
            dead_jobs = conn.execute("SELECT count(*) FROM jobs WHERE state = 'dead'").fetchone()[0]
        finally:
            conn.close()
        acked = acked_events | load_acked
        all_statuses = [s for r in load_results for s in r["statuses"]] + \
                       [s for r in load["redeliveries"] for s in r["statuses"]]
        return {
            "events_sent": len(load["results"]) + len({d.event_id for d in ours}),
            "deliveries_attempted": sum(r["attempts"] for r in load_results) + attempts
            + sum(r["attempts"] for r in load["redeliveries"]),
            "acknowledged": len(acked),
            "stored": len(acked & stored),
            "duplicates_absorbed": duplicates,
            "lost": len(acked - stored),
            "unacknowledged": (len(load_results) - len(load_acked)) + failed,
            "deliveries_pending": pending,
            "answered_503": sum(1 for s in all_statuses if s == 503),
            "connection_errors": sum(1 for s in all_statuses if isinstance(s, str)),
            "answered_5xx_other": sum(1 for s in all_statuses if isinstance(s, int) and s >= 500 and s != 503),
            "orders_created": len(self.created_orders),
            "order_create_errors": len(self.order_errors),
            "orders_in_flight": in_flight,
            "vouchers_expected": sum(expected.values()),
            "vouchers_stored": sum(min(stored_vouchers.get(oid, 0), n) for oid, n in expected.items()),
            "vouchers_extra": sum(max(0, stored_vouchers.get(oid, 0) - n) for oid, n in expected.items()),
            "dead_jobs": dead_jobs,
            "worst_ack_ms": max((r["ack_ms"] for r in load_results if r["ack_ms"] is not None), default=0.0),
            "worst_attempt_ms": max((r["worst_ms"] for r in load_results), default=0.0),
            "p99_ack_ms": _percentile([r["ack_ms"] for r in load_results if r["ack_ms"] is not None], 0.99),
        }

    def close(self) -> None:
        self.stack.close()


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
