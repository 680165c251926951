"""A world for the provider-fault tests: the real sandbox on loopback, the real kit, one virtual clock.

Time is frozen with freezegun for the kit (budget, jobs, signatures) and the sandbox's own clock is
frozen too (speed 0); `World.advance(s)` moves both together. The client's backoff sleeps go through
`World.sleep`, which advances that clock instead of waiting, so minutes of a faulty provider take a
fraction of a second. Jobs run through the worker's own `JobRunner` (its own connection and client per
job, never raising), as the scheduler runs them. The sandbox's faults are switched through its HTTP
control API, as an operator (or bench/soak) would.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterator

import requests

from partnerkit.client import PartnerClient
from partnerkit.client._http import RetryPolicy
from partnerkit.config import load_config
from partnerkit.money import from_cents
from partnerkit.store import open_db
from reconcile.worker_jobs import JOBS, JobRunner
from sandbox import SandboxServer, SandboxSettings
from tests.sandbox_serving import start_sandbox

START = datetime(2025, 3, 10, 10, 0, 0, tzinfo=timezone.utc)
ORDER_DETAIL = "GET /api/v1/orders/:id"
ORDER_LIST = "GET /api/v1/orders"
ORDER_CREATE = "POST /api/v1/orders"
RECHARGE_LIST = "GET /api/v1/recharges"
RECHARGE_ONE = "GET /api/v1/recharges/:id"
SUBMIT = "POST /api/v1/recharges"
TRANSACTIONS = "GET /api/v1/transactions"
WALLETS = "GET /api/v1/wallets"
SPECS = {spec.id: spec for spec in JOBS}

# One spec per fault, as the tests switch them on (scope added by each test).
FAULTS = {
    "http_500": {},
    "rate_limit": {"seconds": 120},
    "slow": {"seconds": 1.5},
    "malformed_json": {},
}


class World:
    """Sandbox + config + database + virtual clock (use as a context manager inside freeze_time)."""

    def __init__(self, tmp_path, frozen, *, hourly_budget: int = 1000, timeout_s: float = 2.0,
                 retry: RetryPolicy | None = None, **settings: Any) -> None:
        self.frozen = frozen
        base = dict(speed=0, start=START, processing_delay_s=20, order_fulfilment_delay_s=30,
                    hourly_limit=hourly_budget)
        base.update(settings)
        self.server = SandboxServer(SandboxSettings(**base), background=False)
        self.sb = self.server.sandbox
        self.key = self.server.clients[0].key
        self.config = load_config(environ={
            "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"),
            "PARTNERKIT_API_BASE_URL": self.server.base_url,
            "PARTNERKIT_API_KEY": self.key,
            "PARTNERKIT_API_SECRET": self.server.clients[0].secret,
            "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"),
            "PARTNERKIT_VOUCHER_KEY": "provider-faults-test-key-0123456789abcdef",
            "PARTNERKIT_HOURLY_BUDGET": str(hourly_budget),
            "PARTNERKIT_HTTP_TIMEOUT_S": str(timeout_s),
        })
        self.retry = retry or RetryPolicy(max_attempts=3, base=0.5, cap=4.0)
        self.db = open_db(self.config.db_path)
        self.sleeps: list[float] = []
        self.runners: dict[str, JobRunner] = {}

    # ---- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "World":
        start_sandbox(self.server, background=False)
        return self

    def __exit__(self, *exc: object) -> None:
        for runner in self.runners.values():
            runner.close()
        self.db.conn.close()
        self.server.stop()

    # ---- time ------------------------------------------------------------------------------------
    def now(self) -> datetime:
        """The kit's (frozen) now, equal to the sandbox's."""
        return datetime.now(timezone.utc)

    def advance(self, seconds: float) -> None:
        """Move the kit's clock and the sandbox's clock together, then let the sandbox do what is due."""
        self.frozen.tick(timedelta(seconds=seconds))
        self.server.advance(seconds)

    def sleep(self, seconds: float) -> None:
        """The client's backoff: recorded, then virtual."""
        self.sleeps.append(seconds)
        self.advance(seconds)

    # ---- the kit ---------------------------------------------------------------------------------
    def client(self, purpose: str = "test", *, wait: bool = False, timeout: float | None = None) -> PartnerClient:
        """A real client sharing the test database's budget, backoff on the virtual clock."""
        return PartnerClient(self.config, self.db, purpose=purpose, wait_for_budget=wait, retry=self.retry,
                             sleep=self.sleep, timeout=timeout)

    def _job_client(self, config, db, purpose):
        return PartnerClient(config, db, purpose=purpose, wait_for_budget=False, retry=self.retry,
                             sleep=self.sleep)

    def run(self, job_id: str) -> dict:
        """Run one job of the worker's table once, exactly as the scheduler does; its log record."""
        runner = self.runners.get(job_id)
        if runner is None:
            runner = self.runners[job_id] = JobRunner(self.config, SPECS[job_id], client_factory=self._job_client)
        return runner()

    def drive(self, *job_ids: str, seconds: float, every: float | None = None) -> list[dict]:
        """Run jobs at their intervals for `seconds` of virtual time, as the scheduler would; their log
        records, stamped with the time and the API calls each made. Bounded loop.

        The clock steps by the shortest interval, or by `every` when that is longer: a job then runs
        at the first step after it is due (at most `every` late), never more often than its interval.
        """
        due = {job_id: self.now() for job_id in job_ids}
        step = max(every or 0, min(SPECS[j].every_s for j in job_ids))
        records = []
        end = self.now() + timedelta(seconds=seconds)
        for _ in range(int(seconds / step) + 1):
            if self.now() >= end:
                break
            for job_id in job_ids:
                if self.now() < due[job_id]:
                    continue
                before = self.calls()
                record = self.run(job_id)
                record["at"] = self.now()
                record["calls"] = self.calls() - before
                records.append(record)
                due[job_id] = self.now() + timedelta(seconds=SPECS[job_id].every_s)
            self.advance(step)
        return records

    # ---- the provider ----------------------------------------------------------------------------
    def control(self, method: str, path: str, body: Any = None) -> Any:
        response = requests.request(method, f"{self.server.base_url}/sandbox{path}", json=body, timeout=5)
        assert response.status_code < 300, response.text
        return response.json()

    @contextmanager
    def fault(self, name: str, **spec: Any) -> Iterator[None]:
        """The provider misbehaves inside the block (switched through the control API), then recovers."""
        self.control("PUT", f"/faults/{name}", spec)
        try:
            yield
        finally:
            self.control("DELETE", f"/faults/{name}")

    def calls(self, template: str | None = None) -> int:
        """API calls the sandbox has answered so far (of one endpoint template)."""
        with self.sb.lock:
            return sum(self.sb.calls.values()) if template is None else self.sb.calls.get(template, 0)

    def injected(self, name: str) -> int:
        with self.sb.lock:
            return self.sb.faults_injected.get(name, 0)

    def budget_used(self) -> int:
        """Requests taken from the shared general budget in the last hour (all purposes)."""
        return self.client().budget.usage()["general"]["used"]

    def general_calls(self) -> int:
        """API calls the sandbox answered that count against partnerkit's general budget: all of them, order
        creations included (the safe reading of the document's Limits, which the sandbox does not share)."""
        return self.calls()

    # ---- provider-side records (the truth) and partnerkit's copy -----------------------------------------
    def provider_recharges(self) -> dict[int, tuple[str, Decimal]]:
        with self.sb.lock:
            return {rc.id: (rc.status, rc.payable) for rc in self.sb.recharges.values() if rc.client_key == self.key}

    def provider_orders(self) -> dict[int, str]:
        with self.sb.lock:
            return {o.id: o.status for o in self.sb.orders.values() if o.client_key == self.key}

    def provider_transactions(self) -> dict[str, Decimal]:
        with self.sb.lock:
            return {str(t.id): (t.amount if t.direction == "CREDIT" else -t.amount)
                    for t in self.sb.transactions.values() if t.client_key == self.key}

    def provider_codes(self, order_id: int) -> list[str]:
        with self.sb.lock:
            return sorted(v.card_number for v in self.sb.orders[order_id].vouchers)


def local_recharges(world: World) -> dict[int, dict]:
    """partnerkit's recharges known to the provider: provider id -> status, payable, last_error."""
    rows = world.db.execute("SELECT provider_id, status, payable_cents, last_error FROM recharges"
                            " WHERE provider_id IS NOT NULL").fetchall()
    return {r[0]: {"status": r[1], "payable": from_cents(r[2]), "last_error": r[3]} for r in rows}


def local_transactions(world: World) -> dict[str, Decimal]:
    """partnerkit's ledger: transaction id -> signed amount."""
    return {r[0]: from_cents(r[1]) for r in world.db.execute("SELECT id, amount_cents FROM transactions")}


def local_orders(world: World) -> dict[int, str]:
    """partnerkit's orders: id -> status."""
    return dict(world.db.execute("SELECT id, status FROM orders").fetchall())
